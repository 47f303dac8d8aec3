/// <reference types="node" />
import * as fs from 'fs';
import * as path from 'path';

import { ServerConnection } from '@jupyterlab/services';

import { ChartData, toFloat64 } from '../widgets/chartdata';
import { ALL_LOGS, JobController } from '../jobpanel/controller';
import {
  EventStream,
  eventsUrl,
  type IJobApi,
  type IJobEvent,
  type IJobInfo,
  type IFoldedLogs,
  type ILogChunk,
  type IMetricRecord,
  type ISocketLike
} from '../api';
import { MODULE_NAME, MODULE_VERSION } from '../widgets/version';

const JOB_ID = 'a1b2c3d4e5f6';

/** A WebSocket stand-in the test drives. */
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
    this.onerror?.({});
    this.onclose?.({});
  }
  close(): void {
    this.closed = true;
  }
}

function fakeConnect() {
  const sockets: FakeSocket[] = [];
  const connect = (after: number, jobId: string) => {
    const socket = new FakeSocket(after, jobId);
    sockets.push(socket);
    return socket;
  };
  return { sockets, connect };
}

function jobInfo(change: Partial<IJobInfo> = {}): IJobInfo {
  return {
    id: JOB_ID,
    user: 'alice',
    name: 'digits',
    state: 'RUNNING',
    reason: 'started',
    spec: { env: { EDT_EPOCHS: '2' } },
    min_gpus: 1,
    max_gpus: 2,
    priority: 0,
    devices: ['gpu0'],
    elastic: true,
    restarts: 0,
    rescaled: 100,
    created: 90,
    updated: 100,
    finished: null,
    ...change
  };
}

function step(g: number, loss: number, epoch = 0): IMetricRecord {
  return { type: 'step', global_step: g, epoch, step: g % 3, loss };
}

/** An in-memory server for the controller. */
class FakeApi implements IJobApi {
  job = jobInfo();
  metrics: IMetricRecord[] = [];
  logs: Record<string, string> = {
    'driver.log': 'driver started\n',
    'worker-0.log': 'epoch 0\n'
  };
  calls: string[] = [];
  failGet = 0;
  pageSize = 2;

  async getJob(jobId: string): Promise<IJobInfo> {
    this.calls.push(`GET ${jobId}`);
    if (this.failGet > 0) {
      this.failGet--;
      throw new Error('server went away');
    }
    return { ...this.job };
  }
  async getMetrics(jobId: string, after: number) {
    this.calls.push(`GET metrics after=${after}`);
    const rows = this.metrics
      .map((record, i) => ({ ...record, id: i + 1 }))
      .filter(record => record.id > after)
      .slice(0, this.pageSize);
    return {
      metrics: rows,
      cursor: rows.length ? rows[rows.length - 1].id : after
    };
  }
  async getLogNames(): Promise<string[]> {
    this.calls.push('GET logs');
    return Object.keys(this.logs);
  }
  async getLog(jobId: string, name: string, tail: number): Promise<ILogChunk> {
    this.calls.push(`GET log ${name} tail=${tail}`);
    const text = this.logs[name];
    return { name, text, offset: 0, next_offset: text.length, size: 0 };
  }
  async getFoldedLogs(): Promise<IFoldedLogs> {
    this.calls.push('GET logs folded');
    return { text: '', logs: Object.keys(this.logs) };
  }
  async patchJob(
    jobId: string,
    change: { priority?: number; max_gpus?: number }
  ) {
    this.calls.push(`PATCH ${JSON.stringify(change)}`);
    this.job = { ...this.job, ...change, updated: this.job.updated + 1 };
    return { ...this.job };
  }
  async cancelJob(): Promise<IJobInfo> {
    this.calls.push('CANCEL');
    this.job = { ...this.job, state: 'CANCELLED', devices: [], finished: 200 };
    return { ...this.job };
  }
  async deleteJob(): Promise<IJobInfo> {
    this.calls.push('DELETE');
    return { ...this.job };
  }
}

