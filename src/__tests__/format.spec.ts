import type { ClusterInfo, Device, IJobInfo } from '../api';
import {
  clampPercent,
  describeCluster,
  describeDrain,
  describeKind,
  formatBytes,
  formatClock,
  formatCount,
  formatMemory,
  formatSignificant,
  formatTicks
} from '../format';

const GiB = 1024 ** 3;

function device(overrides: Partial<Device> = {}): Device {
  return {
    id: 'gpu0',
    index: 0,
    node: 'lab1',
    uuid: 'GPU-0',
    name: 'NVIDIA H200',
    memory_total: 80 * GiB,
    memory_used: 1.2 * GiB,
    utilization: 37,
    virtual: false,
    held: false,
    job_id: null,
    ...overrides
  };
}

describe('formatBytes', () => {
  it.each([
    [0, '0 B'],
    [512, '512 B'],
    [1024, '1 KiB'],
    [1536, '1.5 KiB'],
    [1.2 * GiB, '1.2 GiB'],
    [80 * GiB, '80 GiB'],
    [150000000000, '139.7 GiB'],
    [2 * 1024 * GiB, '2 TiB']
  ])('formats %d bytes as %s', (bytes, text) => {
    expect(formatBytes(bytes)).toBe(text);
  });

  it('refuses nonsense', () => {
    expect(formatBytes(-1)).toBe('?');
    expect(formatBytes(Number.NaN)).toBe('?');
  });
});

describe('formatMemory', () => {
  it('shows used / total', () => {
    expect(formatMemory(device())).toBe('1.2 GiB / 80 GiB');
  });

  it('is null when the device reports no memory', () => {
    expect(
      formatMemory(device({ memory_total: null, memory_used: null }))
    ).toBeNull();
  });

  it('marks an unknown used memory', () => {
    expect(formatMemory(device({ memory_used: null }))).toBe('? / 80 GiB');
  });
});

describe('clampPercent', () => {
  it('clamps to 0-100 and keeps null', () => {
    expect(clampPercent(37)).toBe(37);
    expect(clampPercent(120)).toBe(100);
    expect(clampPercent(-3)).toBe(0);
    expect(clampPercent(null)).toBeNull();
  });
});

describe('describeCluster', () => {
  it('counts NVIDIA GPUs', () => {
    const one: ClusterInfo = { source: 'nvml', devices: [device()] };
    const two: ClusterInfo = {
      source: 'nvml',
      devices: [device(), device({ id: 'gpu1', index: 1 })]
    };
    expect(describeCluster(one)).toBe('1 NVIDIA GPU');
    expect(describeCluster(two)).toBe('2 NVIDIA GPUs');
    expect(describeCluster({ source: 'nvml', devices: [] })).toBe(
      'No GPUs found'
    );
  });

  it('says when the devices are virtual', () => {
    const devices = [0, 1, 2, 3].map(i =>
      device({ id: `gpu${i}`, index: i, virtual: true })
    );
    expect(describeCluster({ source: 'virtual', devices })).toBe(
      '4 virtual GPUs (no NVIDIA GPU found)'
    );
  });

  it("counts a Ray cluster's GPUs and nodes", () => {
    const devices = ['a', 'a', 'b'].map((node, i) =>
      device({ id: `${node}:gpu${i}`, index: i, node })
    );
    expect(describeCluster({ source: 'ray', devices })).toBe(
      '3 GPUs on 2 Ray nodes'
    );
    expect(describeCluster({ source: 'ray', devices: [] })).toBe(
      'No GPUs found'
    );
  });

  it('counts the nodes that drain', () => {
    const devices = ['a', 'a', 'b', 'b'].map((node, i) =>
      device({ id: `${node}:gpu${i}`, index: i, node, draining: node === 'b' })
    );
    expect(describeCluster({ source: 'ray', devices })).toBe(
      '4 GPUs on 2 Ray nodes, 1 node draining'
    );
  });
});

describe('describeDrain', () => {
  it('says when the node leaves, if a deadline was said', () => {
    const now = 1_000_000;
    const at = (deadline: number | null) =>
      describeDrain(device({ draining: true, drain_deadline: deadline }), now);
    expect(at(now + 90)).toBe(
      'Its node leaves in 2 minutes; its jobs move off it and no new job gets it.'
    );
    expect(at(now + 30)).toMatch(/^Its node leaves in 30 seconds;/);
    expect(at(now - 5)).toMatch(/^Its node was due to leave;/);
    expect(at(null)).toMatch(/^Its node is leaving;/);
  });
});

