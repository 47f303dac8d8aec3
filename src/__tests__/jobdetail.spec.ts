import { Widget } from '@lumino/widgets';

import { JobDetail, type IConfirm } from '../jobview/detail';
import {
  clockTime,
  describeFormed,
  describeRestart
} from '../jobview/timeline';
import { JobController } from '../jobpanel/controller';
import type { IJobApi, IJobInfo, ISocketLike } from '../api';

const JOB: IJobInfo = {
  id: 'a1b2c3d4e5f6',
  user: 'alice',
  name: 'digits',
  state: 'RUNNING',
  reason: 'started',
  spec: { entrypoint: 'main.py', kind: 'restart', env: { EDT_EPOCHS: '2' } },
  min_gpus: 1,
  max_gpus: 4,
  priority: 0,
  devices: ['gpu0', 'gpu1'],
  elastic: false, // a restart job's program does not announce the runtime
  restarts: 0,
  rescaled: 100,
  created: 90,
  updated: 100,
  finished: null
};

/** The server's side of the job, in memory (the REST calls it answers). */
function fakeServer(calls: string[]): IJobApi {
  let job = { ...JOB };
  return {
    getJob: async () => ({ ...job }),
    getMetrics: async (_id, after) => ({ metrics: [], cursor: after }),
    getLogNames: async () => ['driver.stderr', 'w0.log'],
    getLog: async (_id, name) => ({
      name,
      text: `${name} line\n`,
      offset: 0,
      next_offset: 10,
      size: 10
    }),
    getFoldedLogs: async () => {
      calls.push('GET folded');
      return {
        text: 'w0, w1: Traceback (most recent call last):\nValueError: no data\n',
        logs: ['driver.stderr', 'w0.log']
      };
    },
    patchJob: async (_id, change) => {
      calls.push(`PATCH ${JSON.stringify(change)}`);
      job = { ...job, ...change, updated: job.updated + 1 };
      return { ...job };
    },
    cancelJob: async () => {
      calls.push('CANCEL');
      job = { ...job, state: 'CANCELLED', devices: [], finished: 200 };
      return { ...job };
    },
    deleteJob: async () => {
      calls.push('DELETE');
      return { ...job };
    }
  };
}

function silentSocket(): ISocketLike {
  return {
    onopen: null,
    onmessage: null,
    onclose: null,
    onerror: null,
    close: () => undefined
  };
}

async function waitFor(condition: () => boolean, timeout = 3000) {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeout) {
      throw new Error('condition not met in time');
    }
    await new Promise(resolve => setTimeout(resolve, 5));
  }
}

