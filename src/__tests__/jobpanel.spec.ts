import { ALL_LOGS, FOLDED_LOGS, JobController } from '../jobpanel/controller';
import { JobPanel } from '../jobpanel/panel';
import type { IJobApi, IJobInfo, ISocketLike } from '../api';
import { EMETRICS } from './fixtures/emetrics';

const JOB: IJobInfo = {
  id: 'a1b2c3d4e5f6',
  user: 'alice',
  name: 'digits',
  state: 'RUNNING',
  reason: 'started',
  spec: { env: { EDT_EPOCHS: '2' } },
  min_gpus: 1,
  max_gpus: 2,
  priority: 0,
  devices: ['gpu0', 'gpu1'],
  elastic: true,
  restarts: 0,
  rescaled: 100,
  created: 90,
  updated: 100,
  finished: null
};

/** What the server answers for the failed job's logs, folded (logs?fold=true). */
const FOLDED = [
  'w0, w1: Traceback (most recent call last):',
  '  File "main.py", line 11, in forward',
  '    return self.fc(x)',
  '  … 3 frames in torch …',
  'RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)',
  '',
  '==> w0.out <==',
  'loading data',
  ''
].join('\n');

function api(calls: string[]): IJobApi {
  let job = { ...JOB };
  return {
    getJob: async () => ({ ...job }),
    getMetrics: async (_id, after) =>
      after > 0
        ? { metrics: [], cursor: after }
        : {
            metrics: [
              {
                id: 1,
                type: 'step',
                global_step: 0,
                epoch: 0,
                step: 0,
                loss: 1.25
              },
              {
                id: 2,
                type: 'step',
                global_step: 1,
                epoch: 0,
                step: 1,
                loss: 1.0
              }
            ],
            cursor: 2
          },
    getLogNames: async () => {
      calls.push('GET logs');
      return ['driver.log'];
    },
    getLog: async (_id, name) => {
      calls.push(`GET log ${name}`);
      return { name, text: 'hello\n', offset: 0, next_offset: 6, size: 6 };
    },
    getFoldedLogs: async () => {
      calls.push('GET folded');
      return { text: FOLDED, logs: ['driver.log'] };
    },
    patchJob: async (_id, change) => {
      calls.push(`PATCH ${JSON.stringify(change)}`);
      job = { ...job, ...change };
      return { ...job };
    },
    cancelJob: async () => {
      calls.push('CANCEL');
      job = { ...job, state: 'CANCELLED', devices: [] };
      return { ...job };
    },
    deleteJob: async () => {
      calls.push('DELETE');
      return { ...job };
    }
  };
}

const socket = (): ISocketLike => ({
  onopen: null,
  onmessage: null,
  onclose: null,
  onerror: null,
  close: () => undefined
});

describe('JobPanel', () => {
  it('renders the job and acts through its controller', async () => {
    const calls: string[] = [];
    const controller = new JobController({
      jobId: JOB.id,
      api: api(calls),
      connect: socket,
      stream: { silenceTimeout: 0 }
    });
    let asked = '';
    const panel = new JobPanel({
      controller,
      confirmCancel: async name => {
        asked = name;
        return true;
      }
    });
    document.body.appendChild(panel.node);
    await controller.start();
    panel.render();

    const q = (selector: string) =>
      panel.node.querySelector(selector) as HTMLElement;
    expect(q('.jp-edt-job-name').textContent).toBe('digits');
    expect(q('.jp-edt-state-badge').textContent).toBe('RUNNING');
    expect(q('.jp-edt-job-gpus').textContent).toBe('2 / 2');
    // A record without a kind is elastic; its program uses the runtime.
    const kind = q('.jp-edt-job-header .jp-edt-kind-tag');
    expect(kind.hidden).toBe(false);
    expect(kind.textContent).toBe('elastic');
    expect(kind.dataset.kind).toBe('elastic');
    expect(kind.dataset.fixed).toBe('false');
    expect(kind.title).toBe('Elastic: resized in place at a step boundary.');
    // the step within the epoch; the epochs the submission set (EDT_EPOCHS)
    // until the runtime says its own
    expect(q('.jp-edt-job-progress-text').textContent).toBe(
      'epoch 1/2 · step 2'
    );
    expect(q('.jp-edt-job-loss').textContent).toBe('train 1.000');
    expect(panel.node.dataset.points).toBe('2');
    expect(panel.lossChart.pointCount).toBe(2);

    const maxGpus = q('.jp-edt-job-max-gpus') as HTMLInputElement;
    expect(maxGpus.value).toBe('2');
    maxGpus.value = '3';
    maxGpus.dispatchEvent(new Event('change'));
    const priority = q('.jp-edt-job-priority') as HTMLInputElement;
    priority.value = '10';
    priority.dispatchEvent(new Event('change'));
    await new Promise(resolve => setTimeout(resolve, 0));
    panel.render();
    expect(calls.filter(call => call.startsWith('PATCH'))).toEqual([
      'PATCH {"max_gpus":3}',
      'PATCH {"priority":10}'
    ]);
    expect(q('.jp-edt-job-gpus').textContent).toBe('2 / 3');

    (q('.jp-edt-job-cancel') as HTMLButtonElement).click();
    await new Promise(resolve => setTimeout(resolve, 0));
    panel.render();
    expect(asked).toBe('digits [a1b2c3d4e5f6]');
    expect(calls).toContain('CANCEL');
    expect(q('.jp-edt-state-badge').textContent).toBe('CANCELLED');
    expect((q('.jp-edt-job-cancel') as HTMLButtonElement).disabled).toBe(true);
    expect(maxGpus.disabled).toBe(true);

    panel.dispose();
    controller.dispose();
    expect(panel.node.isConnected).toBe(false);
  });
});

