// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * The job monitor: two jobs submitted through the REST API on the test
 * server's 4 virtual GPUs appear in the sidebar's job list; the first starts
 * on 4 GPUs and shrinks to 2 when the second arrives (fair share); its detail
 * tab's loss chart gains points; cancelling it from the tab (confirmed in a
 * dialog) shows CANCELLED in the tab and in the list.
 *
 * Screenshots: artifacts/jobs-sidebar.png, job-detail.png, cluster-devices.png.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext, Page } from '@playwright/test';

const SIDEBAR_ID = 'jupyter-edt-sidebar';
const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');
const VIRTUAL_GPUS = Number(process.env.EDT_VIRTUAL_GPUS || 4);

/** A small Trainer program that runs for minutes unless cancelled. */
const PROGRAM = `
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
trainer.fit(400, 8, 4, checkpoint_every=50, micro_batch_size=2)
`;

interface IJob {
  id: string;
  name: string;
  state: string;
  devices: string[];
}

async function submit(
  request: APIRequestContext,
  baseURL: string,
  name: string,
  maxGpus: number
): Promise<IJob> {
  const response = await request.post(`${baseURL}/edt/api/v1/jobs`, {
    data: {
      name,
      code: PROGRAM,
      max_gpus: maxGpus,
      env: { EDT_EPOCHS: '400' }
    }
  });
  expect(response.status(), await response.text()).toBe(201);
  return (await response.json()) as IJob;
}

async function getJob(
  request: APIRequestContext,
  baseURL: string,
  id: string
): Promise<IJob> {
  const response = await request.get(`${baseURL}/edt/api/v1/jobs/${id}`);
  expect(response.status()).toBe(200);
  return (await response.json()) as IJob;
}

async function shot(
  page: Page,
  locator: ReturnType<Page['locator']>,
  name: string,
  project: string
) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const suffix = project === 'lab' ? '' : `-${project}`;
  const file = path.join(ARTIFACTS, name.replace(/\.png$/, `${suffix}.png`));
  await locator.screenshot({ path: file });
  return file;
}

test.use({ autoGoto: false });
// Two training jobs on two CPU cores: allow for a slow machine.
test.setTimeout(480 * 1000);

