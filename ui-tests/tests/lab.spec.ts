// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * Harness smoke test: the test server starts and JupyterLab loads in the
 * system Chromium (independent of the jupyter-edt frontend).
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');

test('JupyterLab loads', async ({ page }, testInfo) => {
  await expect(page.locator('#jp-main-dock-panel')).toBeVisible();
  await expect(page.locator('#jp-left-stack')).toBeAttached();

  const screenshot = path.join(ARTIFACTS, 'lab-loaded.png');
  await page.screenshot({ path: screenshot });
  await testInfo.attach('lab-loaded', {
    path: screenshot,
    contentType: 'image/png'
  });
});
