import { Widget } from '@lumino/widgets';

import type { ClusterInfo, IJobInfo, ISocketLike } from '../api';
import {
  ClusterModel,
  hasReadings,
  heldSummary,
  historyColumns
} from '../cluster';
import { JobsModel, type IJobFilter } from '../jobs';
import { EdtSidebar } from '../sidebar';

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

function quietSocket(): ISocketLike {
  return {
    onopen: null,
    onmessage: null,
    onclose: null,
    onerror: null,
    close: () => undefined
  };
}

const CLUSTER: ClusterInfo = {
  source: 'virtual',
  devices: [0, 1].map(index => ({
    id: `gpu${index}`,
    index,
    node: 'lab1',
    uuid: `virtual-${index}`,
    name: `Virtual GPU ${index}`,
    memory_total: null,
    memory_used: null,
    utilization: null,
    virtual: true,
    held: index === 0,
    job_id: index === 0 ? 'a1b2c3d4e5f6' : null
  }))
};

describe('ClusterModel', () => {
  it('keeps the devices and reports a later failure', async () => {
    let fail = false;
    const model = new ClusterModel({
      fetchCluster: async () => {
        if (fail) {
          throw new Error('server went away');
        }
        return CLUSTER;
      },
      standby: 'never'
    });
    expect(model.state.loading).toBe(true);

    await model.refresh();
    expect(model.state).toEqual({
      cluster: CLUSTER,
      error: null,
      loading: false
    });

    fail = true;
    await model.refresh();
    expect(model.state.error).toBe('server went away');
    expect(model.state.cluster).toEqual(CLUSTER);

    model.dispose();
    expect(model.isDisposed).toBe(true);
  });
});

describe('EdtSidebar', () => {
  let sidebar: EdtSidebar;
  let calls: number;

  beforeEach(() => {
    calls = 0;
    sidebar = new EdtSidebar({
      fetchCluster: async () => {
        calls += 1;
        return CLUSTER;
      },
      interval: 20
    });
  });

  afterEach(() => {
    sidebar.dispose();
  });

  it('has the id, class and caption the shell and the UI tests use', () => {
    expect(sidebar.id).toBe('jupyter-edt-sidebar');
    expect(sidebar.hasClass('jp-edt-sidebar')).toBe(true);
    expect(sidebar.title.caption).toBe('Elastic Training');
  });

  it('lists the devices once shown', async () => {
    Widget.attach(sidebar, document.body);
    await waitFor(
      () => sidebar.node.querySelectorAll('.jp-edt-device').length === 2
    );

    const rows = sidebar.node.querySelectorAll('.jp-edt-device');
    expect(rows[0].getAttribute('data-device-id')).toBe('gpu0');
    expect(rows[1].querySelector('.jp-edt-virtual-badge')).not.toBeNull();
    expect(rows[0].querySelector('.jp-edt-device-holder')?.textContent).toBe(
      'training job a1b2c3d4e5f6'
    );
    expect(rows[1].querySelector('.jp-edt-device-holder')?.textContent).toBe(
      'free'
    );
    expect(sidebar.node.querySelector('.jp-edt-source')?.textContent).toBe(
      '2 virtual GPUs (no NVIDIA GPU found)'
    );
    expect(sidebar.node.querySelector('.jp-edt-device-list')).not.toBeNull();
    expect(sidebar.node.querySelector('.jp-edt-draining-badge')).toBeNull();
  });

  it("marks a draining node's devices", async () => {
    const draining = new EdtSidebar({
      fetchCluster: async () => ({
        ...CLUSTER,
        devices: CLUSTER.devices.map(d => ({
          ...d,
          draining: true,
          drain_deadline: Date.now() / 1000 + 600
        }))
      }),
      interval: 20
    });
    Widget.attach(draining, document.body);
    await waitFor(
      () =>
        draining.node.querySelectorAll('.jp-edt-draining-badge').length === 2
    );
    const row = draining.node.querySelector('.jp-edt-device');
    expect(row?.getAttribute('data-draining')).toBe('true');
    expect(
      row?.querySelector('.jp-edt-draining-badge')?.getAttribute('title')
    ).toMatch(/^Its node leaves in 10 minutes;/);
    expect(draining.node.querySelector('.jp-edt-source')?.textContent).toBe(
      '2 virtual GPUs (no NVIDIA GPU found), 1 node draining'
    );
    draining.dispose();
  });

  it('does not poll while hidden', async () => {
    sidebar.hide();
    Widget.attach(sidebar, document.body);
    await new Promise(resolve => setTimeout(resolve, 150));
    expect(calls).toBe(0);

    sidebar.show();
    await waitFor(() => calls > 0);
  });
});