test('the job list follows two jobs, the detail tab charts one and cancels it', async ({
  page,
  request,
  baseURL
}, testInfo) => {
  const base = baseURL as string;
  const project = testInfo.project.name;
  const cleanup: string[] = [];
  try {
    await page.goto();
    await page.sidebar.openTab(SIDEBAR_ID);
    const sidebar = page.locator(`#${SIDEBAR_ID}`);
    await expect(sidebar.locator('.jp-edt-jobs')).toBeVisible();
    await expect(sidebar.locator('.jp-edt-device')).toHaveCount(VIRTUAL_GPUS);
    // Only the jobs that run (the server may hold older, finished ones).
    await sidebar.getByLabel('Job state').selectOption('active');

    // The first job takes every GPU.
    const first = await submit(request, base, 'ui-first', VIRTUAL_GPUS);
    cleanup.push(first.id);
    const firstRow = sidebar.locator(
      `.jp-edt-jobrow[data-job-id="${first.id}"]`
    );
    await expect(firstRow).toBeVisible();
    await expect(firstRow).toHaveAttribute('data-gpus', String(VIRTUAL_GPUS), {
      timeout: 120 * 1000
    });
    await expect(firstRow).toContainText(
      `${VIRTUAL_GPUS}/${VIRTUAL_GPUS} GPUs`
    );
    await expect(firstRow.locator('.jp-edt-state-badge')).toHaveText(
      'RUNNING',
      { timeout: 120 * 1000 }
    );

    // The second arrives: fair share takes half of the first's GPUs.
    const second = await submit(request, base, 'ui-second', 2);
    cleanup.push(second.id);
    const secondRow = sidebar.locator(
      `.jp-edt-jobrow[data-job-id="${second.id}"]`
    );
    await expect(secondRow).toBeVisible();
    await expect(firstRow).toHaveAttribute('data-gpus', '2', {
      timeout: 120 * 1000
    });
    await expect(secondRow).toHaveAttribute('data-gpus', '2', {
      timeout: 120 * 1000
    });
    // Newest first.
    const ids = await sidebar
      .locator('.jp-edt-jobrow')
      .evaluateAll(rows => rows.map(r => r.getAttribute('data-job-id')));
    expect(ids.indexOf(second.id)).toBeLessThan(ids.indexOf(first.id));
    // The devices name their holders.
    await expect(sidebar.locator('.jp-edt-holder-link')).toHaveCount(
      VIRTUAL_GPUS,
      { timeout: 30 * 1000 }
    );
    await expect(secondRow.locator('.jp-edt-state-badge')).toHaveText(
      'RUNNING',
      { timeout: 120 * 1000 }
    );
    await testInfo.attach('jobs-sidebar', {
      path: await shot(page, sidebar, 'jobs-sidebar.png', project),
      contentType: 'image/png'
    });

    // The cluster view: every device, held by the two jobs.
    await sidebar.locator('.jp-edt-open-cluster').click();
    const cluster = page.locator('.jp-edt-cluster-panel');
    await expect(cluster).toBeVisible();
    await expect(cluster.locator('.jp-edt-device')).toHaveCount(VIRTUAL_GPUS);
    await expect(cluster.locator('.jp-edt-virtual-badge')).toHaveCount(
      VIRTUAL_GPUS
    );
    await expect(cluster.locator('.jp-edt-cluster-summary')).toHaveText(
      `${VIRTUAL_GPUS} of ${VIRTUAL_GPUS} devices held`
    );
    await expect(cluster).toContainText('ui-first');
    await testInfo.attach('cluster-view', {
      path: await shot(
        page,
        cluster.locator('.jp-edt-cluster'),
        'cluster-view.png',
        project
      ),
      contentType: 'image/png'
    });

    // The first job's tab: chart points, and the shrink in the timeline.
    await firstRow.click();
    const detail = page.locator(`.jp-edt-jobdetail[data-job-id="${first.id}"]`);
    await expect(detail).toBeVisible();
    const panel = detail.locator('.jp-edt-job');
    await expect
      .poll(async () => Number(await panel.getAttribute('data-points')), {
        timeout: 120 * 1000
      })
      .toBeGreaterThan(2);
    await expect(detail.locator('.jp-edt-loss-chart canvas')).toBeVisible();
    // Oldest first: the start on every GPU, then the shrink.
    await expect(detail.locator('.jp-edt-allocation-change')).toHaveCount(2);
    await expect(
      detail.locator('.jp-edt-allocation-change').last()
    ).toHaveAttribute('data-gpus', '2');
    // and when the job trained on its new GPUs, how long they waited
    await expect(
      detail.locator('.jp-edt-allocation-change').last()
    ).toContainText('training after', { timeout: 60 * 1000 });
    await expect(detail.locator('.jp-edt-job-gpus')).toHaveText(
      `2 / ${VIRTUAL_GPUS}`
    );
    await expect(detail.locator('.jp-edt-spec-table')).toContainText(
      'ui-first'
    );
    // Per-process logs: a tab per log; the driver's has its lines.
    const driverTab = detail.locator('.jp-edt-log-tab', {
      hasText: 'driver.stderr'
    });
    await expect(driverTab).toBeVisible({ timeout: 60 * 1000 });
    await driverTab.click();
    await expect(driverTab).toHaveAttribute('aria-selected', 'true');
    await detail.locator('.jp-edt-log-tab', { hasText: /^all$/ }).click();
    await testInfo.attach('job-detail', {
      path: await shot(
        page,
        page.locator('.jp-edt-jobdetail-tab'),
        'job-detail.png',
        project
      ),
      contentType: 'image/png'
    });

    // Cancel it, confirmed in a dialog.
    await detail.locator('.jp-edt-action-cancel').click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('Cancel ui-first');
    await dialog.locator('button', { hasText: 'Cancel job' }).click();
    // A notification says so, with a button that opens the job.
    const toast = page.locator('.Toastify__toast', {
      hasText: `ui-first [${first.id}] CANCELLED`
    });
    await expect(toast).toBeVisible();
    await expect(toast.getByRole('button', { name: 'Open' })).toBeVisible();

    await expect(detail.locator('.jp-edt-state-badge').first()).toHaveText(
      'CANCELLED'
    );
    expect((await getJob(request, base, first.id)).state).toBe('CANCELLED');
    // The list shows it at once; "active" no longer includes it.
    await sidebar.getByLabel('Job state').selectOption('all');
    await expect(firstRow.locator('.jp-edt-state-badge')).toHaveText(
      'CANCELLED'
    );
    await expect(firstRow).toHaveAttribute('data-gpus', '0');
    // After a reload the tab, the sidebar and its filter come back.
    // (JupyterLab saves the workspace, the filter with it, 750 ms after a change.)
    const saved = page.waitForRequest(
      r =>
        r.method() === 'PUT' &&
        r.url().includes('/api/workspaces/') &&
        /"jupyter-edt:job-filter":\{[^}]*"CANCELLED"/.test(r.postData() ?? '')
    );
    await sidebar.getByLabel('Job state').selectOption('CANCELLED');
    await expect(secondRow).toBeHidden();
    await saved;
    await page.reload({ waitForIsReady: false });
    await expect(
      page.locator(`.jp-edt-jobdetail[data-job-id="${first.id}"]`)
    ).toHaveAttribute('data-state', 'CANCELLED');
    await expect(sidebar.getByLabel('Job state')).toHaveValue('CANCELLED');
    await expect(firstRow).toBeVisible();
    await expect(secondRow).toBeHidden();
  } finally {
    for (const id of cleanup) {
      await request.delete(`${base}/edt/api/v1/jobs/${id}`);
    }
  }
});

