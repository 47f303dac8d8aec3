// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * The loss chart reads without a mouse: a job of 72 steps whose loss falls
 * from about 0.7 to about 1e-4, in its tab. Its axes carry ticks (steps along
 * the bottom, loss up the side) and its legend the latest values while the
 * pointer is elsewhere; the "log scale" toggle above it draws the loss on a
 * log axis (other ticks: decades), and a tab opened again remembers it
 * (setting `lossScale`).
 *
 * The ticks are drawn on a canvas; the chart's node says what it drew
 * (`data-x-ticks`, `data-y-ticks`: JSON lists of the labels).
 *
 * Screenshot, a picture of the docs (artifacts/docs/, which a run's global
 * setup leaves alone; copy it to docs/): loss-chart.png.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext, Locator } from '@playwright/test';

const SIDEBAR_ID = 'jupyter-edt-sidebar';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'docs');

/** 12 epochs of 6 steps of a separable problem, learnt fast: a loss over decades. */
const PROGRAM = `import torch
from torch import nn
from torch.utils.data import TensorDataset
from jupyter_edt.runtime import Trainer

g = torch.Generator().manual_seed(1)
x = torch.randn(48, 4, generator=g) * 3
y = (x[:, 0] > 0).long()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
trainer = Trainer(
    model,
    lambda: (TensorDataset(x, y), TensorDataset(x[:16], y[:16])),
    nn.functional.cross_entropy,
    lambda params: torch.optim.SGD(params, lr=0.5),
)
trainer.fit(12, 8, 2, micro_batch_size=4)
`;
const STEPS = 72;

interface IMetric {
  type: string;
  global_step?: number;
  loss?: number;
}

async function lastStep(
  request: APIRequestContext,
  base: string,
  id: string
): Promise<number> {
  const records: IMetric[] = [];
  for (let after = 0; ;) {
    const response = await request.get(
      `${base}/edt/api/v1/jobs/${id}/metrics?after=${after}`
    );
    expect(response.status()).toBe(200);
    const page = (await response.json()) as {
      metrics: IMetric[];
      cursor: number;
    };
    if (page.metrics.length === 0) {
      break;
    }
    records.push(...page.metrics);
    after = page.cursor;
  }
  const steps = records.filter(r => r.type === 'step' && r.loss !== undefined);
  expect(steps).toHaveLength(STEPS);
  return steps[steps.length - 1].global_step as number;
}

/** The labels an axis of the chart drew (its node's data-<axis>-ticks). */
async function ticks(chart: Locator, axis: 'x' | 'y'): Promise<string[]> {
  return JSON.parse(
    (await chart.getAttribute(`data-${axis}-ticks`)) ?? '[]'
  ) as string[];
}

test.use({ autoGoto: false, viewport: { width: 1280, height: 1000 } });
test.setTimeout(300 * 1000);

test('the loss chart has axes, latest values and a remembered log scale', async ({
  page,
  request,
  baseURL
}, testInfo) => {
  const base = baseURL as string;
  let id: string | null = null;
  try {
    await page.goto();
    const response = await request.post(`${base}/edt/api/v1/jobs`, {
      data: { name: 'ui-loss', code: PROGRAM, max_gpus: 2 }
    });
    expect(response.status(), await response.text()).toBe(201);
    id = ((await response.json()) as { id: string }).id;
    await expect
      .poll(
        async () =>
          (
            (await (
              await request.get(`${base}/edt/api/v1/jobs/${id}`)
            ).json()) as { state: string }
          ).state,
        { timeout: 180 * 1000, intervals: [500] }
      )
      .toBe('SUCCEEDED');
    const last = await lastStep(request, base, id);

    // Its tab, opened from its row.
    await page.sidebar.openTab(SIDEBAR_ID);
    const row = page.locator(`.jp-edt-jobrow[data-job-id="${id}"]`);
    const open = async () => {
      await row.hover();
      await row.locator('.jp-edt-jobrow-action[data-action="open"]').click();
      const detail = page.locator(`.jp-edt-jobdetail[data-job-id="${id}"]`);
      await expect(detail.locator('.jp-edt-job')).toHaveAttribute(
        'data-points',
        String(STEPS)
      );
      return detail.locator('.jp-edt-loss-chart');
    };
    let chart = await open();
    const toggle = chart.locator('.jp-edt-chart-log-toggle');
    await toggle.uncheck(); // (the default: linear)
    await expect(chart).toHaveAttribute('data-y-scale', 'linear');
    await page.mouse.move(0, 0); // no hovering from here on

    // Ticks on both axes: steps up to the last, losses of the linear axis.
    await expect
      .poll(async () => (await ticks(chart, 'x')).length)
      .toBeGreaterThanOrEqual(3);
    const steps = (await ticks(chart, 'x')).map(Number);
    expect(steps.every(Number.isInteger)).toBe(true);
    expect(Math.max(...steps)).toBeGreaterThan(last / 2);
    expect(Math.max(...steps)).toBeLessThanOrEqual(last + 1);
    const linear = await ticks(chart, 'y');
    expect(linear.length).toBeGreaterThanOrEqual(3);
    expect(linear).toContain('0');

    // The legend: the latest step and loss (and validation), without a mouse.
    const legend = chart.locator('.u-legend .u-series');
    await expect(legend.nth(0)).toHaveText(`step${last}`);
    await expect(legend.nth(1)).toHaveText(/^loss\d[\d.]*(e-\d+)?$/);
    await expect(legend.filter({ hasText: 'val_loss' })).toHaveText(
      /^val_loss\d[\d.]*(e-\d+)?$/
    );

    // Log scale: other ticks, decades over the loss's range.
    await toggle.check();
    await expect(chart).toHaveAttribute('data-y-scale', 'log');
    await expect.poll(() => ticks(chart, 'y')).not.toEqual(linear);
    const logLabels = await ticks(chart, 'y');
    const decades = logLabels.map(Number);
    expect(decades.length).toBeGreaterThanOrEqual(3);
    expect(decades.every(v => Number.isInteger(Math.log10(v)))).toBe(true);
    expect(Math.max(...decades) / Math.min(...decades)).toBeGreaterThanOrEqual(
      100
    );
    await expect(legend.nth(0)).toHaveText(`step${last}`);
    fs.mkdirSync(SHOTS, { recursive: true });
    const picture = path.join(SHOTS, 'loss-chart.png');
    await chart.screenshot({ path: picture });
    await testInfo.attach('loss-chart', {
      path: picture,
      contentType: 'image/png'
    });

    // Closed and opened again, the tab remembers it.
    const tab = page.locator('.lm-TabBar-tab.jp-edt-job-tab', {
      hasText: 'ui-loss'
    });
    await tab.locator('.lm-TabBar-tabCloseIcon').click();
    await expect(tab).toHaveCount(0);
    chart = await open();
    await expect(chart.locator('.jp-edt-chart-log-toggle')).toBeChecked();
    await expect(chart).toHaveAttribute('data-y-scale', 'log');
    await expect.poll(() => ticks(chart, 'y')).toEqual(logLabels);
    await chart.locator('.jp-edt-chart-log-toggle').uncheck();
    await expect(chart).toHaveAttribute('data-y-scale', 'linear');
  } finally {
    if (id) {
      await request.delete(`${base}/edt/api/v1/jobs/${id}`);
    }
  }
});