describe('describeKind', () => {
  type Job = Pick<IJobInfo, 'spec' | 'state' | 'elastic' | 'restarts'>;
  const job = (change: Partial<Job> = {}): Job => ({
    spec: {},
    state: 'RUNNING',
    elastic: true,
    restarts: 0,
    ...change
  });

  it.each([
    ['elastic', 'Elastic: resized in place at a step boundary.'],
    ['restart', 'Restart: resized by a graceful restart from a checkpoint.'],
    ['rigid', 'Rigid: runs at a fixed size.']
  ] as const)('says what a resize does to a %s job', (kind, title) => {
    expect(describeKind(job({ spec: { kind } }))).toEqual({
      kind,
      label: kind,
      title,
      fixed: false
    });
  });

  it('takes a record without a kind (stored before kinds) for elastic', () => {
    expect(describeKind(job())).toEqual({
      kind: 'elastic',
      label: 'elastic',
      title: 'Elastic: resized in place at a step boundary.',
      fixed: false
    });
    expect(describeKind(job({ spec: { kind: null } as never })).kind).toBe(
      'elastic'
    );
  });

  it('says when an elastic job runs at a fixed size, only while RUNNING', () => {
    const fixed = describeKind(job({ elastic: false }));
    expect(fixed.fixed).toBe(true);
    expect(fixed.title).toBe(
      'Elastic: resized in place at a step boundary. Its program does not ' +
        'use the elastic runtime (or has not started it yet): it runs at a ' +
        'fixed size.'
    );
    const queued = describeKind(job({ elastic: false, state: 'QUEUED' }));
    expect(queued.fixed).toBe(false);
    expect(queued.title).toBe('Elastic: resized in place at a step boundary.');
    // Restart and rigid programs never announce the runtime: nothing to say.
    expect(
      describeKind(job({ spec: { kind: 'restart' }, elastic: false })).fixed
    ).toBe(false);
  });

  it('counts the requeues after its driver died', () => {
    const tag = describeKind(job({ spec: { kind: 'restart' }, restarts: 2 }));
    expect(tag.label).toBe('restart ↻2');
    expect(tag.title).toBe(
      'Restart: resized by a graceful restart from a checkpoint. Restarted 2 ' +
        'times from its checkpoint after its driver died.'
    );
    expect(describeKind(job({ restarts: 1 })).title).toMatch(
      /Restarted 1 time from/
    );
  });
});

describe('formatSignificant', () => {
  it.each([
    [1.6e-4, '1.6e-4'],
    [0.00016, '1.6e-4'],
    [-3.25e-5, '-3.25e-5'],
    [1 / 6, '0.1667'],
    [0.5, '0.5'],
    [1, '1'],
    [12.5, '12.5'],
    [0.001, '0.001'],
    [1234.56, '1235'],
    [12345.6, '12346'],
    [2.5e6, '2.5e6'],
    [0.1 + 0.2, '0.3'],
    [0, '0'],
    [-0, '0']
  ])('formats %p as %s', (value, text) => {
    expect(formatSignificant(value)).toBe(text);
  });

  it('never reads "0" for a value that is not 0, and reads back close', () => {
    for (let power = -300; power <= 300; power += 7) {
      for (const mantissa of [1, 1.6, -4.321, 9.99949]) {
        const value = mantissa * 10 ** power;
        const text = formatSignificant(value);
        expect(text).not.toBe('0');
        expect(Math.abs(Number(text) - value)).toBeLessThanOrEqual(
          Math.abs(value) * 5e-4
        );
      }
    }
  });

  it('takes the number of digits', () => {
    expect(formatSignificant(Math.PI, 2)).toBe('3.1');
    expect(formatSignificant(Math.PI * 1e-6, 6)).toBe('3.14159e-6');
  });

  it('says what is not a number', () => {
    expect(formatSignificant(Number.NaN)).toBe('NaN');
    expect(formatSignificant(Infinity)).toBe('∞');
    expect(formatSignificant(-Infinity)).toBe('-∞');
  });
});

describe('formatTicks', () => {
  it('gives ticks the digits that tell them apart', () => {
    expect(formatTicks([2.301, 2.3011, 2.3012])).toEqual([
      '2.301',
      '2.3011',
      '2.3012'
    ]);
    expect(formatTicks([0, 1e-4, 2e-4])).toEqual(['0', '1e-4', '2e-4']);
    expect(formatTicks([0.25, 0.3, 0.35])).toEqual(['0.25', '0.3', '0.35']);
    expect(formatTicks([1000, 1200, 1400])).toEqual(['1000', '1200', '1400']);
    expect(formatTicks([1e6, 1.2e6])).toEqual(['1e6', '1.2e6']);
    expect(formatTicks([5])).toEqual(['5']);
    expect(formatTicks([])).toEqual([]);
  });
});

describe('formatCount', () => {
  it('writes a step whole, without exponent', () => {
    expect(formatCount(1234567)).toBe('1234567');
    expect(formatCount(2.4)).toBe('2');
    expect(formatCount(Number.NaN)).toBe('–');
  });
});

describe('formatClock', () => {
  it('writes a wall time in the browser time zone', () => {
    const time = new Date(2024, 2, 3, 14, 5, 9).getTime() / 1000;
    expect(formatClock(time)).toBe('14:05:09');
    expect(formatClock(time, 'minutes')).toBe('14:05');
    expect(formatClock(time, 'days')).toBe('Mar 3');
  });
});
