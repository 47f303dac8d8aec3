// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * The submit dialog and a job row's actions: "Submit as Elastic Job…" on a
 * Python file whose `fit(...)` says `max_gpus=4` and `epochs=400` starts from
 * those values (and says that its own win); the job runs on 4 virtual GPUs
 * and shrinks to 2 when a second arrives; its row reads `epoch e/400 · step
 * s/6` (the runtime's totals) and shows its actions on hover; its tab shows
 * the whole name, the spec as a table and the code read-only, highlighted;
 * cancelling it from the row's context menu (confirmed) shows CANCELLED.
 *
 * Screenshots, the docs' pictures (artifacts/docs/, which a run's global
 * setup leaves alone; copy them to docs/): submit-dialog.png,
 * jobs-sidebar.png, job-detail.png, job-row-menu.png.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext, Locator, Page } from '@playwright/test';

const SIDEBAR_ID = 'jupyter-edt-sidebar';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'docs');

/** A Trainer program that runs for minutes unless cancelled: 6 steps an epoch. */
const SCRIPT = `import time
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
trainer.fit(
    epochs=400,
    effective_batch_size=8,
    max_gpus=4,
    checkpoint_every=50,
    micro_batch_size=2,
)
`;
const FIT_LINE = SCRIPT.split('\n').indexOf('trainer.fit(') + 1;

interface IJob {
  id: string;
  name: string;
  state: string;
  max_gpus: number;
  spec: { env?: Record<string, string> };
}

async function getJob(
  request: APIRequestContext,
  base: string,
  id: string
): Promise<IJob> {
  const response = await request.get(`${base}/edt/api/v1/jobs/${id}`);
  expect(response.status()).toBe(200);
  return (await response.json()) as IJob;
}

async function shot(target: Locator | Page, name: string): Promise<string> {
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name);
  await target.screenshot({ path: file });
  return file;
}

test.use({ autoGoto: false, viewport: { width: 1280, height: 1100 } });
// Two training jobs on two CPU cores: allow for a slow machine.
test.setTimeout(480 * 1000);

