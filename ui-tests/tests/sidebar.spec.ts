// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * The "Elastic Training" sidebar lists the devices of the cluster.
 *
 * The test server (jupyter_server_test_config.py) runs the jupyter_edt server
 * extension with EDT_VIRTUAL_GPUS (default 4) virtual GPUs, so on a machine
 * without NVIDIA GPUs the sidebar shows exactly that many virtual devices.
 * Playwright runs this file against two servers: at the root URL (project
 * `lab`) and below a non-root base URL (project `lab-base-url`).
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { ConsoleMessage, Response } from '@playwright/test';

const SIDEBAR_ID = 'jupyter-edt-sidebar';
const OPEN_COMMAND = 'jupyter-edt:open-sidebar';
const VIRTUAL_GPUS = Number(process.env.EDT_VIRTUAL_GPUS || 4);
const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');

/** Whether a message is about jupyter-edt (our extension or its REST API). */
const isEdtRelated = (text: string): boolean =>
  /jupyter[-_]edt|\/edt\/api\//i.test(text);

// Navigate ourselves, after the console/network listeners are in place, so
// that errors raised while the extension activates are seen too.
test.use({ autoGoto: false });

test.describe('Elastic Training sidebar', () => {
  test('the cluster endpoint reports the virtual GPUs', async ({
    request,
    baseURL
  }) => {
    const response = await request.get(`${baseURL}/edt/api/v1/cluster`);
    expect(response.status()).toBe(200);
    const body = await response.json();
    expect(body.source).toBe('virtual');
    expect(body.devices).toHaveLength(VIRTUAL_GPUS);
    for (const device of body.devices) {
      expect(device.virtual).toBe(true);
    }
  });

  test('opens from the left side bar and lists the virtual GPUs', async ({
    page
  }, testInfo) => {
    const problems: string[] = [];
    page.on('console', (message: ConsoleMessage) => {
      if (message.type() === 'error' && isEdtRelated(message.text())) {
        problems.push(`console error: ${message.text()}`);
      }
    });
    page.on('pageerror', (error: Error) => {
      if (isEdtRelated(`${error.message}\n${error.stack ?? ''}`)) {
        problems.push(`uncaught exception: ${error.message}`);
      }
    });
    page.on('response', (response: Response) => {
      if (response.status() >= 400 && isEdtRelated(response.url())) {
        problems.push(`HTTP ${response.status()} for ${response.url()}`);
      }
    });

    await page.goto();

    // The lab extension is loaded: its command exists and its tab is in the
    // left side bar, labelled "Elastic Training".
    expect(
      await page.evaluate(
        id => window.jupyterapp.commands.hasCommand(id),
        OPEN_COMMAND
      ),
      `the jupyter-edt lab extension is loaded (command ${OPEN_COMMAND} exists)`
    ).toBe(true);
    const tab = page.sidebar.getTabLocator(SIDEBAR_ID);
    await expect(tab).toBeVisible();
    await expect(tab).toHaveAttribute('title', /Elastic Training/);

    // Open the panel by clicking its tab.
    await page.sidebar.openTab(SIDEBAR_ID);
    const sidebar = page.locator(`#${SIDEBAR_ID}.jp-edt-sidebar`);
    await expect(sidebar).toBeVisible();

    // The device list: one row per configured virtual GPU, each marked virtual.
    const list = sidebar.locator('.jp-edt-device-list');
    await expect(list).toBeVisible();
    const rows = list.locator('.jp-edt-device');
    await expect(rows).toHaveCount(VIRTUAL_GPUS);
    const ids = new Set<string>();
    for (const row of await rows.all()) {
      await expect(row).toBeVisible();
      const id = await row.getAttribute('data-device-id');
      expect(id, 'each device row has a data-device-id').toBeTruthy();
      ids.add(id as string);
      const badge = row.locator('.jp-edt-virtual-badge');
      await expect(badge).toBeVisible();
      await expect(badge).toContainText(/virtual/i);
    }
    expect(ids.size, 'device ids are distinct').toBe(VIRTUAL_GPUS);

    // The panel says that these are virtual GPUs.
    await expect(sidebar).toContainText(/virtual GPU/i);

    // The screenshot artifact: the panel alone, and the whole lab around it
    // (suffixed with the project name for the non-root base URL server).
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const suffix =
      testInfo.project.name === 'lab' ? '' : `-${testInfo.project.name}`;
    const panelShot = path.join(ARTIFACTS, `sidebar-devices${suffix}.png`);
    await sidebar.screenshot({ path: panelShot });
    await testInfo.attach('sidebar-devices', {
      path: panelShot,
      contentType: 'image/png'
    });
    const labShot = path.join(ARTIFACTS, `lab-with-sidebar${suffix}.png`);
    await page.screenshot({ path: labShot });
    await testInfo.attach('lab-with-sidebar', {
      path: labShot,
      contentType: 'image/png'
    });

    // The command opens the panel as well, once the side bar is collapsed.
    await page.sidebar.close('left');
    await expect(sidebar).toBeHidden();
    await page.evaluate(
      id => window.jupyterapp.commands.execute(id),
      OPEN_COMMAND
    );
    await expect(sidebar).toBeVisible();
    await expect(rows).toHaveCount(VIRTUAL_GPUS);

    expect(problems, 'no jupyter-edt errors in the browser').toEqual([]);
  });
});