describe('JobController restarts', () => {
  it('records each restart once, oldest first, however the events arrive', async () => {
    let live: ISocketLike | null = null;
    const controller = new JobController({
      jobId: JOB.id,
      api: api([]),
      connect: () => (live = socket()),
      stream: { silenceTimeout: 0 }
    });
    await controller.start();
    const send = (...events: object[]) =>
      live?.onmessage?.({
        data: JSON.stringify(
          events.map(e => ({ job_id: JOB.id, kind: 'restart', ...e }))
        )
      });
    const restart = (count: number, time: number) => ({
      time,
      count,
      cause: count === 1 ? 'resize' : 'failure',
      world_size: 2,
      killed: count === 1 ? [] : ['w1'],
      reason: `restart ${count}`
    });
    // Without ids (the feed passes them all on): the later restart first,
    // then both again.
    send(restart(2, 300), restart(1, 201));
    send(restart(1, 201), restart(2, 300));
    // With ids, the same event twice.
    send({ id: 9, ...restart(3, 400) }, { id: 9, ...restart(3, 400) });
    expect(controller.restarts).toEqual([
      { id: null, ...restart(1, 201) },
      { id: null, ...restart(2, 300) },
      { id: 9, ...restart(3, 400) }
    ]);
    controller.dispose();
  });
});

describe('JobPanel of a WMLA program', () => {
  it('charts the emetrics its own loop writes, in pages and from the feed', async () => {
    const records = EMETRICS;
    let socket: ISocketLike | null = null;
    const controller = new JobController({
      jobId: JOB.id,
      api: {
        ...api([]),
        // The history holds the first three iterations, two to a page.
        getMetrics: async (_id, after) => ({
          metrics:
            after < 4 ? records.slice(after, Math.min(after + 2, 4)) : [],
          cursor: after < 4 ? Math.min(after + 2, 4) : after
        })
      },
      connect: () => {
        socket = {
          onopen: null,
          onmessage: null,
          onclose: null,
          onerror: null,
          close: () => undefined
        };
        return socket;
      },
      stream: { silenceTimeout: 0 }
    });
    const panel = new JobPanel({
      controller,
      confirmCancel: async () => false
    });
    document.body.appendChild(panel.node);
    await controller.start();
    panel.render();
    const q = (selector: string) =>
      panel.node.querySelector(selector) as HTMLElement;
    expect(panel.node.dataset.series).toBe(
      'train/loss train/accuracy test/loss test/accuracy'
    );
    expect(q('.jp-edt-job-progress-text').textContent).toBe('iteration 3');
    expect(q('.jp-edt-job-loss').textContent).toBe(
      'train 0.6667 · test 0.7333'
    );
    // x: iterations 1-3; then a column per series.
    expect(panel.lossChart.data).toEqual([
      [1, 2, 3],
      [2, 1, 0.6667],
      [57.5, 65, 72.5],
      [null, null, 0.7333],
      [null, null, 69]
    ]);

    // The rest arrive as a metrics event (the feed replays the history too).
    expect(socket).not.toBeNull();
    const live = socket as unknown as ISocketLike;
    live.onopen?.({});
    live.onmessage?.({
      data: JSON.stringify({
        id: 7,
        job_id: JOB.id,
        time: 200,
        kind: 'metrics',
        records
      })
    });
    panel.render();
    expect(q('.jp-edt-job-progress-text').textContent).toBe('iteration 6');
    expect(q('.jp-edt-job-loss').textContent).toBe(
      'train 0.3333 · test 0.3667'
    );
    expect(panel.lossChart.pointCount).toBe(6);
    expect(controller.loss.emetrics.get('train/loss')?.y).toEqual([
      2, 1, 0.6667, 0.5, 0.4, 0.3333
    ]);

    panel.dispose();
    controller.dispose();
  });
});

