// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * Under JupyterHub (project `lab-hub`, served by hub_server.py): alice-ui logs in,
 * opens her JupyterLab, whose server forwards to the shared `jupyter edt serve`,
 * and the sidebar lists the job she submitted there.
 *
 * Galata's `page` waits for a JupyterLab at every navigation, and the Hub's
 * login page is none: the test drives a plain Playwright page of the context.
 */
import { expect, test } from '@jupyterlab/galata';

const SIDEBAR_ID = 'jupyter-edt-sidebar';
const USER = 'alice-ui';

test.use({ autoGoto: false });

test('a Hub user sees her jobs from the shared service in the sidebar', async ({
  context,
  baseURL
}) => {
  const hub = new URL(baseURL ?? '').origin;
  const page = await context.newPage();
  await page.goto(`${hub}/hub/login`);
  await page.locator('#username_input').fill(USER);
  await page.locator('#password_input').fill('any');
  await page.locator('#login_submit').click();
  await page.waitForURL(/\/(hub|user)\//);
  await page.goto(`${hub}/user/${USER}/lab`);
  const tab = page.locator(`.lm-TabBar-tab[data-id="${SIDEBAR_ID}"]`);
  await expect(tab).toBeVisible({ timeout: 90 * 1000 });
  await tab.click();
  const sidebar = page.locator(`#${SIDEBAR_ID}`);
  const row = sidebar.locator('.jp-edt-jobrow', { hasText: 'from-the-hub' });
  await expect(row).toBeVisible({ timeout: 60 * 1000 });
  // the devices are the shared service's: its 4 virtual GPUs
  await expect(sidebar.locator('.jp-edt-device')).toHaveCount(4);
});
