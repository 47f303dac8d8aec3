import { JobsModel } from '../jobs/model';
import type { IJobFinished } from '../jobs/state';
import type { IJobEvent, IJobInfo, ISocketLike } from '../api';

/** A socket the test opens, feeds and drops by hand. */
class FakeSocket implements ISocketLike {
  constructor(
    readonly after: number,
    readonly jobId: string
  ) {}
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: unknown) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  closed = false;

  open(): void {
    this.onopen?.({});
  }
  deliver(...events: IJobEvent[]): void {
    for (const event of events) {
      this.onmessage?.({ data: JSON.stringify(event) });
    }
  }
  drop(): void {
    this.onclose?.({});
  }
  close(): void {
    this.closed = true;
  }
}

function job(id: string, change: Partial<IJobInfo> = {}): IJobInfo {
  return {
    id,
    user: 'alice',
    name: id,
    state: 'RUNNING',
    reason: '',
    spec: {},
    min_gpus: 1,
    max_gpus: 4,
    priority: 0,
    devices: ['gpu0', 'gpu1', 'gpu2', 'gpu3'],
    elastic: true,
    restarts: 0,
    rescaled: 100,
    created: 90,
    updated: 100,
    finished: null,
    ...change
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

function setup(server: Map<string, IJobInfo>, listedAt = 0) {
  const sockets: FakeSocket[] = [];
  let lists = 0;
  const model = new JobsModel({
    listJobs: async () => {
      lists += 1;
      return { jobs: [...server.values()], last_event_id: listedAt };
    },
    getJob: async id => {
      const found = server.get(id);
      if (!found) {
        throw new Error(`no job ${id}`);
      }
      return found;
    },
    connect: (after, jobId) => {
      const socket = new FakeSocket(after, jobId);
      sockets.push(socket);
      return socket;
    },
    stream: { minDelay: 5, maxDelay: 40, silenceTimeout: 0 }
  });
  return { model, sockets, lists: () => lists };
}

describe('JobsModel', () => {
  let model: JobsModel;
  afterEach(() => {
    model?.dispose();
    jest.restoreAllMocks();
  });

  it('connects only while active, and then for every job', async () => {
    const env = setup(new Map([['a', job('a')]]));
    model = env.model;
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(env.sockets).toHaveLength(0);
    expect(env.lists()).toBe(0);

    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    expect(env.lists()).toBe(1);
    expect(env.sockets[0].after).toBe(0);
    expect(env.sockets[0].jobId).toBe('');
    expect(model.state.jobs.get('a')?.job.devices).toHaveLength(4);
  });

  it('follows the feed from the newest event the snapshot includes', async () => {
    // Replaying the feed from its start would apply every old event again
    // (idle work on a busy server), and ask for jobs deleted since (404s).
    const env = setup(new Map([['a', job('a')]]), 57);
    model = env.model;
    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    expect(env.sockets[0].after).toBe(57);
    env.sockets[0].open();
    env.sockets[0].deliver({
      id: 58,
      kind: 'limits',
      job_id: 'a',
      time: 120,
      max_gpus: 3
    });
    expect(model.state.jobs.get('a')?.job.max_gpus).toBe(3);
    // the refresh button reads the list again; the stream goes on where it is
    await model.refresh();
    expect(env.lists()).toBe(2);
    expect(model.cursor).toBe(58);
  });

  it('applies live events and resumes after the last id on reconnect', async () => {
    const env = setup(new Map([['a', job('a')]]));
    model = env.model;
    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    const first = env.sockets[0];
    first.open();
    expect(model.state.connection).toBe('open');
    first.deliver(
      {
        id: 4,
        kind: 'allocation',
        job_id: 'a',
        time: 110,
        devices: ['gpu0', 'gpu1']
      },
      { kind: 'keepalive' }
    );
    expect(model.state.jobs.get('a')?.job.devices).toEqual(['gpu0', 'gpu1']);
    expect(model.cursor).toBe(4);

    first.drop();
    expect(model.state.connection).toBe('reconnecting');
    await waitFor(() => env.sockets.length === 2);
    expect(env.sockets[1].after).toBe(4);
    // The server replays from the cursor; an overlap is not applied twice.
    env.sockets[1].open();
    env.sockets[1].deliver(
      { id: 4, kind: 'allocation', job_id: 'a', time: 110, devices: ['gpu9'] },
      { id: 5, kind: 'limits', job_id: 'a', time: 120, max_gpus: 2 }
    );
    expect(model.state.jobs.get('a')?.job.devices).toEqual(['gpu0', 'gpu1']);
    expect(model.state.jobs.get('a')?.job.max_gpus).toBe(2);
  });

  it('backs off exponentially while the server is away', async () => {
    // Lumino's Poll draws each backoff delay at random up to its nominal
    // value: pin the draw at the top, so the nominal delays are exact.
    jest.spyOn(Math, 'random').mockReturnValue(0.9999);
    const env = setup(new Map());
    model = env.model;
    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    const times: number[] = [];
    for (let i = 0; i < 4; i++) {
      const count = env.sockets.length;
      const start = Date.now();
      env.sockets[count - 1].drop();
      await waitFor(() => env.sockets.length === count + 1);
      times.push(Date.now() - start);
    }
    // 5, 10, 20, 40 ms: each wait at least the last one's nominal delay.
    expect(times[3]).toBeGreaterThanOrEqual(35);
    expect(times[3]).toBeGreaterThan(times[0]);
  });

  it('closes while inactive and catches up from the cursor after', async () => {
    const server = new Map([['a', job('a')]]);
    const env = setup(server);
    model = env.model;
    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    env.sockets[0].open();
    env.sockets[0].deliver({
      id: 9,
      kind: 'limits',
      job_id: 'a',
      time: 101,
      priority: 5
    });

    model.setActive(false);
    expect(env.sockets[0].closed).toBe(true);
    expect(model.state.connection).toBe('closed');
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(env.sockets).toHaveLength(1); // no reconnection while inactive

    const finished: IJobFinished[] = [];
    model.finished.connect((_, f) => finished.push(f));
    model.setActive(true);
    await waitFor(() => env.sockets.length === 2);
    expect(env.sockets[1].after).toBe(9);
    expect(env.lists()).toBe(1); // the snapshot is not read again
    env.sockets[1].open();
    env.sockets[1].deliver({
      id: 10,
      kind: 'state',
      job_id: 'a',
      time: 130,
      state: 'SUCCEEDED'
    });
    expect(finished.map(f => [f.job.id, f.job.state, f.previous])).toEqual([
      ['a', 'SUCCEEDED', 'RUNNING']
    ]);
  });

  it('fetches a job first seen in the feed', async () => {
    const server = new Map([['a', job('a')]]);
    const env = setup(server);
    model = env.model;
    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    server.set('b', job('b', { state: 'QUEUED', devices: [], created: 200 }));
    env.sockets[0].open();
    env.sockets[0].deliver({
      id: 1,
      kind: 'state',
      job_id: 'b',
      time: 200,
      state: 'QUEUED'
    });
    await waitFor(() => model.state.jobs.has('b'));
    expect(model.state.jobs.get('b')?.job.state).toBe('QUEUED');
  });

  it('keeps the events of a job being read and applies them after', async () => {
    // The server answers the read of a new job with what it was before the
    // events that arrive while the answer travels (a busy server).
    let answer: (job: IJobInfo) => void = () => undefined;
    const sockets: FakeSocket[] = [];
    model = new JobsModel({
      listJobs: async () => ({ jobs: [], last_event_id: 0 }),
      getJob: () => new Promise<IJobInfo>(resolve => (answer = resolve)),
      connect: (after, jobId) => {
        const socket = new FakeSocket(after, jobId);
        sockets.push(socket);
        return socket;
      },
      stream: { minDelay: 5, maxDelay: 40, silenceTimeout: 0 }
    });
    model.setActive(true);
    await waitFor(() => sockets.length === 1);
    sockets[0].open();
    sockets[0].deliver(
      { id: 1, kind: 'state', job_id: 'b', time: 100, state: 'QUEUED' },
      { id: 2, kind: 'allocation', job_id: 'b', time: 101, devices: ['gpu2'] },
      { id: 3, kind: 'state', job_id: 'b', time: 102, state: 'STARTING' }
    );
    expect(model.state.jobs.has('b')).toBe(false);
    answer(job('b', { state: 'QUEUED', devices: [], updated: 100 }));
    await waitFor(() => model.state.jobs.get('b')?.job.state === 'STARTING');
    expect(model.state.jobs.get('b')?.job.devices).toEqual(['gpu2']);
    // later events apply at once
    sockets[0].deliver({
      id: 4,
      kind: 'state',
      job_id: 'b',
      time: 103,
      state: 'RUNNING'
    });
    expect(model.state.jobs.get('b')?.job.state).toBe('RUNNING');
    expect(model.state.jobs.get('b')?.job.devices).toEqual(['gpu2']);
  });

  it('reports a failed listing and takes an action answer at once', async () => {
    const env = setup(new Map());
    model = env.model;
    const failing = new JobsModel({
      listJobs: async () => {
        throw new Error('503 Service Unavailable');
      },
      getJob: async () => job('x'),
      connect: (after, jobId) => new FakeSocket(after, jobId)
    });
    await failing.refresh();
    expect(failing.state.error).toContain('503 Service Unavailable');
    expect(failing.state.loading).toBe(false);
    failing.update(job('x', { state: 'CANCELLED' }));
    expect(failing.state.jobs.get('x')?.job.state).toBe('CANCELLED');
    failing.dispose();
  });

  it('counts a job an action ended as finished, once', async () => {
    const env = setup(new Map([['a', job('a')]]));
    model = env.model;
    const finished: string[] = [];
    model.finished.connect((_, f) =>
      finished.push(`${f.previous}>${f.job.state}`)
    );
    model.setActive(true);
    await waitFor(() => env.sockets.length === 1);
    env.sockets[0].open();
    // The DELETE answer comes first, then the event saying the same.
    model.update(job('a', { state: 'CANCELLED', updated: 150, devices: [] }));
    env.sockets[0].deliver({
      id: 3,
      kind: 'state',
      job_id: 'a',
      time: 150,
      state: 'CANCELLED'
    });
    expect(finished).toEqual(['RUNNING>CANCELLED']);
  });
});
