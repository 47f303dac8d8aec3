// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * The job widget in a notebook: a `%%edt_submit --max-gpus 2` cell submits a
 * small Trainer program; its output is the live job widget, whose loss chart
 * gains points while the job trains and whose state badge reaches SUCCEEDED.
 * After a page reload the widget (restored from the running kernel) fetches
 * the job again and shows the chart again.
 *
 * The kernel finds the test server by itself (zero configuration: the server
 * started it, and its runtime file gives the URL). The widget's data comes
 * from the REST API and the events WebSocket, not from the kernel.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { Locator, Page } from '@playwright/test';

const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');
const NOTEBOOK = 'edt-widget.ipynb';

/** The shape of tests/jobprograms.py `program()`: 3 epochs of 6 steps. */
const PROGRAM = `%%edt_submit --max-gpus 2 --name ui-widget --epochs 3
import time
import torch
from torch import nn
from torch.utils.data import Dataset
from jupyter_edt.runtime import Trainer

class Data(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long()
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        time.sleep(0.05)  # stands for work, so that the chart grows visibly
        return self.x[i], self.y[i]

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
trainer = Trainer(
    model,
    lambda: (Data(48, 1), Data(16, 2)),
    nn.functional.cross_entropy,
    lambda params: torch.optim.SGD(params, lr=0.1),
)
trainer.fit(3, 8, 4, checkpoint_every=1, micro_batch_size=2)
`;
const TOTAL_STEPS = 18;

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

/** The number of train-loss points the widget's chart holds. */
async function points(widget: Locator): Promise<number> {
  return Number((await widget.getAttribute('data-points')) ?? '0');
}

async function shot(
  page: Page,
  target: Locator,
  name: string,
  testInfo: { attach: (n: string, o: object) => Promise<void> }
): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await target.screenshot({ path: file });
  await testInfo.attach(name, { path: file, contentType: 'image/png' });
  const whole = path.join(ARTIFACTS, `${name}-lab.png`);
  await page.screenshot({ path: whole });
  await testInfo.attach(`${name}-lab`, {
    path: whole,
    contentType: 'image/png'
  });
}

test.describe('Job widget', () => {
  test.setTimeout(240 * 1000);

  test('%%edt_submit shows a live job widget that survives a reload', async ({
    page,
    tmpPath
  }, testInfo) => {
    const problems: string[] = [];
    page.on('pageerror', error => {
      if (/jupyter[-_]edt|uplot/i.test(`${error.message}\n${error.stack}`)) {
        problems.push(`uncaught exception: ${error.message}`);
      }
    });
    page.on('response', response => {
      if (response.status() >= 400 && /\/edt\/api\//.test(response.url())) {
        problems.push(`HTTP ${response.status()} for ${response.url()}`);
      }
    });

    const notebookPath = `${tmpPath}/${NOTEBOOK}`;
    expect(
      await page.contents.uploadContent(notebookJson(), 'text', notebookPath)
    ).toBe(true);
    expect(await page.notebook.openByPath(notebookPath)).toBe(true);
    await page.notebook.activate(NOTEBOOK);
    await page.notebook.run();

    // The submission cell's output is the job widget.
    const output = page.locator('.jp-Notebook .jp-Cell').nth(1);
    const widget = output.locator('.jp-edt-job');
    await expect(widget).toBeVisible({ timeout: 60 * 1000 });
    await expect(widget.locator('.jp-edt-job-name')).toHaveText('ui-widget');
    const jobId = await widget.getAttribute('data-job-id');
    expect(jobId).toMatch(/^[0-9a-f]+$/);

    // The chart gains points while the job trains, then the job succeeds.
    await expect
      .poll(() => points(widget), { timeout: 150 * 1000, intervals: [250] })
      .toBeGreaterThan(0);
    const first = await points(widget);
    await expect(widget.locator('.jp-edt-state-badge')).toHaveText(
      'SUCCEEDED',
      { timeout: 150 * 1000 }
    );
    await expect.poll(() => points(widget)).toBe(TOTAL_STEPS);
    expect(first, 'the chart grew after its first points').toBeLessThan(
      TOTAL_STEPS
    );
    const chart = widget.locator('.jp-edt-loss-chart');
    await expect(chart.locator('canvas')).toBeVisible();
    await expect(chart).toHaveAttribute('data-points', String(TOTAL_STEPS));
    // Validation per epoch shares the chart: its legend names val_loss.
    await expect(chart.locator('.u-legend')).toContainText('val_loss');
    // The allocation timeline has the job's GPUs (2 at most).
    await expect(widget.locator('.jp-edt-job-gpus')).toHaveText(/^0 \/ 2$/);
    await expect(
      widget.locator('.jp-edt-allocation-chart canvas')
    ).toBeVisible();
    await expect(widget.locator('.jp-edt-job-progress-text')).toContainText(
      'epoch 3/3'
    );
    await expect(widget.locator('.jp-edt-job-cancel')).toBeDisabled();
    await shot(page, widget, 'notebook-job-widget', testInfo);

    // Reload: the widget comes back from the running kernel and fetches the
    // job's history from the server again.
    expect(await page.notebook.save()).toBe(true);
    await page.reload({ waitForIsReady: false });
    await expect(page.locator('#jp-main-dock-panel')).toBeVisible();
    if (!(await page.notebook.isOpen(NOTEBOOK))) {
      // Galata keeps the layout in memory only: open the notebook again; its
      // session still has the kernel, which holds the widget's model.
      expect(await page.notebook.openByPath(notebookPath)).toBe(true);
    }
    const again = page
      .locator('.jp-Notebook .jp-Cell')
      .nth(1)
      .locator(`.jp-edt-job[data-job-id="${jobId}"]`);
    await expect(again).toBeVisible({ timeout: 60 * 1000 });
    await expect(again.locator('.jp-edt-state-badge')).toHaveText('SUCCEEDED');
    await expect.poll(() => points(again)).toBe(TOTAL_STEPS);
    await expect(again.locator('.jp-edt-loss-chart canvas')).toBeVisible();
    await shot(page, again, 'notebook-job-widget-reloaded', testInfo);

    // The charts follow the theme: dark, then light again.
    await page.theme.setDarkTheme();
    await expect(page.locator('body')).toHaveAttribute(
      'data-jp-theme-light',
      'false'
    );
    await expect(again.locator('.jp-edt-loss-chart canvas')).toBeVisible();
    await expect(again.locator('.jp-edt-loss-chart')).toHaveAttribute(
      'data-points',
      String(TOTAL_STEPS)
    );
    await shot(page, again, 'notebook-job-widget-dark', testInfo);
    await page.theme.setLightTheme();

    expect(problems, 'no jupyter-edt errors in the browser').toEqual([]);
  });
});