describe('EdtSidebar with jobs', () => {
  it('lists jobs newest first, filters them, and opens one', async () => {
    const jobs = new JobsModel({
      listJobs: async () => ({
        last_event_id: 0,
        jobs: [
          job('a1', { created: 100, elastic: false, restarts: 2 }),
          job('b2', {
            created: 200,
            user: 'bob',
            devices: [],
            state: 'QUEUED',
            spec: { kind: 'restart' }
          }),
          job('c3', {
            created: 300,
            state: 'SUCCEEDED',
            devices: [],
            spec: { kind: 'rigid' }
          })
        ]
      }),
      getJob: async id => job(id),
      connect: quietSocket
    });
    const opened: string[] = [];
    const saved: IJobFilter[] = [];
    const sidebar = new EdtSidebar({
      fetchCluster: async () => CLUSTER,
      jobs,
      openJob: id => opened.push(id)
    });
    sidebar.filterChanged.connect((_, f) => saved.push(f));
    sidebar.user = 'alice';
    Widget.attach(sidebar, document.body);
    jobs.setActive(true);
    const ids = () =>
      Array.from(sidebar.node.querySelectorAll('.jp-edt-jobrow')).map(row =>
        row.getAttribute('data-job-id')
      );
    await waitFor(() => ids().length === 2);
    expect(ids()).toEqual(['c3', 'a1']); // mine, newest first

    sidebar.filter = { scope: 'all', state: 'all' };
    await waitFor(() => ids().length === 3);
    expect(ids()).toEqual(['c3', 'b2', 'a1']);
    // Every row shows its job's kind as a tag.
    const tag = (id: string) =>
      sidebar.node.querySelector(
        `.jp-edt-jobrow[data-job-id="${id}"] .jp-edt-kind-tag`
      ) as HTMLElement;
    expect(tag('c3').textContent).toBe('rigid');
    expect(tag('c3').title).toBe('Rigid: runs at a fixed size.');
    sidebar.filter = { scope: 'all', state: 'active' };
    await waitFor(() => ids().length === 2);
    expect(ids()).toEqual(['b2', 'a1']);
    expect(saved).toHaveLength(2);

    const row = sidebar.node.querySelector(
      '.jp-edt-jobrow[data-job-id="a1"]'
    ) as HTMLElement;
    expect(row.textContent).toContain('2/4 GPUs');
    // Its kind as a tag: a record without a kind is elastic; this one's
    // program does not use the elastic runtime, and its driver died twice.
    expect(tag('a1').textContent).toBe('elastic ↻2');
    expect(tag('a1').dataset.kind).toBe('elastic');
    expect(tag('a1').dataset.fixed).toBe('true');
    expect(tag('a1').title).toContain(
      'does not use the elastic runtime (or has not started it yet): it runs at a fixed size'
    );
    // A queued job shows its kind too: it was chosen at submission.
    expect(tag('b2').textContent).toBe('restart');
    expect(tag('b2').dataset.fixed).toBe('false');
    expect(tag('b2').title).toBe(
      'Restart: resized by a graceful restart from a checkpoint.'
    );
    expect(row.querySelector('.jp-edt-state-badge')?.textContent).toBe(
      'RUNNING'
    );
    row.click();
    expect(opened).toEqual(['a1']);

    // The device held by a listed job names it.
    await waitFor(
      () =>
        sidebar.node.querySelector('.jp-edt-device-holder')?.textContent ===
        'training job a1b2c3d4e5f6'
    );
    sidebar.dispose();
    jobs.dispose();
  });

  it("shows a failed job's reason, the sentence the toast gives", async () => {
    const reason =
      'RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 32x10) ' +
      '(main.py:14 in forward; workers w0, w1)\nThe end of its logs: ...';
    const jobs = new JobsModel({
      listJobs: async () => ({
        last_event_id: 0,
        jobs: [
          job('f1', { created: 200, state: 'FAILED', devices: [], reason }),
          job('r2', { created: 100 })
        ]
      }),
      getJob: async id => job(id),
      connect: quietSocket
    });
    const sidebar = new EdtSidebar({
      fetchCluster: async () => CLUSTER,
      jobs,
      openJob: () => undefined
    });
    sidebar.user = 'alice';
    Widget.attach(sidebar, document.body);
    jobs.setActive(true);
    const shown = (id: string) =>
      sidebar.node.querySelector(
        `.jp-edt-jobrow[data-job-id="${id}"] .jp-edt-jobrow-reason`
      ) as HTMLElement | null;
    await waitFor(() => shown('f1') !== null);
    expect(shown('f1')!.textContent).toBe(reason.split('\n')[0]);
    expect(shown('f1')!.title).toBe(reason.split('\n')[0]);
    expect(shown('r2')).toBeNull(); // a running job has no reason to show
    sidebar.dispose();
    jobs.dispose();
  });

  it('tells the plugin when it is shown and hidden', () => {
    const sidebar = new EdtSidebar({ fetchCluster: async () => CLUSTER });
    const seen: boolean[] = [];
    sidebar.visibilityChanged.connect((_, visible) => seen.push(visible));
    Widget.attach(sidebar, document.body);
    sidebar.hide();
    sidebar.show();
    expect(seen).toEqual([true, false, true]);
    sidebar.dispose();
  });
});

describe('device history and the cluster summary', () => {
  const device = CLUSTER.devices[0];

  it('charts only devices with utilisation readings', () => {
    expect(hasReadings(device)).toBe(false);
    const virtual = {
      ...device,
      history: [
        { time: 1, utilization: null, memory_used: null },
        { time: 2, utilization: null, memory_used: null }
      ]
    };
    expect(hasReadings(virtual)).toBe(false);
    const real = {
      ...device,
      history: [
        { time: 1, utilization: 20, memory_used: 5 },
        { time: 2, utilization: 140, memory_used: 6 }
      ]
    };
    expect(hasReadings(real)).toBe(true);
    expect(historyColumns(real)).toEqual([
      [1, 2],
      [20, 100]
    ]);
  });

  it('counts the devices held', () => {
    expect(heldSummary(CLUSTER)).toBe('1 of 2 devices held');
    expect(heldSummary(null)).toBe('');
  });
});
