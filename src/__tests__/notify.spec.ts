import { allocationChanges, describeChange } from '../jobview/timeline';
import { jobNotice } from '../notify';
import type { IJobInfo } from '../api';

function finished(change: Partial<IJobInfo>) {
  const job: IJobInfo = {
    id: 'j1',
    user: 'alice',
    name: 'digits',
    state: 'SUCCEEDED',
    reason: '',
    spec: {},
    min_gpus: 1,
    max_gpus: 2,
    priority: 0,
    devices: [],
    elastic: true,
    restarts: 0,
    rescaled: null,
    created: 1,
    updated: 2,
    finished: 2,
    ...change
  };
  return { job, previous: 'RUNNING' as const };
}

describe('jobNotice', () => {
  it('tells me of my jobs finishing, failing or being cancelled', () => {
    expect(jobNotice(finished({}), 'alice', true)).toEqual({
      type: 'success',
      message: 'digits [j1] finished.'
    });
    expect(
      jobNotice(
        finished({ state: 'FAILED', reason: 'ValueError: empty\nTraceback…' }),
        'alice',
        true
      )
    ).toEqual({
      type: 'error',
      message: 'digits [j1] failed: ValueError: empty'
    });
    expect(
      jobNotice(finished({ state: 'CANCELLED' }), 'alice', true)?.type
    ).toBe('info');
  });

  it("stays quiet for other users' jobs, unknown users, or when off", () => {
    expect(jobNotice(finished({ user: 'bob' }), 'alice', true)).toBeNull();
    expect(jobNotice(finished({}), null, true)).toBeNull();
    expect(jobNotice(finished({}), 'alice', false)).toBeNull();
  });
});

describe('allocationChanges', () => {
  it('lists the changes newest first, from and to', () => {
    const changes = allocationChanges([10, 20, 30, 40], [4, 2, 2, 0]);
    expect(changes).toEqual([
      { time: 40, from: 2, to: 0 },
      { time: 20, from: 4, to: 2 },
      { time: 10, from: null, to: 4 }
    ]);
    expect(changes.map(describeChange)).toEqual([
      'released 2 GPUs',
      'shrank 4 → 2',
      'started on 4 GPUs'
    ]);
    expect(describeChange({ time: 1, from: 1, to: 3 })).toBe('grew 1 → 3');
  });
});
