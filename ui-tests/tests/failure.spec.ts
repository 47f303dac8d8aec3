// Copyright (c) jupyter-edt contributors.
// Distributed under the terms of the BSD-3-Clause License.

/**
 * A failing job, as a user meets it: a notebook's `%%edt_submit --wait` cell
 * whose model raises `RuntimeError: mat1 and mat2 shapes cannot be
 * multiplied` in both workers. One sentence (the exception, the user's own
 * line, the workers) everywhere: the sidebar row's reason, the toast, the
 * notebook's raised `JobFailed` and the job widget; the job widget and the job
 * tab show the logs folded (the traceback once, headed by the workers that
 * printed it, the user's frames first, torch's folded), the raw logs a click
 * away.
 *
 * The job waits, before it fails, until the page has seen it run (a file the
 * test creates), so the failure reaches the page live, as a toast.
 *
 * Screenshot, a picture of the docs (artifacts/docs/, which a run's global
 * setup leaves alone; copy it to docs/): job-failure.png.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import type { Locator, Page } from '@playwright/test';

const SIDEBAR_ID = 'jupyter-edt-sidebar';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'docs');
const NOTEBOOK = 'edt-failure.ipynb';

/** The program of the failing cell (below its magic line): main.py of the job. */
const PROGRAM = `import os
import time
import torch
from torch import nn
from torch.utils.data import TensorDataset
from jupyter_edt.runtime import Trainer

while not os.path.exists(os.environ["UI_HOLD"]):  # until the page has seen it run
    time.sleep(0.05)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(x)  # the data has 64 features, not 32


x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
trainer = Trainer(
    Net(),
    lambda: (TensorDataset(x, y), TensorDataset(x[:8], y[:8])),
    nn.functional.cross_entropy,
    lambda params: torch.optim.SGD(params, lr=0.1),
)
trainer.fit(1, 32, 2, micro_batch_size=8)
`;
const FORWARD_LINE =
  PROGRAM.split('\n').findIndex(line => line.includes('return self.fc(x)')) + 1;

/** The sentence the job fails with (a worker started again may add itself). */
const SENTENCE = new RegExp(
  '^RuntimeError: mat1 and mat2 shapes cannot be multiplied \\(8x64 and 32x10\\) ' +
    `\\(main\\.py:${FORWARD_LINE} in forward; workers w0, w1(, w\\d+)*\\)$`
);

/** The folded traceback's head: once, for both workers. */
const FOLDED_HEAD = /^w0, w1(, w\d+)*: Traceback \(most recent call last\):$/m;