describe('JobPanel of a job that failed before its first step', () => {
  it('says so in its empty chart, and its GPUs drop to 0', async () => {
    const failed: IJobInfo = {
      ...JOB,
      state: 'FAILED',
      reason: 'exit code 1',
      devices: [],
      updated: 150,
      finished: 150
    };
    let live: ISocketLike | null = null;
    const controller = new JobController({
      jobId: JOB.id,
      api: {
        ...api([]),
        getJob: async () => ({ ...failed }),
        getMetrics: async (_id, after) => ({ metrics: [], cursor: after })
      },
      connect: () => (live = socket()),
      stream: { silenceTimeout: 0 }
    });
    const panel = new JobPanel({
      controller,
      confirmCancel: async () => false
    });
    document.body.appendChild(panel.node);
    await controller.start();
    // The feed replays its allocation (2 GPUs at 100), not its end.
    expect(live).not.toBeNull();
    (live as unknown as ISocketLike).onmessage?.({
      data: JSON.stringify({
        id: 1,
        job_id: JOB.id,
        time: 100,
        kind: 'allocation',
        devices: ['gpu0', 'gpu1']
      })
    });
    panel.render();

    const empty = panel.lossChart.node.querySelector(
      '.jp-edt-chart-empty'
    ) as HTMLElement;
    expect(empty.hidden).toBe(false);
    expect(empty.textContent).toBe('failed before its first step');
    // Its progress says the same: it is not waiting for a first step.
    const progress = panel.node.querySelector('.jp-edt-job-progress-text');
    expect(progress?.textContent).toBe('failed before its first step');
    // 2 GPUs from 100 until it failed at 150, then 0.
    const [x, counts] = panel.timeline.data;
    expect(x.slice(0, 2)).toEqual([100, 150]);
    expect(counts).toEqual([2, 0, 0]);
    expect(x[2]).toBeGreaterThan(150);

    panel.dispose();
    controller.dispose();
  });
});

describe('JobPanel of a job that fails', () => {
  const REASON =
    'RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10) ' +
    '(main.py:11 in forward; workers w0, w1)';

  it('shows the folded logs once it fails, the raw logs a choice away', async () => {
    const calls: string[] = [];
    let live: ISocketLike | null = null;
    const controller = new JobController({
      jobId: JOB.id,
      api: api(calls),
      connect: () => (live = socket()),
      stream: { silenceTimeout: 0 }
    });
    const panel = new JobPanel({
      controller,
      confirmCancel: async () => false
    });
    document.body.appendChild(panel.node);
    await controller.start();
    await controller.refreshLogs();
    panel.render();
    const select = panel.node.querySelector(
      '.jp-edt-job-log-select'
    ) as HTMLSelectElement;
    const text = panel.node.querySelector(
      '.jp-edt-job-log-text'
    ) as HTMLElement;
    const options = () =>
      Array.from(select.options).map(o => [o.value, o.textContent]);
    // Running: the raw tails, and no folded choice.
    expect(options()).toEqual([
      [ALL_LOGS, 'all logs'],
      ['driver.log', 'driver.log']
    ]);
    expect(text.textContent).toBe('==> driver.log <==\nhello');
    expect(calls).not.toContain('GET folded');

    // It fails: the next read is the server's folded text, chosen first.
    (live as unknown as ISocketLike).onmessage?.({
      data: JSON.stringify({
        id: 5,
        job_id: JOB.id,
        time: 200,
        kind: 'state',
        state: 'FAILED',
        reason: REASON
      })
    });
    await controller.refreshLogs();
    panel.render();
    expect(controller.logs.selected).toBe(FOLDED_LOGS);
    expect(options()).toEqual([
      [FOLDED_LOGS, 'failure (folded)'],
      [ALL_LOGS, 'all logs'],
      ['driver.log', 'driver.log']
    ]);
    expect(select.value).toBe(FOLDED_LOGS);
    expect(select.options[0].title).toContain('raw logs');
    expect(text.dataset.log).toBe(FOLDED_LOGS);
    expect(text.textContent).toBe(FOLDED.trimEnd());
    expect(panel.node.querySelector('.jp-edt-job-reason')?.textContent).toBe(
      REASON
    );
    expect(calls).toContain('GET folded');

    // The raw logs stay reachable, and the user's choice holds.
    select.value = ALL_LOGS;
    select.dispatchEvent(new Event('change'));
    await controller.refreshLogs();
    panel.render();
    expect(select.value).toBe(ALL_LOGS);
    expect(text.textContent).toBe('==> driver.log <==\nhello');
    controller.setVisible(false);
    controller.setVisible(true);
    await controller.refreshLogs();
    expect(controller.logs.selected).toBe(ALL_LOGS);
    await controller.selectLog(FOLDED_LOGS);
    panel.render();
    expect(text.textContent).toBe(FOLDED.trimEnd());

    panel.dispose();
    controller.dispose();
  });

  it('reads a failed job folded at once, without listing its raw logs', async () => {
    const calls: string[] = [];
    const controller = new JobController({
      jobId: JOB.id,
      api: {
        ...api(calls),
        getJob: async () => ({
          ...JOB,
          state: 'FAILED',
          reason: REASON,
          devices: [],
          finished: 150
        })
      },
      connect: socket,
      stream: { silenceTimeout: 0 }
    });
    await controller.start();
    await controller.refreshLogs();
    expect(controller.logs).toEqual({
      names: ['driver.log'],
      choices: [FOLDED_LOGS, ALL_LOGS, 'driver.log'],
      selected: FOLDED_LOGS,
      text: FOLDED.trimEnd()
    });
    expect(calls.filter(call => call.startsWith('GET log'))).toEqual([]);
    controller.dispose();
  });
});
