// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * The allocation timeline: on the test server's 4 virtual GPUs a long job
 * takes all 4; a short one arrives and the first shrinks to 2 (fair share);
 * the short one finishes and the first grows back to 4. The timeline tab
 * (the command `jupyter-edt:open-allocation-timeline`) shows a row per GPU
 * under its node, a bar per hold, and on hover the job, its user, its
 * interval and why each change happened; cancelling the long job ends its
 * bars live. The cluster view shows the same timeline and opens the tab.
 *
 * Screenshot: docs/allocation-timeline.png (the README's picture), and
 * artifacts/allocation-timeline.png.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';

const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');
const DOCS = path.resolve(__dirname, '..', '..', 'docs');
const VIRTUAL_GPUS = Number(process.env.EDT_VIRTUAL_GPUS || 4);
const OPEN_TIMELINE = 'jupyter-edt:open-allocation-timeline';
/** How long the picture shows the long job alone before the short one, and after. */
const ALONE_BEFORE_MS = 15000;
const ALONE_AFTER_MS = 8000;

/** A small Trainer program of `epochs` epochs, 0.02 s a sample. */
function program(epochs: number): string {
  return `
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
        time.sleep(0.02)
        return self.x[i], self.y[i]

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
trainer = Trainer(
    model,
    lambda: (Data(48, 1), Data(16, 2)),
    nn.functional.cross_entropy,
    lambda params: torch.optim.SGD(params, lr=0.1),
)
trainer.fit(${epochs}, 8, 4, checkpoint_every=50, micro_batch_size=2)
`;
}

interface IJob {
  id: string;
  name: string;
  state: string;
  elastic: boolean;
  devices: string[];
}

async function submit(
  request: APIRequestContext,
  base: string,
  name: string,
  maxGpus: number,
  epochs: number
): Promise<IJob> {
  const response = await request.post(`${base}/edt/api/v1/jobs`, {
    data: { name, code: program(epochs), max_gpus: maxGpus }
  });
  expect(response.status(), await response.text()).toBe(201);
  return (await response.json()) as IJob;
}

async function job(
  request: APIRequestContext,
  base: string,
  id: string
): Promise<IJob> {
  const response = await request.get(`${base}/edt/api/v1/jobs/${id}`);
  expect(response.status()).toBe(200);
  return (await response.json()) as IJob;
}

test.use({ autoGoto: false });
// Two training jobs on two CPU cores: allow for a slow machine.
test.setTimeout(420 * 1000);

test('the allocation timeline shows a two-job shrink and grow, and why', async ({
  page,
  request,
  baseURL
}, testInfo) => {
  const base = baseURL as string;
  const cleanup: string[] = [];
  const poll = { timeout: 180 * 1000, intervals: [500] };
  try {
    await page.goto();

    // A long job takes every GPU; once it is elastic, a short one arrives
    // and takes half (the long one shrinks); when it ends, the long one grows back.
    const train = await submit(request, base, 'ui-train', VIRTUAL_GPUS, 400);
    cleanup.push(train.id);
    await expect
      .poll(async () => {
        const j = await job(request, base, train.id);
        return j.state === 'RUNNING' && j.elastic ? j.devices.length : 0;
      }, poll)
      .toBe(VIRTUAL_GPUS);
    // (a few seconds alone first, and after, so the picture shows each stretch)
    await page.waitForTimeout(ALONE_BEFORE_MS);
    const evaluate = await submit(request, base, 'ui-eval', 2, 15);
    cleanup.push(evaluate.id);
    await expect
      .poll(
        async () => (await job(request, base, train.id)).devices.length,
        poll
      )
      .toBe(VIRTUAL_GPUS - 2);
    await expect
      .poll(async () => (await job(request, base, evaluate.id)).state, poll)
      .toBe('SUCCEEDED');
    await expect
      .poll(
        async () => (await job(request, base, train.id)).devices.length,
        poll
      )
      .toBe(VIRTUAL_GPUS);
    await page.waitForTimeout(ALONE_AFTER_MS);

    // The tab: a row per GPU, the jobs' bars, the last hour.
    await page.evaluate(async id => {
      await window.jupyterapp.commands.execute(id); // its widget cannot be serialised
    }, OPEN_TIMELINE);
    const panel = page.locator('.jp-edt-timeline-panel');
    await expect(panel).toBeVisible();
    const timeline = panel.locator('.jp-edt-timeline');
    await expect(timeline).toHaveAttribute('data-range', '1h');
    await expect(timeline.locator('.jp-edt-timeline-device')).toHaveCount(
      VIRTUAL_GPUS
    );
    const evalBars = timeline.locator(
      `.jp-edt-timeline-bar[data-job="${evaluate.id}"]`
    );
    const trainBars = timeline.locator(
      `.jp-edt-timeline-bar[data-job="${train.id}"]`
    );
    await expect(evalBars).toHaveCount(2);
    // on the 2 GPUs it kept, one bar each; on the 2 it lent, one before, one after
    await expect(trainBars).toHaveCount(VIRTUAL_GPUS + 2);
    await expect(
      timeline.locator(
        `.jp-edt-timeline-bar[data-job="${train.id}"][data-open="true"]`
      )
    ).toHaveCount(VIRTUAL_GPUS);
    await expect(
      timeline.locator('.jp-edt-timeline-tick').first()
    ).toBeVisible();
    await expect(timeline.locator('.jp-edt-timeline-legend')).toContainText(
      `ui-train [${train.id}]`
    );

    // Hovering a bar of the long job on a GPU it kept throughout tells every change.
    const tooltip = timeline.locator('.jp-edt-timeline-tooltip');
    let told = -1;
    for (let i = 0; i < (await trainBars.count()) && told < 0; i++) {
      await trainBars.nth(i).hover();
      await expect(tooltip).toBeVisible();
      const text = (await tooltip.textContent()) ?? '';
      if (text.includes('shrank to 2 GPUs') && text.includes('grew to')) {
        told = i;
      }
    }
    expect(
      told,
      'a bar of ui-train tells its shrink and its growth'
    ).toBeGreaterThanOrEqual(0);
    // (for the picture: at the bar's start, the tooltip over the long job alone)
    await trainBars.nth(told).hover({ position: { x: 4, y: 4 } });
    await expect(tooltip).toContainText(`ui-train [${train.id}]`);
    await expect(tooltip).toContainText('started on 4 GPUs, as a job arrived');
    await expect(tooltip).toContainText('shrank to 2 GPUs, as a job arrived');
    await expect(tooltip).toContainText('grew to 4 GPUs, as a job left');

    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const picture = path.join(ARTIFACTS, 'allocation-timeline.png');
    await timeline.screenshot({ path: picture });
    if (testInfo.project.name === 'lab') {
      fs.copyFileSync(picture, path.join(DOCS, 'allocation-timeline.png'));
    }
    await testInfo.attach('allocation-timeline', {
      path: picture,
      contentType: 'image/png'
    });

    // Live: cancelling the long job ends its bars without a reload.
    await page.mouse.move(0, 0);
    const stopped = await request.post(
      `${base}/edt/api/v1/jobs/${train.id}/cancel`
    );
    expect(stopped.status()).toBe(200);
    await expect(
      timeline.locator(
        `.jp-edt-timeline-bar[data-job="${train.id}"][data-open="true"]`
      )
    ).toHaveCount(0);
    await expect(evalBars).toHaveCount(2);

    // Another range reads it again; the cluster view shows it too, and opens the tab.
    await timeline.locator('[data-range="24h"]').click();
    await expect(timeline).toHaveAttribute('data-range', '24h');
    await expect(timeline.locator('[data-range="24h"]')).toHaveAttribute(
      'aria-pressed',
      'true'
    );
    await expect(evalBars).toHaveCount(2);
    await page.evaluate(async id => {
      await window.jupyterapp.commands.execute(id); // its widget cannot be serialised
    }, 'jupyter-edt:open-cluster');
    const cluster = page.locator('.jp-edt-cluster-panel');
    await expect(cluster.locator('.jp-edt-timeline-section')).toBeVisible();
    await expect(
      cluster.locator(`.jp-edt-timeline-bar[data-job="${evaluate.id}"]`)
    ).toHaveCount(2);
    await cluster.locator('.jp-edt-timeline-open').click();
    await expect(panel).toBeVisible();
  } finally {
    for (const id of cleanup) {
      await request.delete(`${base}/edt/api/v1/jobs/${id}`);
    }
  }
});