describe('JobDetail', () => {
  let detail: JobDetail;
  let calls: string[];
  let answers: { cancel: boolean; priority: number | null; max: number | null };
  let changed: IJobInfo[];
  let socket: ISocketLike | null;

  beforeEach(async () => {
    calls = [];
    socket = null;
    changed = [];
    answers = { cancel: false, priority: null, max: null };
    const confirm: IConfirm = {
      cancel: async () => answers.cancel,
      priority: async () => answers.priority,
      maxGpus: async () => answers.max
    };
    const controller = new JobController({
      jobId: JOB.id,
      api: fakeServer(calls),
      connect: () => (socket = silentSocket()),
      logInterval: 20,
      stream: { silenceTimeout: 0 }
    });
    detail = new JobDetail({
      jobId: JOB.id,
      controller,
      confirm,
      onJobChanged: job => changed.push(job),
      listArtifacts: async () => [
        { path: 'model/final.pt', size: 2048, modified: 1 }
      ]
    });
    Widget.attach(detail, document.body);
    await waitFor(() => detail.node.dataset.state === 'RUNNING');
  });

  afterEach(() => detail.dispose());

  const q = (selector: string) =>
    detail.node.querySelector(selector) as HTMLElement;

  it('shows the kind, the spec, the artifacts and a tab per log', async () => {
    // The whole name on the tab; its id in the tooltip.
    expect(detail.title.label).toBe('digits');
    expect(detail.title.caption).toBe('digits [a1b2c3d4e5f6] · RUNNING');
    const kind = q('.jp-edt-job-header .jp-edt-kind-tag');
    expect(kind.textContent).toBe('restart');
    expect(kind.dataset.fixed).toBe('false');
    expect(kind.title).toBe(
      'Restart: resized by a graceful restart from a checkpoint.'
    );
    // The spec as a small table.
    const rows = Array.from(
      detail.node.querySelectorAll('.jp-edt-spec-table tr'),
      row => [row.children[0].textContent, row.children[1].textContent]
    );
    expect(rows).toEqual([
      ['Name', 'digits'],
      ['User', 'alice'],
      ['Kind', 'restart'],
      ['Entrypoint', 'main.py'],
      ['Arguments', '(none)'],
      ['GPUs', '1 to 4'],
      ['Priority', '0'],
      ['Environment', 'EDT_EPOCHS=2']
    ]);
    // No code sent inline: no code view.
    expect(q('.jp-edt-spec-code').hidden).toBe(true);
    await waitFor(
      () => detail.node.querySelectorAll('.jp-edt-artifact').length === 1
    );
    const link = q('.jp-edt-artifact-link') as HTMLAnchorElement;
    expect(link.textContent).toBe('model/final.pt');
    expect(link.getAttribute('href')).toMatch(
      /edt\/api\/v1\/jobs\/a1b2c3d4e5f6\/artifacts\/model\/final\.pt$/
    );
    expect(
      (q('.jp-edt-result-zip') as HTMLAnchorElement).getAttribute('href')
    ).toMatch(/jobs\/a1b2c3d4e5f6\/result\.zip$/);

    await waitFor(
      () => detail.node.querySelectorAll('.jp-edt-log-tab').length === 3
    );
    const tabs = Array.from(detail.node.querySelectorAll('.jp-edt-log-tab'));
    expect(tabs.map(t => t.textContent)).toEqual([
      'all',
      'driver.stderr',
      'w0.log'
    ]);
    (tabs[2] as HTMLButtonElement).click();
    await waitFor(
      () => q('.jp-edt-detail-log-text').textContent === 'w0.log line\n'
    );
    expect(tabs[2].getAttribute('aria-selected')).toBe('true');
  });

  it('shows a failure folded in its first log tab, the raw logs in the others', async () => {
    await waitFor(() => socket !== null);
    socket?.onopen?.({});
    socket?.onmessage?.({
      data: JSON.stringify({
        id: 9,
        job_id: JOB.id,
        time: 300,
        kind: 'state',
        state: 'FAILED',
        reason: 'ValueError: no data (main.py:3; workers w0, w1)'
      })
    });
    await detail.controller.refreshLogs();
    expect(detail.node.dataset.state).toBe('FAILED');
    const tabs = () =>
      Array.from(detail.node.querySelectorAll<HTMLElement>('.jp-edt-log-tab'));
    expect(tabs().map(t => t.textContent)).toEqual([
      'failure',
      'all',
      'driver.stderr',
      'w0.log'
    ]);
    const [failure, all] = tabs();
    expect(failure.getAttribute('aria-selected')).toBe('true');
    expect(failure.title).toContain('raw logs');
    const log = q('.jp-edt-detail-log-text');
    expect(log.textContent).toBe(
      'w0, w1: Traceback (most recent call last):\nValueError: no data'
    );
    expect(calls).toContain('GET folded');

    all.click();
    await detail.controller.refreshLogs();
    expect(all.getAttribute('aria-selected')).toBe('true');
    expect(log.textContent).toBe(
      '==> driver.stderr <==\ndriver.stderr line\n==> w0.log <==\nw0.log line'
    );
    tabs()[3].click();
    await detail.controller.refreshLogs();
    expect(log.textContent).toBe('w0.log line\n');
  });

  /** Deliver events as the server's feed does: a batch in one message. */
  const send = (...events: object[]) => {
    socket?.onmessage?.({
      data: JSON.stringify(events.map(e => ({ job_id: JOB.id, ...e })))
    });
  };
  const lines = () =>
    Array.from(
      detail.node.querySelectorAll<HTMLElement>('.jp-edt-allocation-changes li')
    );
  const devices = (n: number) => Array.from({ length: n }, (_, i) => `gpu${i}`);
  const resized = {
    kind: 'restart',
    count: 1,
    cause: 'resize',
    world_size: 2,
    killed: [],
    reason:
      'resized from 4 to 2 GPU(s): every worker restarted at 2 GPU(s); its ' +
      'workers exited within the grace (checkpointed, no step lost)'
  };
  const failed = {
    kind: 'restart',
    count: 2,
    cause: 'failure',
    world_size: 2,
    killed: ['w1'],
    reason: 'w1 failed: every worker restarted at 2 GPU(s); w1 was killed'
  };

  it('lists each restart with its cause and size among the allocation changes', async () => {
    await waitFor(() => socket !== null);
    socket?.onopen?.({});
    send(
      { id: 1, time: 100, kind: 'allocation', devices: devices(4) },
      { id: 2, time: 200, kind: 'allocation', devices: devices(2) },
      {
        id: 3,
        time: 201.5,
        kind: 'formed',
        world_size: 2,
        pause_s: 0.5,
        waited_s: 1.5
      },
      { id: 4, time: 201, ...resized }
    );
    // Oldest first; a restart below the change that caused it.
    expect(lines().map(line => line.textContent)).toEqual([
      `${clockTime(100)} started on 4 GPUs`,
      // A restart job's workers all restart: no survivors' pause to show.
      `${clockTime(200)} shrank 4 → 2 training after 1.50\u00a0s`,
      `${clockTime(201)} restart 1 · resize → 2 GPUs`
    ]);
    const restart = lines()[2];
    expect(restart.classList.contains('jp-edt-restart')).toBe(true);
    expect(restart.title).toBe(resized.reason);
    expect(restart.dataset.cause).toBe('resize');
    expect(restart.dataset.gpus).toBe('2');
    expect(detail.node.textContent).not.toContain('pause');
  });

  it('marks a restart whose killed workers lost steps', async () => {
    await waitFor(() => socket !== null);
    socket?.onopen?.({});
    send({ id: 5, time: 300, ...failed });
    const [line] = lines();
    expect(line.textContent).toBe(
      `${clockTime(300)} restart 2 · failure → 2 GPUs · ⚠ killed w1 (steps lost)`
    );
    expect(line.classList.contains('jp-mod-warn')).toBe(true);
    expect(line.title).toBe(failed.reason);
  });

  it('shows a restart once, in time order, however the events arrive', async () => {
    await waitFor(() => socket !== null);
    socket?.onopen?.({});
    // The second restart is stored first; the first (timed when its workers
    // restarted) after it; then the feed repeats both.
    send({ id: 7, time: 300, ...failed }, { id: 8, time: 201, ...resized });
    send({ id: 7, time: 300, ...failed }, { id: 8, time: 201, ...resized });
    expect(lines().map(line => line.textContent)).toEqual([
      `${clockTime(201)} restart 1 · resize → 2 GPUs`,
      `${clockTime(300)} restart 2 · failure → 2 GPUs · ⚠ killed w1 (steps lost)`
    ]);
    expect(detail.controller.restarts.map(r => [r.id, r.count])).toEqual([
      [8, 1],
      [7, 2]
    ]);
  });

  it("words restarts, and a restart job's groups without a pause", () => {
    const restart = { id: 1, time: 1, ...resized, killed: ['w0', 'w2'] };
    expect(describeRestart(restart)).toBe(
      'restart 1 · resize → 2 GPUs · ⚠ killed w0, w2 (steps lost)'
    );
    expect(
      describeRestart({ ...restart, world_size: null, cause: '', killed: [] })
    ).toBe('restart 1');
    const group = { time: 1, world_size: 2, pause_s: 0.04, waited_s: null };
    expect(describeFormed(group, 'restart')).toBe('trained on');
    expect(describeFormed(group)).toBe('trained on (pause 0.04\u00a0s)');
  });

  it('changes nothing when the user declines', async () => {
    await detail.cancel();
    await detail.changePriority();
    await detail.changeMaxGpus();
    expect(calls).toEqual([]);
    expect(detail.node.dataset.state).toBe('RUNNING');
  });

  it('applies confirmed changes and reflects them at once', async () => {
    answers.max = 2;
    await detail.changeMaxGpus();
    expect(calls).toEqual(['PATCH {"max_gpus":2}']);
    expect(detail.controller.job?.max_gpus).toBe(2);
    expect(changed.map(j => j.max_gpus)).toEqual([2]);

    answers.priority = 7;
    await detail.changePriority();
    expect(detail.controller.job?.priority).toBe(7);

    answers.cancel = true;
    await detail.cancel();
    expect(calls).toContain('CANCEL');
    expect(detail.node.dataset.state).toBe('CANCELLED');
    expect(changed[changed.length - 1].state).toBe('CANCELLED');
    expect((q('.jp-edt-action-cancel') as HTMLButtonElement).disabled).toBe(
      true
    );
  });
});