test('the dialog reads max_gpus from the script; a row cancels from its context menu', async ({
  page,
  request,
  baseURL
}, testInfo) => {
  const base = baseURL as string;
  const file = `edt-dialog-${Date.now()}.py`;
  const put = await request.put(`${base}/api/contents/${file}`, {
    data: { type: 'file', format: 'text', content: SCRIPT }
  });
  expect(put.status()).toBeLessThan(300);
  const cleanup: string[] = [];
  const attach = async (name: string, target: Locator | Page) =>
    testInfo.attach(name, {
      path: await shot(target, `${name}.png`),
      contentType: 'image/png'
    });
  try {
    await page.goto();

    // The dialog starts from what the script's fit(...) says.
    await page.sidebar.openTab('filebrowser');
    const item = page.locator(
      `.jp-DirListing-item[data-file-type="python"]:has-text("${file}")`
    );
    await item.click({ button: 'right' });
    await page
      .locator('.lm-Menu-itemLabel', { hasText: 'Submit as Elastic Job…' })
      .click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog.locator('.jp-edt-submit-max-gpus')).toHaveValue('4');
    await expect(dialog.locator('.jp-edt-submit-epochs')).toHaveValue('400');
    await expect(dialog.locator('.jp-edt-submit-script')).toContainText(
      `${file} gives max_gpus=4 and epochs=400 (fit(…), line ${FIT_LINE}).`
    );
    await expect(dialog.locator('.jp-edt-submit-script')).toContainText(
      'What you submit here wins over the script'
    );
    await expect(dialog.locator('.jp-edt-submit-intro')).toHaveText(
      `${file} runs on 1 to 4 GPUs, as the scheduler shares them.`
    );
    await dialog.locator('.jp-edt-submit-name').fill('ui-dialog');
    await attach('submit-dialog', dialog.locator('.jp-Dialog-content'));
    await dialog.locator('button', { hasText: 'Submit' }).click();

    const submitted = page.locator('.Toastify__toast', {
      hasText: 'Submitted ui-dialog'
    });
    await expect(submitted).toBeVisible();
    const id = /\[([0-9a-f]+)\]/.exec(
      (await submitted.textContent()) ?? ''
    )![1];
    cleanup.push(id);
    const job = await getJob(request, base, id);
    expect(job.name).toBe('ui-dialog');
    expect(job.max_gpus).toBe(4);
    // The epochs were the script's own: nothing overrides them.
    expect(job.spec.env?.EDT_EPOCHS).toBeUndefined();

    // It runs on every GPU, then shrinks to 2 when a second job arrives.
    await page.sidebar.openTab(SIDEBAR_ID);
    const sidebar = page.locator(`#${SIDEBAR_ID}`);
    await sidebar.getByLabel('Job state').selectOption('active');
    const row = sidebar.locator(`.jp-edt-jobrow[data-job-id="${id}"]`);
    await expect(row).toHaveAttribute('data-gpus', '4', {
      timeout: 120 * 1000
    });
    const response = await request.post(`${base}/edt/api/v1/jobs`, {
      data: {
        name: 'ui-second',
        code: SCRIPT,
        max_gpus: 2,
        env: { EDT_EPOCHS: '400' }
      }
    });
    expect(response.status(), await response.text()).toBe(201);
    const second = ((await response.json()) as IJob).id;
    cleanup.push(second);
    const secondRow = sidebar.locator(
      `.jp-edt-jobrow[data-job-id="${second}"]`
    );
    await expect(row).toHaveAttribute('data-gpus', '2', {
      timeout: 120 * 1000
    });
    await expect(secondRow.locator('.jp-edt-state-badge')).toHaveText(
      'RUNNING',
      { timeout: 120 * 1000 }
    );
    // The runtime's totals, the step within the epoch, and a bar.
    await expect(row.locator('.jp-edt-jobrow-progress-text')).toHaveText(
      /^epoch \d+\/400 · step [1-6]\/6$/,
      { timeout: 120 * 1000 }
    );
    await expect(row.locator('[role=progressbar]')).toBeVisible();

    // The devices name both holders; the submit toast has closed by itself.
    await expect(
      sidebar.locator('.jp-edt-device', { hasText: 'ui-second' })
    ).toHaveCount(2, { timeout: 30 * 1000 });
    await expect(submitted).toBeHidden({ timeout: 30 * 1000 });

    // Hover: the row's actions.
    await row.hover();
    const actions = row.locator('.jp-edt-jobrow-action');
    await expect(actions).toHaveCount(4);
    await expect(actions.first()).toBeVisible();
    // The sidebar down to its last section (not the empty space below).
    const [panelBox, lastBox] = [
      await sidebar.boundingBox(),
      await sidebar.locator('.jp-edt-panel > *').last().boundingBox()
    ];
    const sidebarShot = path.join(SHOTS, 'jobs-sidebar.png');
    await page.screenshot({
      path: sidebarShot,
      clip: {
        x: panelBox!.x,
        y: panelBox!.y,
        width: panelBox!.width,
        height: lastBox!.y + lastBox!.height + 12 - panelBox!.y
      }
    });
    await testInfo.attach('jobs-sidebar', {
      path: sidebarShot,
      contentType: 'image/png'
    });

    // Open from the row: the tab shows the whole name, its id in the tooltip.
    await row.locator('.jp-edt-jobrow-action[data-action="open"]').click();
    const tab = page.locator('.lm-TabBar-tab.jp-edt-job-tab', {
      hasText: 'ui-dialog'
    });
    await expect(tab.locator('.lm-TabBar-tabLabel')).toHaveText('ui-dialog');
    await expect(tab).toHaveAttribute('title', new RegExp(`\\[${id}\\]`));
    const detail = page.locator(`.jp-edt-jobdetail[data-job-id="${id}"]`);
    await expect(detail.locator('.jp-edt-spec-table')).toContainText(
      'ui-dialog'
    );
    await expect(detail.locator('.jp-edt-spec-table')).not.toContainText(
      'import torch'
    );
    // The code in JupyterLab's editor, read-only and highlighted.
    const code = detail.locator('.jp-edt-spec-code .cm-content');
    await expect(code).toContainText('from jupyter_edt.runtime import Trainer');
    await expect(code).toHaveAttribute('aria-readonly', 'true');
    await expect(
      detail.locator('.jp-edt-spec-code .cm-line span').first()
    ).toBeVisible();
    // Allocation changes, oldest first.
    const changes = detail.locator('.jp-edt-allocation-change');
    await expect(changes).toHaveCount(2);
    await expect(changes.first()).toHaveAttribute('data-gpus', '4');
    await expect(changes.last()).toContainText('shrank 4 → 2');
    await expect(detail.locator('.jp-edt-job-progress-text')).toHaveText(
      /^epoch \d+\/400 · step [1-6]\/6$/
    );
    await attach('job-detail', page.locator('.jp-edt-jobdetail-tab'));

    // Cancel from the row's context menu, confirmed in a dialog.
    await sidebar.getByLabel('Job state').selectOption('all');
    await row.click({ button: 'right' });
    const menu = page.locator('.lm-Menu').last();
    // The row's items first (then JupyterLab's own, "Shift+Right Click…").
    await expect(menu.locator('.lm-Menu-itemLabel').first()).toHaveText(
      'Open Job'
    );
    expect(
      (await menu.locator('.lm-Menu-itemLabel').allTextContents()).slice(0, 4)
    ).toEqual(['Open Job', 'Cancel Job…', 'Change Max GPUs…', 'Copy Job ID']);
    const [sidebarBox, menuBox] = [
      await sidebar.boundingBox(),
      await menu.boundingBox()
    ];
    if (sidebarBox && menuBox) {
      const right = Math.max(
        sidebarBox.x + sidebarBox.width,
        menuBox.x + menuBox.width
      );
      const bottom = Math.min(
        sidebarBox.y + sidebarBox.height,
        menuBox.y + menuBox.height + 120
      );
      const file = path.join(SHOTS, 'job-row-menu.png');
      await page.screenshot({
        path: file,
        clip: {
          x: sidebarBox.x,
          y: sidebarBox.y,
          width: right - sidebarBox.x + 8,
          height: bottom - sidebarBox.y
        }
      });
      await testInfo.attach('job-row-menu', {
        path: file,
        contentType: 'image/png'
      });
    }
    await menu
      .locator('.lm-Menu-itemLabel', { hasText: 'Cancel Job…' })
      .click();
    const confirm = page.locator('.jp-Dialog');
    await expect(confirm).toContainText(`Cancel ui-dialog [${id}]?`);
    await confirm.locator('button', { hasText: 'Cancel job' }).click();
    await expect(row.locator('.jp-edt-state-badge')).toHaveText('CANCELLED');
    expect((await getJob(request, base, id)).state).toBe('CANCELLED');
    // The toast names the state as the badge does.
    await expect(
      page.locator('.Toastify__toast', {
        hasText: `ui-dialog [${id}] CANCELLED.`
      })
    ).toBeVisible();
    // An ended job's row offers only open and copy id.
    await row.hover();
    await expect(row.locator('.jp-edt-jobrow-action')).toHaveCount(2);
  } finally {
    for (const id of cleanup) {
      await request.delete(`${base}/edt/api/v1/jobs/${id}`);
    }
    await request.delete(`${base}/api/contents/${file}`);
  }
});
