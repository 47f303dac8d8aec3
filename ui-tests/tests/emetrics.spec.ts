// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * A WMLA program's emetrics in the live charts: a `%%edt_submit` cell runs a
 * program whose own loop writes $LOG_DIR/evaluation-metrics.txt (the lines of
 * WMLA's emetrics helper, from jupyter_edt.compat.formats.emetrics_line); the
 * notebook's job widget, then the job's detail tab, chart its train/ and test/
 * values by iteration, losses with the losses and accuracy with the metrics.
 *
 * Screenshots: artifacts/emetrics-widget.png, emetrics-detail.png.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';

const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');
const NOTEBOOK = 'edt-emetrics.ipynb';
const SIDEBAR_ID = 'jupyter-edt-sidebar';
const ITERATIONS = 12;
const SERIES = 'train/loss train/accuracy test/loss test/accuracy';

/** Train values every iteration, test values every 4th, half a second apart. */
const PROGRAM = `%%edt_submit --max-gpus 1 --name ui-emetrics
import os
import time
from jupyter_edt.compat.formats import emetrics_line

path = os.path.join(os.environ["LOG_DIR"], "evaluation-metrics.txt")
for it in range(1, ${ITERATIONS} + 1):
    time.sleep(0.5)
    lines = [emetrics_line(os.environ["DLI_EXECID"], "train", it,
                           {"loss": 2.0 / it, "accuracy": 50.0 + 4 * it}, rindex=it)]
    if it % 4 == 0:
        lines.append(emetrics_line(os.environ["DLI_EXECID"], "test", it,
                                   {"loss": 2.2 / it, "accuracy": 48.0 + 4 * it}, rindex=it))
    with open(path, "a") as f:
        f.write("".join(line + "\\n" for line in lines))
`;

function notebookJson(): string {
  const cell = (source: string) => ({
    cell_type: 'code',
    execution_count: null,
    metadata: {},
    outputs: [],
    source
  });
  return JSON.stringify({
    cells: [cell('%load_ext jupyter_edt'), cell(PROGRAM)],
    metadata: {
      kernelspec: {
        display_name: 'Python 3 (ipykernel)',
        language: 'python',
        name: 'python3'
      },
      language_info: { name: 'python' }
    },
    nbformat: 4,
    nbformat_minor: 5
  });
}

async function shot(
  target: Locator,
  name: string,
  testInfo: { attach: (n: string, o: object) => Promise<void> }
): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await target.screenshot({ path: file });
  await testInfo.attach(name, { path: file, contentType: 'image/png' });
}

/** The job panel (widget or tab) charts every emetrics series to the end. */
async function expectEmetricsCharted(panel: Locator): Promise<void> {
  await expect(panel).toHaveAttribute('data-series', SERIES);
  await expect(panel.locator('.jp-edt-job-progress-text')).toHaveText(
    `iteration ${ITERATIONS}`
  );
  // 2 / 12 and 2.2 / 12, as the panel rounds them.
  await expect(panel.locator('.jp-edt-job-loss')).toHaveText(
    'train 0.1667 · test 0.1833'
  );
  const chart = panel.locator('.jp-edt-loss-chart');
  await expect(chart.locator('canvas')).toBeVisible();
  await expect(chart).toHaveAttribute('data-points', String(ITERATIONS));
  for (const name of SERIES.split(' ')) {
    await expect(chart.locator('.u-legend')).toContainText(name);
  }
}

test.describe('emetrics', () => {
  test.setTimeout(240 * 1000);

  test("a WMLA program's emetrics show in the widget and the detail tab", async ({
    page,
    tmpPath
  }, testInfo) => {
    const problems: string[] = [];
    page.on('pageerror', error => {
      if (/jupyter[-_]edt|uplot/i.test(`${error.message}\n${error.stack}`)) {
        problems.push(`uncaught exception: ${error.message}`);
      }
    });

    const notebookPath = `${tmpPath}/${NOTEBOOK}`;
    expect(
      await page.contents.uploadContent(notebookJson(), 'text', notebookPath)
    ).toBe(true);
    expect(await page.notebook.openByPath(notebookPath)).toBe(true);
    await page.notebook.activate(NOTEBOOK);
    await page.notebook.run();

    // The notebook widget: the series appear while the program runs.
    const widget = page
      .locator('.jp-Notebook .jp-Cell')
      .nth(1)
      .locator('.jp-edt-job');
    await expect(widget).toBeVisible({ timeout: 60 * 1000 });
    await expect(widget.locator('.jp-edt-job-name')).toHaveText('ui-emetrics');
    const jobId = await widget.getAttribute('data-job-id');
    expect(jobId).toMatch(/^[0-9a-f]+$/);
    await expect(widget).toHaveAttribute('data-series', /train\/loss/, {
      timeout: 150 * 1000
    });
    await expect(widget.locator('.jp-edt-state-badge')).toHaveText(
      'SUCCEEDED',
      { timeout: 150 * 1000 }
    );
    await expectEmetricsCharted(widget);
    await shot(widget, 'emetrics-widget', testInfo);

    // The job's detail tab, opened from the sidebar, charts the same.
    await page.sidebar.openTab(SIDEBAR_ID);
    const sidebar = page.locator(`#${SIDEBAR_ID}`);
    await sidebar.getByLabel('Job state').selectOption('all');
    await sidebar.locator(`.jp-edt-jobrow[data-job-id="${jobId}"]`).click();
    const detail = page.locator(`.jp-edt-jobdetail[data-job-id="${jobId}"]`);
    await expect(detail).toBeVisible();
    await expectEmetricsCharted(detail.locator('.jp-edt-job'));
    await shot(
      page.locator('.jp-edt-jobdetail-tab'),
      'emetrics-detail',
      testInfo
    );

    expect(problems, 'no jupyter-edt errors in the browser').toEqual([]);
  });
});