describe('JobDetail of a job sent with its code', () => {
  const CODE = 'import torch\nprint("hi")\n';
  const withCode: IJobInfo = {
    ...JOB,
    name: 'a rather long training job name',
    spec: {
      ...JOB.spec,
      code: CODE,
      entrypoint: 'train.py',
      args: ['--lr', '0.1', '--note', 'two words']
    }
  };

  it('shows the code read-only in its viewer, and "no output yet" for empty logs', async () => {
    const shown: string[][] = [];
    let disposed = 0;
    const controller = new JobController({
      jobId: JOB.id,
      api: {
        ...fakeServer([]),
        getJob: async () => ({ ...withCode }),
        getLog: async (_id, name) => ({
          name,
          text: '',
          offset: 0,
          next_offset: 0,
          size: 0
        })
      },
      connect: silentSocket,
      stream: { silenceTimeout: 0 }
    });
    const detail = new JobDetail({
      jobId: JOB.id,
      controller,
      listArtifacts: async () => [],
      codeViewer: (host, code, path) => {
        shown.push([code, path]);
        host.append(document.createElement('textarea'));
        return { isDisposed: false, dispose: () => void (disposed += 1) };
      }
    });
    Widget.attach(detail, document.body);
    await waitFor(() => detail.node.dataset.state === 'RUNNING');
    expect(detail.title.label).toBe('a rather long training job name');
    expect(detail.title.caption).toContain('[a1b2c3d4e5f6]');
    expect(shown).toEqual([[CODE, 'train.py']]); // once, however often it renders
    const code = detail.node.querySelector('.jp-edt-spec-code') as HTMLElement;
    expect(code.hidden).toBe(false);
    expect(code.dataset.path).toBe('train.py');
    // the code is not repeated in the table
    const table = detail.node.querySelector('.jp-edt-spec-table');
    expect(table?.textContent).not.toContain('import torch');
    expect(table?.textContent).toContain("--lr 0.1 --note 'two words'");

    const log = detail.node.querySelector(
      '.jp-edt-detail-log-text'
    ) as HTMLElement;
    await waitFor(() => log.textContent === 'no output yet');
    expect(log.classList.contains('jp-mod-empty')).toBe(true);
    detail.dispose();
    expect(disposed).toBe(1);
  });
});