/** Let pending promise callbacks run (fetches of the fake API). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await Promise.resolve();
  }
}

describe('EventStream', () => {
  afterEach(() => {
    jest.useRealTimers();
    jest.restoreAllMocks();
  });

  it('delivers the job events, skips others, and resumes after the last id', async () => {
    jest.useFakeTimers();
    // Lumino's Poll draws each backoff delay at random up to its nominal
    // value: pin the draw at the top, so the nominal delays are exact.
    jest.spyOn(Math, 'random').mockReturnValue(0.9999);
    const { sockets, connect } = fakeConnect();
    const received: IJobEvent[] = [];
    const statuses: string[] = [];
    const stream = new EventStream({
      jobId: JOB_ID,
      connect,
      onEvent: e => received.push(e),
      onStatus: s => statuses.push(s),
      minDelay: 100,
      maxDelay: 400
    });
    stream.start();
    expect(sockets).toHaveLength(1);
    expect(sockets[0].after).toBe(0);
    sockets[0].open();
    sockets[0].deliver(
      { id: 1, kind: 'state', job_id: JOB_ID, state: 'RUNNING' },
      { id: 2, kind: 'state', job_id: 'other', state: 'RUNNING' },
      { kind: 'keepalive' },
      { id: 3, kind: 'allocation', job_id: JOB_ID, devices: ['gpu0'] }
    );
    sockets[0].onmessage?.({ data: 'not json' });
    expect(received.map(e => e.id)).toEqual([1, 3]);
    expect(stream.lastId).toBe(3);

    // The connection drops: reconnect after 100 ms, then 200, 400, 400 ms.
    sockets[0].drop();
    expect(stream.status).toBe('reconnecting');
    await jest.advanceTimersByTimeAsync(99);
    expect(sockets).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(sockets).toHaveLength(2);
    expect(sockets[1].after).toBe(3);
    sockets[1].drop();
    await jest.advanceTimersByTimeAsync(199);
    expect(sockets).toHaveLength(2);
    await jest.advanceTimersByTimeAsync(1);
    expect(sockets).toHaveLength(3);
    sockets[2].drop();
    await jest.advanceTimersByTimeAsync(400);
    expect(sockets).toHaveLength(4);
    sockets[3].drop();
    await jest.advanceTimersByTimeAsync(400);
    expect(sockets).toHaveLength(5);
    // An open connection resets the backoff; a replayed id is not repeated.
    sockets[4].open();
    expect(stream.reconnectDelay).toBe(100);
    sockets[4].deliver(
      { id: 3, kind: 'allocation', job_id: JOB_ID, devices: ['gpu0'] },
      { id: 4, kind: 'limits', job_id: JOB_ID, max_gpus: 3 }
    );
    expect(received.map(e => e.id)).toEqual([1, 3, 4]);
    // A batch (batch=1): its events in order, one already seen skipped.
    sockets[4].onmessage?.({
      data: JSON.stringify([
        { id: 4, kind: 'limits', job_id: JOB_ID, max_gpus: 3 },
        { id: 5, kind: 'state', job_id: 'other', state: 'QUEUED' },
        null,
        { id: 6, kind: 'metrics', job_id: JOB_ID, records: [] }
      ])
    });
    expect(received.map(e => e.id)).toEqual([1, 3, 4, 6]);
    expect(stream.lastId).toBe(6);
    expect(statuses).toEqual(['connecting', 'open', 'reconnecting', 'open']);

    stream.stop();
    expect(sockets[4].closed).toBe(true);
    expect(stream.status).toBe('closed');
    await jest.advanceTimersByTimeAsync(10_000);
    expect(sockets).toHaveLength(5);
  });

  it('replaces a connection that went silent', async () => {
    jest.useFakeTimers();
    const { sockets, connect } = fakeConnect();
    const stream = new EventStream({
      jobId: JOB_ID,
      connect,
      onEvent: () => undefined,
      minDelay: 10,
      silenceTimeout: 1000
    });
    stream.start();
    sockets[0].open();
    await jest.advanceTimersByTimeAsync(900);
    sockets[0].deliver({ kind: 'keepalive' });
    await jest.advanceTimersByTimeAsync(900);
    expect(sockets).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(100);
    expect(sockets[0].closed).toBe(true);
    await jest.advanceTimersByTimeAsync(10);
    expect(sockets).toHaveLength(2);
    stream.stop();
  });
});

describe('JobController', () => {
  afterEach(() => jest.useRealTimers());

  function controller(api: FakeApi, connect: ReturnType<typeof fakeConnect>) {
    return new JobController({
      jobId: JOB_ID,
      api,
      connect: connect.connect,
      logTail: 5,
      logInterval: 1000,
      retryDelay: 100,
      stream: { minDelay: 10, silenceTimeout: 0 }
    });
  }

  it('loads the job and its metrics history, then follows the events', async () => {
    jest.useFakeTimers();
    const api = new FakeApi();
    api.metrics = [step(0, 1.0), step(1, 0.9), step(2, 0.8)];
    const sockets = fakeConnect();
    const c = controller(api, sockets);
    let changes = 0;
    c.changed.connect(() => changes++);
    await c.start();

    expect(c.job?.state).toBe('RUNNING');
    expect(api.calls.slice(0, 4)).toEqual([
      `GET ${JOB_ID}`,
      'GET metrics after=0',
      'GET metrics after=2',
      'GET metrics after=3'
    ]);
    expect(c.loss.train.x).toEqual([0, 1, 2]);
    // History first, then the feed from the start (for the allocation history).
    expect(sockets.sockets).toHaveLength(1);
    expect(sockets.sockets[0].after).toBe(0);
    expect(changes).toBeGreaterThan(0);

    const socket = sockets.sockets[0];
    socket.open();
    socket.deliver(
      // replayed history: older than the fetched job, so only charts change
      { id: 1, kind: 'state', job_id: JOB_ID, time: 90, state: 'QUEUED' },
      {
        id: 2,
        kind: 'allocation',
        job_id: JOB_ID,
        time: 95,
        devices: ['gpu0']
      },
      {
        id: 3,
        kind: 'metrics',
        job_id: JOB_ID,
        time: 99,
        records: [step(1, 0.9), step(2, 0.8)]
      },
      // live
      {
        id: 4,
        kind: 'allocation',
        job_id: JOB_ID,
        time: 101,
        devices: ['gpu0', 'gpu1']
      },
      {
        id: 5,
        kind: 'metrics',
        job_id: JOB_ID,
        time: 102,
        records: [step(3, 0.7, 1), { type: 'epoch', epoch: 0, val_loss: 0.75 }]
      },
      {
        id: 6,
        kind: 'limits',
        job_id: JOB_ID,
        time: 103,
        max_gpus: 4,
        priority: 5
      }
    );
    expect(c.job?.state).toBe('RUNNING');
    expect(c.job?.devices).toEqual(['gpu0', 'gpu1']);
    expect([c.job?.max_gpus, c.job?.priority]).toEqual([4, 5]);
    expect(c.loss.train.x).toEqual([0, 1, 2, 3]);
    expect(c.loss.validation.get('val_loss')?.x).toEqual([2]); // epoch 0's last step
    expect(c.allocation.columns()).toEqual([
      [95, 101],
      [1, 2]
    ]);
    expect(c.connection).toBe('open');
    expect(c.lastEventId).toBe(6);

    // A dropped connection resumes after the last event.
    socket.drop();
    await jest.advanceTimersByTimeAsync(10);
    expect(sockets.sockets[1].after).toBe(6);

    // The job ends: the feed closes, the last metrics and logs are read.
    sockets.sockets[1].open();
    api.metrics.push(step(4, 0.6, 1));
    sockets.sockets[1].deliver(
      { id: 7, kind: 'allocation', job_id: JOB_ID, time: 110, devices: [] },
      {
        id: 8,
        kind: 'state',
        job_id: JOB_ID,
        time: 110,
        state: 'SUCCEEDED',
        reason: 'exit code 0'
      }
    );
    await settle();
    expect(c.done).toBe(true);
    expect(c.job?.state).toBe('SUCCEEDED');
    expect(c.job?.finished).toBe(110);
    expect(sockets.sockets[1].closed).toBe(true);
    expect(c.connection).toBe('closed');
    expect(c.loss.train.x).toEqual([0, 1, 2, 3, 4]);
    expect(c.allocation.columns()[1]).toEqual([1, 2, 0]);
    c.dispose();
    expect(c.isDisposed).toBe(true);
  });

  it('polls log tails only while visible and running', async () => {
    jest.useFakeTimers();
    const api = new FakeApi();
    const sockets = fakeConnect();
    const c = controller(api, sockets);
    await c.start();
    const logCalls = () => api.calls.filter(call => call === 'GET logs').length;

    await jest.advanceTimersByTimeAsync(0);
    expect(logCalls()).toBe(1);
    expect(c.logs.selected).toBe(ALL_LOGS);
    expect(c.logs.names).toEqual(['driver.log', 'worker-0.log']);
    expect(c.logs.text).toBe(
      '==> driver.log <==\ndriver started\n==> worker-0.log <==\nepoch 0'
    );
    expect(api.calls).toContain('GET log worker-0.log tail=5');

    await jest.advanceTimersByTimeAsync(1000);
    expect(logCalls()).toBe(2);

    c.setVisible(false);
    await jest.advanceTimersByTimeAsync(5000);
    expect(logCalls()).toBe(2);
    c.setVisible(true); // shown again: refreshed at once
    await settle();
    expect(logCalls()).toBe(3);

    await c.selectLog('driver.log');
    expect(c.logs.text).toBe('driver started\n');

    // Finished: one last read, then no more polling.
    sockets.sockets[0].open();
    sockets.sockets[0].deliver({
      id: 1,
      kind: 'state',
      job_id: JOB_ID,
      time: 120,
      state: 'FAILED',
      reason: 'exit code 1'
    });
    await settle();
    const afterEnd = logCalls();
    await jest.advanceTimersByTimeAsync(10_000);
    expect(logCalls()).toBeLessThanOrEqual(afterEnd + 1);
    const settled = logCalls();
    await jest.advanceTimersByTimeAsync(10_000);
    expect(logCalls()).toBe(settled);
    expect(c.job?.state).toBe('FAILED');
    c.dispose();
  });

  it('reflects priority, max GPUs and cancel at once', async () => {
    const api = new FakeApi();
    const sockets = fakeConnect();
    const c = controller(api, sockets);
    await c.start();

    const pending = c.setPriority(7);
    expect(c.busy).toBe(true);
    await pending;
    expect(c.busy).toBe(false);
    expect(c.job?.priority).toBe(7);
    await c.setMaxGpus(3);
    expect(c.job?.max_gpus).toBe(3);
    expect(api.calls).toContain('PATCH {"priority":7}');
    expect(api.calls).toContain('PATCH {"max_gpus":3}');

    // An event older than the PATCH answer does not undo it.
    sockets.sockets[0].open();
    sockets.sockets[0].deliver({
      id: 1,
      kind: 'limits',
      job_id: JOB_ID,
      time: 100,
      max_gpus: 2
    });
    expect(c.job?.max_gpus).toBe(3);

    await c.cancel();
    expect(c.job?.state).toBe('CANCELLED');
    expect(c.done).toBe(true);
    c.dispose();
  });

  it('shows a failed action and a job that cannot be loaded', async () => {
    jest.useFakeTimers();
    const api = new FakeApi();
    api.failGet = 1;
    api.patchJob = async () => {
      throw new Error("max_gpus must be at least the job's min_gpus (2).");
    };
    const sockets = fakeConnect();
    const c = controller(api, sockets);
    await c.start();
    expect(c.job).toBeNull();
    expect(c.error).toMatch(
      /Could not load job a1b2c3d4e5f6: server went away/
    );
    await jest.advanceTimersByTimeAsync(100); // retried
    expect(c.job?.name).toBe('digits');
    expect(c.error).toBeNull();

    await c.setMaxGpus(1);
    expect(c.error).toMatch(/min_gpus/);
    expect(c.job?.max_gpus).toBe(2);
    c.dispose();
  });

  it('retries loading with backoff until the job is known, then stops', async () => {
    jest.useFakeTimers();
    const api = new FakeApi();
    api.failGet = 2;
    const c = controller(api, fakeConnect());
    const gets = () => api.calls.filter(call => call === `GET ${JOB_ID}`);
    await c.start();
    expect(c.job).toBeNull();
    await jest.advanceTimersByTimeAsync(100); // the first retry fails too
    expect(gets()).toHaveLength(2);
    expect(c.job).toBeNull();
    await jest.advanceTimersByTimeAsync(200); // the next within 100-200 ms
    expect(gets()).toHaveLength(3);
    expect(c.job?.name).toBe('digits');
    await jest.advanceTimersByTimeAsync(10_000); // loaded: no more retries
    expect(gets()).toHaveLength(3);
    c.dispose();
  });

  it('says so when the job does not exist', async () => {
    const api = new FakeApi();
    const notFound = Object.assign(new Error('Job not found'), {
      response: { status: 404 }
    });
    api.getJob = async () => {
      throw notFound;
    };
    const c = controller(api, fakeConnect());
    await c.start();
    expect(c.error).toBe(
      "Job a1b2c3d4e5f6 was not found (deleted, or another user's)."
    );
    c.dispose();
  });
});

describe('ChartData (LossChart widget)', () => {
  it("applies the kernel's float64 buffers, batched and reset", () => {
    const data = new ChartData(10);
    const f64 = (values: number[]) =>
      new DataView(new Float64Array(values).buffer);
    expect(
      data.apply(
        { type: 'data', names: ['loss', 'val_loss'], counts: [3, 1] },
        [f64([0, 1, 2]), f64([1, 0.8, 0.7]), f64([2]), f64([0.75])]
      )
    ).toBe(true);
    expect(data.named()).toEqual([
      { name: 'loss', x: [0, 1, 2], y: [1, 0.8, 0.7] },
      { name: 'val_loss', x: [2], y: [0.75] }
    ]);
    // Past the cap, thinned as the kernel thins.
    const xs = Array.from({ length: 22 }, (_, i) => i + 3);
    data.apply({ type: 'data', names: ['loss'], counts: [22] }, [
      f64(xs),
      f64(xs.map(x => -x))
    ]);
    expect(data.series.get('loss')?.x).toEqual([
      0, 16, 18, 19, 20, 21, 22, 23, 24
    ]);
    expect(data.pointCount).toBe(10);

    data.apply({ type: 'data', reset: true, names: ['loss'], counts: [1] }, [
      f64([5]),
      f64([0.5])
    ]);
    expect(data.named()).toEqual([{ name: 'loss', x: [5], y: [0.5] }]);
    expect(data.apply({ type: 'other' })).toBe(false);
  });

  it('reads unaligned buffer views', () => {
    const bytes = new Uint8Array(8 * 2 + 3);
    new DataView(bytes.buffer).setFloat64(3, 1.5, true);
    new DataView(bytes.buffer).setFloat64(11, -2, true);
    const view = new DataView(bytes.buffer, 3, 16);
    expect(Array.from(toFloat64(view, 2))).toEqual([1.5, -2]);
  });
});

describe('widget module', () => {
  it("is registered under package.json's name and version", () => {
    const pkg = JSON.parse(
      fs.readFileSync(
        path.resolve(__dirname, '..', '..', 'package.json'),
        'utf8'
      )
    );
    expect(MODULE_NAME).toBe(pkg.name);
    expect(MODULE_VERSION).toBe(pkg.version);
  });

  it('builds the events URL below the base URL, with the token when asked', () => {
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/user/ann/',
      wsUrl: 'ws://localhost:8888/user/ann/',
      token: 'secret',
      appendToken: true
    });
    expect(eventsUrl(settings, 42, JOB_ID)).toBe(
      `ws://localhost:8888/user/ann/edt/api/v1/events?after=42&batch=1&job_id=${JOB_ID}&token=secret`
    );
    const noToken = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      wsUrl: 'ws://localhost:8888/',
      token: 'secret',
      appendToken: false
    });
    expect(eventsUrl(noToken, 0)).toBe(
      'ws://localhost:8888/edt/api/v1/events?after=0&batch=1'
    );
  });
});
