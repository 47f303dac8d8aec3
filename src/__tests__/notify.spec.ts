import {
  allocationChanges,
  describeChange,
  describeFormed,
  withFormedGroups
} from '../jobview/timeline';
import { NOTICE_MS, TOAST_CHARS, jobNotice, shortReason } from '../notify';
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
  it('tells me of my jobs ending in the words of their badges', () => {
    expect(jobNotice(finished({}), 'alice', true)).toEqual({
      type: 'success',
      message: 'digits [j1] SUCCEEDED.',
      autoClose: NOTICE_MS.success
    });
    expect(
      jobNotice(
        finished({ state: 'FAILED', reason: 'ValueError: empty\nTraceback…' }),
        'alice',
        true
      )
    ).toEqual({
      type: 'error',
      message: 'digits [j1] FAILED: ValueError: empty',
      autoClose: NOTICE_MS.error
    });
    expect(jobNotice(finished({ state: 'CANCELLED' }), 'alice', true)).toEqual({
      type: 'info',
      message: 'digits [j1] CANCELLED.',
      autoClose: NOTICE_MS.info
    });
  });

  it('closes every toast by itself (the notification centre keeps them)', () => {
    for (const ms of Object.values(NOTICE_MS)) {
      expect(ms).toBeGreaterThan(0);
      expect(ms).toBeLessThanOrEqual(10000);
    }
  });

  it("cuts a long reason's first line, the tab has the rest", () => {
    expect(shortReason('  one\ntwo')).toBe('one');
    const long = shortReason('x'.repeat(300));
    expect(long).toHaveLength(160);
    expect(long.endsWith('…')).toBe(true);
    expect(shortReason('')).toBe('');
  });

  it('gives a failure its whole sentence within what a toast shows', () => {
    const sentence =
      'RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x64 and ' +
      '32x10) (main.py:18 in forward; workers w0, w1)';
    const failed = (reason: string) =>
      jobNotice(finished({ state: 'FAILED', reason }), 'alice', true)
        ?.message ?? '';
    // With the id it would be cut (JupyterLab cuts past 140): the id gives way.
    expect(`digits [j1] FAILED: ${sentence}`.length).toBeLessThanOrEqual(
      TOAST_CHARS
    );
    const long = `${sentence} ${'x'.repeat(12)}`;
    expect(`digits [j1] FAILED: ${long}`.length).toBeGreaterThan(TOAST_CHARS);
    expect(failed(long)).toBe(`digits FAILED: ${long}`);
    // Longer still, it is cut to fit, with an ellipsis.
    const longer = failed('y'.repeat(150));
    expect(longer).toHaveLength(TOAST_CHARS);
    expect(longer.startsWith('digits FAILED: yyy')).toBe(true);
    expect(longer.endsWith('…')).toBe(true);
    expect(failed('')).toBe('digits [j1] FAILED.');
  });

  it("stays quiet for other users' jobs, unknown users, or when off", () => {
    expect(jobNotice(finished({ user: 'bob' }), 'alice', true)).toBeNull();
    expect(jobNotice(finished({}), null, true)).toBeNull();
    expect(jobNotice(finished({}), 'alice', false)).toBeNull();
  });
});

describe('allocationChanges', () => {
  it('lists the changes oldest first, from and to', () => {
    const changes = allocationChanges([10, 20, 30, 40], [4, 2, 2, 0]);
    expect(changes).toEqual([
      { time: 10, from: null, to: 4 },
      { time: 20, from: 4, to: 2 },
      { time: 40, from: 2, to: 0 }
    ]);
    expect(changes.map(describeChange)).toEqual([
      'started on 4 GPUs',
      'shrank 4 → 2',
      'released 2 GPUs'
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
    expect(out.map(c => c.formed)).toEqual([groups[0], groups[1], null]);
    expect(
      withFormedGroups(changes, [...groups, group(30.3, 4, 0.3)])[2].formed
    ).toEqual(group(30.3, 4, 0.3));
  });

  it('says how long the devices waited and the pause', () => {
    // a number and its unit never part: a no-break space between them
    expect(describeFormed(group(1, 4, 0.256))).toBe(
      'training after 0.26\u00a0s (pause 0.04\u00a0s)'
    );
    expect(describeFormed(group(1, 4, 12.4))).toBe(
      'training after 12\u00a0s (pause 0.04\u00a0s)'
    );
    expect(describeFormed(group(1, 1, null))).toBe(
      'trained on (pause 0.04\u00a0s)'
    );
  });
});
