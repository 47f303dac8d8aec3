import {
  allocationChanges,
  describeChange,
  describeFormed,
  withFormedGroups
} from '../jobview/timeline';
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

describe('withFormedGroups', () => {
  const group = (time: number, size: number, waited: number | null) => ({
    time,
    world_size: size,
    pause_s: 0.04,
    waited_s: waited
  });

  it('puts each group beside the change it formed on, none beside later ones', () => {
    const changes = allocationChanges([10, 20, 30], [4, 2, 4]);
    // the group on 4 at 12 answers the start, not the grow at 30 (before it)
    const groups = [group(12, 4, 2), group(21, 2, 1), group(25, 1, null)];
    const out = withFormedGroups(changes, groups);
    expect(out.map(c => c.formed)).toEqual([null, groups[1], groups[0]]);
    expect(
      withFormedGroups(changes, [...groups, group(30.3, 4, 0.3)])[0].formed
    ).toEqual(group(30.3, 4, 0.3));
  });

  it('says how long the devices waited and the pause', () => {
    expect(describeFormed(group(1, 4, 0.256))).toBe(
      'training after 0.26 s (pause 0.04 s)'
    );
    expect(describeFormed(group(1, 4, 12.4))).toBe(
      'training after 12 s (pause 0.04 s)'
    );
    expect(describeFormed(group(1, 1, null))).toBe('trained on (pause 0.04 s)');
  });
});