test.describe('LossChart widget', () => {
  test('charts points appended in the kernel, again after a reload', async ({
    page,
    tmpPath
  }, testInfo) => {
    const name = 'loss-chart.ipynb';
    const cell = (source: string) => ({
      cell_type: 'code',
      execution_count: null,
      metadata: {},
      outputs: [],
      source
    });
    const notebook = JSON.stringify({
      cells: [
        cell(
          'from jupyter_edt.notebook import LossChart\n' +
            'chart = LossChart(title="a training loop")\nchart'
        ),
        cell(
          'for step in range(5000):\n' +
            '    chart.append(step, loss=1 / (step + 1))\n' +
            '    if step % 1000 == 999:\n' +
            '        chart.append(step, val_loss=2 / (step + 1))\n' +
            'chart.flush()\nprint(chart.messages_sent, "messages")'
        )
      ],
      metadata: {
        kernelspec: {
          display_name: 'Python 3',
          language: 'python',
          name: 'python3'
        }
      },
      nbformat: 4,
      nbformat_minor: 5
    });
    const notebookPath = `${tmpPath}/${name}`;
    expect(
      await page.contents.uploadContent(notebook, 'text', notebookPath)
    ).toBe(true);
    expect(await page.notebook.openByPath(notebookPath)).toBe(true);
    await page.notebook.activate(name);
    await page.notebook.run();

    const widget = page.locator('.jp-edt-loss-chart-widget');
    // 5000 train points and 5 validation points, sent in a few batches
    await expect(widget).toHaveAttribute('data-points', '5005');
    await expect(widget.locator('.jp-edt-loss-chart-title')).toHaveText(
      'a training loop'
    );
    await expect(widget.locator('canvas')).toBeVisible();
    const printed = (await page.notebook.getCellTextOutput(1)) ?? [];
    const messages = Number(printed.join('').split(' ')[0]);
    expect(messages).toBeGreaterThan(0);
    expect(messages).toBeLessThan(100);
    await shot(page, widget, 'notebook-loss-chart', testInfo);

    // A reload: the model, restored from the kernel, asks for the data again.
    expect(await page.notebook.save()).toBe(true);
    await page.reload({ waitForIsReady: false });
    await expect(page.locator('#jp-main-dock-panel')).toBeVisible();
    if (!(await page.notebook.isOpen(name))) {
      expect(await page.notebook.openByPath(notebookPath)).toBe(true);
    }
    const again = page.locator('.jp-edt-loss-chart-widget');
    await expect(again).toHaveAttribute('data-points', '5005');
    await expect(again.locator('canvas')).toBeVisible();
  });
});