test('a Python file is submitted from the file browser context menu', async ({
  page,
  request,
  baseURL
}) => {
  const base = baseURL as string;
  const name = `edt-submit-${Date.now()}.py`;
  const put = await request.put(`${base}/api/contents/${name}`, {
    data: { type: 'file', format: 'text', content: PROGRAM }
  });
  expect(put.status()).toBeLessThan(300);
  let jobId: string | null = null;
  try {
    await page.goto();
    await page.sidebar.openTab('filebrowser');
    const item = page.locator(
      `.jp-DirListing-item[data-file-type="python"]:has-text("${name}")`
    );
    await expect(item).toBeVisible();
    await item.click({ button: 'right' });
    await page
      .locator('.lm-Menu-itemLabel', { hasText: 'Submit as Elastic Job…' })
      .click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('Submit as elastic job');
    // the script's own max_gpus (fit's third argument, 4) is the dialog's default
    await expect(dialog).toContainText(`${name} runs on 1 to 4 GPUs`);
    await dialog.locator('.jp-edt-submit-max-gpus').fill('2');
    await dialog.locator('.jp-edt-submit-priority').fill('5');
    await dialog.locator('.jp-edt-submit-args').fill('--note "two words"');
    await dialog.locator('button', { hasText: 'Submit' }).click();

    const toast = page.locator('.Toastify__toast', { hasText: 'Submitted' });
    await expect(toast).toBeVisible();
    const jobs = await (await request.get(`${base}/edt/api/v1/jobs`)).json();
    const job = jobs.jobs.find(
      (j: { name: string }) => j.name === name.replace(/\.py$/, '')
    );
    expect(job, 'the submitted job is listed').toBeTruthy();
    jobId = job.id;
    expect(job.max_gpus).toBe(2);
    expect(job.priority).toBe(5);
    expect(job.spec.args).toEqual(['--note', 'two words']);
    expect(job.spec.entrypoint).toBe(name);

    // It shows in the sidebar.
    await page.sidebar.openTab(SIDEBAR_ID);
    await expect(
      page.locator(`#${SIDEBAR_ID} .jp-edt-jobrow[data-job-id="${job.id}"]`)
    ).toBeVisible();
  } finally {
    if (jobId) {
      await request.delete(`${base}/edt/api/v1/jobs/${jobId}`);
    }
    await request.delete(`${base}/api/contents/${name}`);
  }
});

test('the settings schema is served and read by the extension', async ({
  page,
  request,
  baseURL
}) => {
  const response = await request.get(
    `${baseURL}/lab/api/settings/jupyter-edt:plugin`
  );
  expect(response.status()).toBe(200);
  const body = await response.json();
  expect(Object.keys(body.schema.properties).sort()).toEqual([
    'lossScale',
    'maxChartPoints',
    'notifications',
    'showAllUsers'
  ]);

  // "Show all users' jobs" sets the filter a first visit starts on.
  const save = (raw: string) =>
    page.evaluate(
      async raw =>
        window.jupyterapp.serviceManager.settings.save(
          'jupyter-edt:plugin',
          raw
        ),
      raw
    );
  await page.goto();
  try {
    await save(JSON.stringify({ showAllUsers: true }));
    await page.reload({ waitForIsReady: false });
    await page.sidebar.openTab(SIDEBAR_ID);
    await expect(
      page.locator(`#${SIDEBAR_ID}`).getByLabel('Whose jobs')
    ).toHaveValue('all');
  } finally {
    await save('{}');
  }
});
