import { Widget } from '@lumino/widgets';

import type { ClusterInfo, IJobApi, IJobInfo, ISocketLike } from '../api';
import { JobsModel } from '../jobs';
import { EdtSidebar, createJobActions, type IJobActions } from '../sidebar';

import { waitFor } from './fixtures/wait';

function job(id: string, change: Partial<IJobInfo> = {}): IJobInfo {
  return {
    id,
    user: 'alice',
    name: `run-${id}`,
    state: 'RUNNING',
    reason: '',
    spec: {},
    min_gpus: 1,
    max_gpus: 4,
    priority: 0,
    devices: ['gpu0', 'gpu1'],
    elastic: true,
    restarts: 0,
    rescaled: 100,
    created: 100,
    updated: 100,
    finished: null,
    ...change
  };
}

const quietSocket = (): ISocketLike => ({
  onopen: null,
  onmessage: null,
  onclose: null,
  onerror: null,
  close: () => undefined
});

const CLUSTER: ClusterInfo = { source: 'virtual', devices: [] };

async function loadedJobs(...jobs: IJobInfo[]): Promise<JobsModel> {
  const model = new JobsModel({
    listJobs: async () => ({ jobs, last_event_id: 0 }),
    getJob: async id => job(id),
    connect: quietSocket
  });
  await model.refresh();
  return model;
}

/** The REST calls the actions make, answered as the server would. */
function fakeApi(calls: string[], fail = false) {
  const api: Pick<IJobApi, 'cancelJob' | 'patchJob'> = {
    cancelJob: async id => {
      calls.push(`cancel ${id}`);
      if (fail) {
        throw new Error('403 Forbidden: not your job');
      }
      return job(id, { state: 'CANCELLED', devices: [], finished: 200 });
    },
    patchJob: async (id, change) => {
      calls.push(`patch ${id} ${JSON.stringify(change)}`);
      return job(id, { max_gpus: change.max_gpus ?? 4, updated: 150 });
    }
  };
  return api;
}

describe('createJobActions', () => {
  it('cancels through the REST client once confirmed, and shows it at once', async () => {
    const jobs = await loadedJobs(job('a1'));
    const calls: string[] = [];
    const asked: string[] = [];
    let confirm = false;
    const actions = createJobActions({
      jobs,
      api: fakeApi(calls),
      open: () => undefined,
      confirmCancel: async name => {
        asked.push(name);
        return confirm;
      }
    });
    await actions.cancel('a1');
    expect(asked).toEqual(['run-a1 [a1]']);
    expect(calls).toEqual([]); // declined: nothing sent

    confirm = true;
    await actions.cancel('a1');
    expect(calls).toEqual(['cancel a1']);
    expect(jobs.state.jobs.get('a1')?.job.state).toBe('CANCELLED');
    expect(actions.isActive('a1')).toBe(false);

    // An ended job is not asked about again.
    await actions.cancel('a1');
    expect(asked).toHaveLength(2);
    expect(calls).toEqual(['cancel a1']);
    jobs.dispose();
  });

  it('says why a cancel failed', async () => {
    const jobs = await loadedJobs(job('a1'));
    const alerts: string[][] = [];
    const actions = createJobActions({
      jobs,
      api: fakeApi([], true),
      open: () => undefined,
      confirmCancel: async () => true,
      alert: async (title, message) => alerts.push([title, message])
    });
    await actions.cancel('a1');
    expect(alerts).toEqual([
      ['The job was not cancelled', '403 Forbidden: not your job']
    ]);
    expect(jobs.state.jobs.get('a1')?.job.state).toBe('RUNNING');
    jobs.dispose();
  });

  it('changes max GPUs by PATCH, only to a new value', async () => {
    const jobs = await loadedJobs(job('a1'));
    const calls: string[] = [];
    const answers = [4, null, 2];
    const actions = createJobActions({
      jobs,
      api: fakeApi(calls),
      open: () => undefined,
      askMaxGpus: async current => {
        expect(current).toBe(4);
        return answers.shift() ?? null;
      }
    });
    await actions.changeMaxGpus('a1'); // the same: nothing
    await actions.changeMaxGpus('a1'); // gave up
    await actions.changeMaxGpus('a1');
    expect(calls).toEqual(['patch a1 {"max_gpus":2}']);
    expect(jobs.state.jobs.get('a1')?.job.max_gpus).toBe(2);
    jobs.dispose();
  });

  it('opens a job and copies its id', async () => {
    const jobs = await loadedJobs(job('a1'));
    const opened: string[] = [];
    const copied: string[] = [];
    const actions = createJobActions({
      jobs,
      api: fakeApi([]),
      open: id => opened.push(id),
      copy: text => copied.push(text)
    });
    actions.open('a1');
    actions.copyId('a1');
    expect(opened).toEqual(['a1']);
    expect(copied).toEqual(['a1']);
    jobs.dispose();
  });
});

