import {
  DEFAULT_FILTER,
  applyEvent,
  elapsedSeconds,
  formatDuration,
  fromSnapshot,
  parseFilter,
  visibleJobs,
  type JobMap
} from '../jobs/state';
import type { IJobInfo } from '../api';

function job(id: string, change: Partial<IJobInfo> = {}): IJobInfo {
  return {
    id,
    user: 'alice',
    name: `job ${id}`,
    state: 'RUNNING',
    reason: '',
    spec: { env: { EDT_EPOCHS: '2' } },
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

function snapshot(...jobs: IJobInfo[]): JobMap {
  return fromSnapshot(jobs);
}

describe('applyEvent', () => {
  it('applies a newer allocation and counts the GPUs', () => {
    const jobs = snapshot(job('a'));
    const result = applyEvent(jobs, {
      id: 7,
      kind: 'allocation',
      job_id: 'a',
      time: 110,
      devices: ['gpu0', 'gpu1']
    });
    expect(result.changed).toBe(true);
    expect(result.jobs.get('a')?.job.devices).toEqual(['gpu0', 'gpu1']);
    expect(result.jobs.get('a')?.job.updated).toBe(110);
    // The input is left as it was (pure).
    expect(jobs.get('a')?.job.devices).toHaveLength(4);
  });

  it('ignores replayed events older than the snapshot', () => {
    const jobs = snapshot(job('a', { state: 'SUCCEEDED', updated: 200 }));
    for (const event of [
      { kind: 'state', job_id: 'a', time: 100, state: 'RUNNING' as const },
      { kind: 'allocation', job_id: 'a', time: 150, devices: ['gpu0'] },
      { kind: 'limits', job_id: 'a', time: 150, max_gpus: 1 }
    ]) {
      const result = applyEvent(jobs, event);
      expect(result.changed).toBe(false);
      expect(result.finished).toBeNull();
      expect(result.jobs).toBe(jobs);
    }
  });

  it('reports a job finishing once, as a transition', () => {
    const jobs = snapshot(job('a'));
    const done = applyEvent(jobs, {
      kind: 'state',
      job_id: 'a',
      time: 120,
      state: 'FAILED',
      reason: 'ValueError: boom'
    });
    expect(done.finished?.previous).toBe('RUNNING');
    expect(done.finished?.job.state).toBe('FAILED');
    const row = done.jobs.get('a')!;
    expect(row.job.finished).toBe(120);
    expect(row.job.devices).toEqual([]);
    expect(row.job.reason).toBe('ValueError: boom');
    // The same event again (a reconnect overlapping) changes nothing.
    const again = applyEvent(done.jobs, {
      kind: 'state',
      job_id: 'a',
      time: 120,
      state: 'FAILED'
    });
    expect(again.changed).toBe(false);
    expect(again.finished).toBeNull();
  });

  it('applies limits and keeps what the event leaves out', () => {
    const result = applyEvent(snapshot(job('a', { priority: 3 })), {
      kind: 'limits',
      job_id: 'a',
      time: 130,
      max_gpus: 2
    });
    expect(result.jobs.get('a')?.job.max_gpus).toBe(2);
    expect(result.jobs.get('a')?.job.priority).toBe(3);
  });

  it('follows whether a job is elastic and how often it restarted', () => {
    const jobs = snapshot(job('a', { elastic: false, state: 'STARTING' }));
    const announced = applyEvent(jobs, {
      kind: 'elastic',
      job_id: 'a',
      time: 130,
      elastic: true
    });
    expect(announced.changed).toBe(true);
    expect(announced.jobs.get('a')?.job.elastic).toBe(true);
    // the driver died: back in the queue, a restart counted ...
    const requeued = applyEvent(announced.jobs, {
      kind: 'state',
      job_id: 'a',
      time: 140,
      state: 'QUEUED',
      restarts: 1
    });
    expect(requeued.jobs.get('a')?.job.restarts).toBe(1);
    expect(requeued.jobs.get('a')?.job.elastic).toBe(true);
    // ... and its new processes are rigid until they announce themselves again
    const started = applyEvent(requeued.jobs, {
      kind: 'state',
      job_id: 'a',
      time: 150,
      state: 'STARTING',
      elastic: false
    });
    expect(started.jobs.get('a')?.job).toMatchObject({
      elastic: false,
      restarts: 1,
      state: 'STARTING'
    });
    const replayed = applyEvent(started.jobs, {
      kind: 'elastic',
      job_id: 'a',
      time: 135,
      elastic: true
    });
    expect(replayed.changed).toBe(false); // older than what the list shows
  });

  it('names a job it does not hold, and skips keepalives', () => {
    const jobs = snapshot(job('a'));
    expect(
      applyEvent(jobs, { kind: 'state', job_id: 'b', time: 1, state: 'QUEUED' })
        .unknownJob
    ).toBe('b');
    expect(
      applyEvent(jobs, { kind: 'metrics', job_id: 'b', records: [] }).unknownJob
    ).toBeNull();
    expect(applyEvent(jobs, { kind: 'keepalive' }).changed).toBe(false);
  });

  it('tracks progress from metrics, even replayed ones', () => {
    const jobs = snapshot(job('a', { updated: 1000 }));
    const result = applyEvent(jobs, {
      kind: 'metrics',
      job_id: 'a',
      time: 10,
      records: [
        { type: 'step', global_step: 0, epoch: 0, step: 0, loss: 1 },
        { type: 'step', global_step: 1, epoch: 0, step: 1, loss: 0.9 },
        { type: 'epoch', epoch: 0, val_loss: 0.8 },
        { type: 'generation', global_step: 9, world_size: 2 },
        { type: 'step', global_step: 2, epoch: 1, step: 0, loss: 0.7 }
      ]
    });
    expect(result.jobs.get('a')?.progress).toEqual({
      epoch: 1,
      stepsInEpoch: 1,
      steps: 3,
      epochsDone: 1,
      epochs: null,
      stepsPerEpoch: 2,
      iteration: undefined
    });
  });
});

describe('visibleJobs', () => {
  const jobs = snapshot(
    job('old', { created: 10 }),
    job('bob', { created: 30, user: 'bob', state: 'QUEUED', devices: [] }),
    job('new', { created: 50, state: 'SUCCEEDED', devices: [] })
  );

  it('lists newest first', () => {
    const rows = visibleJobs(jobs, { scope: 'all', state: 'all' }, 'alice');
    expect(rows.map(r => r.job.id)).toEqual(['new', 'bob', 'old']);
  });

  it('keeps my jobs, and filters by state', () => {
    const id = (filter: Parameters<typeof visibleJobs>[1]) =>
      visibleJobs(jobs, filter, 'alice').map(r => r.job.id);
    expect(id({ scope: 'mine', state: 'all' })).toEqual(['new', 'old']);
    expect(id({ scope: 'mine', state: 'active' })).toEqual(['old']);
    expect(id({ scope: 'all', state: 'finished' })).toEqual(['new']);
    expect(id({ scope: 'all', state: 'QUEUED' })).toEqual(['bob']);
  });

  it('shows everything while the user is not known yet', () => {
    expect(visibleJobs(jobs, DEFAULT_FILTER, null)).toHaveLength(3);
  });
});

describe('parseFilter', () => {
  it('takes a stored filter and falls back on what is wrong', () => {
    expect(parseFilter({ scope: 'all', state: 'FAILED' })).toEqual({
      scope: 'all',
      state: 'FAILED'
    });
    expect(parseFilter({ scope: 'everyone', state: 'BROKEN' })).toEqual(
      DEFAULT_FILTER
    );
    expect(parseFilter(null)).toEqual(DEFAULT_FILTER);
  });
});

describe('durations', () => {
  it('formats elapsed times', () => {
    expect(formatDuration(42.9)).toBe('42 s');
    expect(formatDuration(185)).toBe('3 min 05 s');
    expect(formatDuration(2 * 3600 + 7 * 60)).toBe('2 h 07 min');
    expect(formatDuration(3 * 86400 + 4 * 3600)).toBe('3 d 4 h');
    expect(formatDuration(-5)).toBe('0 s');
  });

  it('measures to now while running, to the end once finished', () => {
    expect(elapsedSeconds(job('a', { created: 100 }), 160)).toBe(60);
    expect(
      elapsedSeconds(job('a', { created: 100, finished: 130 }), 1000)
    ).toBe(30);
  });
});