function notebookJson(hold: string): string {
  const cell = (source: string) => ({
    cell_type: 'code',
    execution_count: null,
    metadata: {},
    outputs: [],
    source
  });
  return JSON.stringify({
    cells: [
      cell('%load_ext jupyter_edt'),
      cell(
        `%%edt_submit --name ui-broken --max-gpus 2 --env UI_HOLD=${hold} --wait\n` +
          PROGRAM
      ),
      cell(
        'import sys\n' +
          'from jupyter_edt.notebook import JobWidget\n\n' +
          'failure = sys.last_value  # what the cell above raised\n' +
          'print(f"{type(failure).__name__}: {failure}")\n' +
          'JobWidget.for_job(failure.job)'
      )
    ],
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

/** The folded logs as a log view shows them: one traceback, the user's frame, torch's folded. */
async function expectFolded(log: Locator): Promise<string> {
  await expect(log).toHaveAttribute('data-log', ':folded');
  await expect(log).toContainText(
    `File "main.py", line ${FORWARD_LINE}, in forward`
  );
  const text = (await log.textContent()) ?? '';
  expect(text).toMatch(FOLDED_HEAD);
  expect(text.match(/Traceback \(most recent call last\)/g)).toHaveLength(1);
  expect(text).toMatch(/^ {2}… \d+ frames? in [\w, ]*torch[\w, ]* …$/m);
  expect(text).toContain(
    'RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)'
  );
  expect(text).not.toContain('site-packages');
  return text;
}

async function shot(target: Locator | Page, name: string): Promise<string> {
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name);
  await target.screenshot({ path: file });
  return file;
}

test.use({ viewport: { width: 1280, height: 1000 } });
test.setTimeout(300 * 1000);

test('a failed job says the same sentence everywhere, its logs folded', async ({
  page,
  request,
  baseURL,
  tmpPath
}, testInfo) => {
  const base = baseURL as string;
  const hold = path.join(os.tmpdir(), `edt-ui-failure-${Date.now()}`);
  let id: string | null = null;
  try {
    const notebookPath = `${tmpPath}/${NOTEBOOK}`;
    expect(
      await page.contents.uploadContent(
        notebookJson(hold),
        'text',
        notebookPath
      )
    ).toBe(true);
    expect(await page.notebook.openByPath(notebookPath)).toBe(true);
    await page.notebook.activate(NOTEBOOK);
    await page.notebook.runCell(0);
    // The submission waits for its job: it returns once the job has failed.
    await page.notebook.runCell(1, { wait: false });

    // The sidebar lists it running; then the job may fail.
    await page.sidebar.openTab(SIDEBAR_ID);
    const sidebar = page.locator(`#${SIDEBAR_ID}`);
    const row = sidebar.locator('.jp-edt-jobrow', { hasText: 'ui-broken' });
    await expect(row.locator('.jp-edt-state-badge')).toHaveText('RUNNING', {
      timeout: 120 * 1000
    });
    id = await row.getAttribute('data-job-id');
    expect(id).toMatch(/^[0-9a-f]+$/);
    fs.writeFileSync(hold, '');

    // The toast, live: the job's name and state, then the sentence whole
    // (the id gives way where both would be cut: a toast shows 140 characters).
    const toast = page
      .locator('.Toastify__toast', { hasText: 'ui-broken' })
      .filter({ hasText: 'FAILED: RuntimeError: mat1' });
    await expect(toast).toBeVisible({ timeout: 120 * 1000 });
    const message =
      (await toast.locator('.jp-toast-message').textContent()) ?? '';
    const [head, sentence] = message.split(' FAILED: ');
    expect([`ui-broken [${id}]`, 'ui-broken']).toContain(head);
    expect(sentence).toMatch(SENTENCE);

    // The same sentence in the row, and in the job's record.
    await expect(row.locator('.jp-edt-state-badge')).toHaveText('FAILED');
    await expect(row.locator('.jp-edt-jobrow-reason')).toHaveText(sentence);
    // (whole on the screen too: its lines are not cut)
    expect(
      await row
        .locator('.jp-edt-jobrow-reason')
        .evaluate(node => node.scrollHeight <= node.clientHeight)
    ).toBe(true);
    const record = await request.get(`${base}/edt/api/v1/jobs/${id}`);
    expect(((await record.json()) as { reason: string }).reason).toBe(sentence);

    // The notebook: the cell raised it, its report the folded traceback.
    await page.notebook.waitForRun(1);
    const cells = page.locator('.jp-Notebook .jp-Cell');
    const raised = cells.nth(1).locator('.jp-OutputArea-output').last();
    await expect(raised).toContainText(
      `Job ${id} (ui-broken) FAILED: ${sentence}`
    );
    await expect(raised).toContainText('The end of its logs:');
    expect(
      ((await raised.textContent()) ?? '').match(/Traceback \(most recent/g)
    ).toHaveLength(1);
    // What it raised is the client's JobFailed, its message the sentence; its widget.
    await page.notebook.runCell(2);
    const after = cells.nth(2);
    await expect(after.locator('.jp-OutputArea-output').first()).toHaveText(
      `JobFailed: ${sentence}`
    );
    const widget = after.locator(`.jp-edt-job[data-job-id="${id}"]`);
    await expect(widget.locator('.jp-edt-state-badge')).toHaveText('FAILED');
    await expect(widget.locator('.jp-edt-job-reason')).toHaveText(sentence);
    await expect(widget.locator('.jp-edt-chart-empty').first()).toHaveText(
      'failed before its first step'
    );
    // Its logs: folded first, the raw logs a choice away.
    const select = widget.locator('.jp-edt-job-log-select');
    await expect(select).toHaveValue(':folded');
    await expectFolded(widget.locator('.jp-edt-job-log-text'));
    await select.selectOption('w0.out');
    await expect(widget.locator('.jp-edt-job-log-text')).toHaveAttribute(
      'data-log',
      'w0.out'
    );
    await expect(widget.locator('.jp-edt-job-log-text')).toContainText(
      'site-packages/torch'
    );
    await select.selectOption(':folded');
    await testInfo.attach('job-failure-widget', {
      path: await shot(widget, 'job-failure-widget.png'),
      contentType: 'image/png'
    });

    // The job tab: the sentence, and its logs folded in the first log tab.
    await row.hover();
    await row.locator('.jp-edt-jobrow-action[data-action="open"]').click();
    const detail = page.locator(`.jp-edt-jobdetail[data-job-id="${id}"]`);
    await expect(detail).toHaveAttribute('data-state', 'FAILED');
    await expect(detail.locator('.jp-edt-job-reason')).toHaveText(sentence);
    const tabs = detail.locator('.jp-edt-log-tab');
    await expect(tabs.first()).toHaveText('failure');
    await expect(tabs.first()).toHaveAttribute('aria-selected', 'true');
    const log = detail.locator('.jp-edt-detail-log-text');
    await expectFolded(log);
    // The raw logs stay a tab away: each worker's whole traceback, torch's frames in it.
    await detail.locator('.jp-edt-log-tab[data-log=""]').click();
    await expect(log).toHaveAttribute('data-log', '');
    await expect(log).toContainText('==> w1.out <==');
    await expect(log).toContainText('site-packages/torch');
    expect(
      ((await log.textContent()) ?? '').match(/Traceback \(most recent/g)
        ?.length
    ).toBeGreaterThanOrEqual(2);
    await tabs.first().click();
    await expectFolded(log);

    // The picture: the failed row beside the tab, scrolled to its logs.
    await page.mouse.move(0, 0);
    await detail.locator('.jp-edt-detail-logs').scrollIntoViewIfNeeded();
    await testInfo.attach('job-failure', {
      path: await shot(page, 'job-failure.png'),
      contentType: 'image/png'
    });
  } finally {
    fs.rmSync(hold, { force: true });
    if (id) {
      await request.delete(`${base}/edt/api/v1/jobs/${id}`);
    }
  }
});