describe('EdtSidebar job rows', () => {
  /** Actions that record what was asked of them. */
  function recordingActions(done: string[]): IJobActions {
    return {
      isActive: () => true,
      open: id => done.push(`open ${id}`),
      cancel: async id => void done.push(`cancel ${id}`),
      changeMaxGpus: async id => void done.push(`max ${id}`),
      copyId: id => done.push(`copy ${id}`)
    };
  }

  async function sidebarWith(jobs: JobsModel, actions: IJobActions) {
    const opened: string[] = [];
    const sidebar = new EdtSidebar({
      fetchCluster: async () => CLUSTER,
      jobs,
      openJob: id => opened.push(id),
      actions,
      filter: { scope: 'all', state: 'all' }
    });
    Widget.attach(sidebar, document.body);
    await waitFor(
      () => sidebar.node.querySelectorAll('.jp-edt-jobrow').length > 0
    );
    return { sidebar, opened };
  }

  it('offers open, cancel, change max GPUs and copy id on each running row', async () => {
    const jobs = await loadedJobs(
      job('a1'),
      job('b2', { state: 'SUCCEEDED', devices: [], created: 50 })
    );
    const done: string[] = [];
    const { sidebar, opened } = await sidebarWith(jobs, recordingActions(done));
    const buttons = (id: string) =>
      Array.from(
        sidebar.node.querySelectorAll<HTMLButtonElement>(
          `.jp-edt-jobrow[data-job-id="${id}"] .jp-edt-jobrow-action`
        )
      );
    expect(buttons('a1').map(b => b.dataset.action)).toEqual([
      'open',
      'cancel',
      'max-gpus',
      'copy-id'
    ]);
    expect(buttons('a1').map(b => b.getAttribute('aria-label'))).toEqual([
      'Open job',
      'Cancel job…',
      'Change max GPUs…',
      'Copy job id (a1)'
    ]);
    // An ended job can only be opened and its id copied.
    expect(buttons('b2').map(b => b.dataset.action)).toEqual([
      'open',
      'copy-id'
    ]);
    for (const button of buttons('a1')) {
      button.click();
    }
    expect(done).toEqual(['open a1', 'cancel a1', 'max a1', 'copy a1']);
    expect(opened).toEqual([]); // a button is not a click on the row
    sidebar.dispose();
    jobs.dispose();
  });

  it("shows the runtime's totals: epoch e/E · step s/S, and a bar", async () => {
    const jobs = await loadedJobs(
      job('a1', { spec: { env: { EDT_EPOCHS: '3' } } })
    );
    const { sidebar } = await sidebarWith(jobs, recordingActions([]));
    const records = [
      {
        type: 'train_begin',
        epoch: 0,
        global_step: 0,
        epochs: 200,
        steps_per_epoch: 8
      },
      ...[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(n => ({
        type: 'step',
        global_step: n,
        epoch: Math.floor(n / 8),
        step: n % 8
      }))
    ];
    jobs.apply({ kind: 'metrics', job_id: 'a1', time: 90, records });
    const text = () =>
      sidebar.node.querySelector('.jp-edt-jobrow-progress-text')?.textContent;
    await waitFor(() => text() === 'epoch 2/200 · step 2/8');
    const bar = sidebar.node.querySelector('.jp-edt-jobrow [role=progressbar]');
    expect(bar?.getAttribute('aria-valuenow')).toBe('1'); // 10 of 1600 steps
    sidebar.dispose();
    jobs.dispose();
  });
});
