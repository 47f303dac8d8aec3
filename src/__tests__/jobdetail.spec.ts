import { Widget } from '@lumino/widgets';

import { JobDetail, type IConfirm } from '../jobview/detail';
import { JobController } from '../jobpanel/controller';
import type { IJobApi, IJobInfo, ISocketLike } from '../api';

const JOB: IJobInfo = {
  id: 'a1b2c3d4e5f6',
  user: 'alice',
  name: 'digits',
  state: 'RUNNING',
  reason: 'started',
  spec: { entrypoint: 'main.py', env: { EDT_EPOCHS: '2' } },
  min_gpus: 1,
  max_gpus: 4,
  priority: 0,
  devices: ['gpu0', 'gpu1'],
  elastic: true,
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
    patchJob: async (_id, change) => {
      calls.push(`PATCH ${JSON.stringify(change)}`);
      job = { ...job, ...change, updated: job.updated + 1 };
      return { ...job };
    },
    cancelJob: async () => {
      calls.push('DELETE');
      job = { ...job, state: 'CANCELLED', devices: [], finished: 200 };
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

  beforeEach(async () => {
    calls = [];
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
      connect: silentSocket,
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

  it('shows the spec, the artifacts and a tab per log', async () => {
    expect(detail.title.label).toBe('digits [a1b2c3d4e5f6]');
    expect(q('.jp-edt-spec-text').textContent).toContain(
      '"entrypoint": "main.py"'
    );
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
    expect(calls).toContain('DELETE');
    expect(detail.node.dataset.state).toBe('CANCELLED');
    expect(changed[changed.length - 1].state).toBe('CANCELLED');
    expect((q('.jp-edt-action-cancel') as HTMLButtonElement).disabled).toBe(
      true
    );
  });
});
