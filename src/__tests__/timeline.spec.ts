import type {
  IAllocationChange,
  IAllocationDevice,
  IAllocationInterval,
  IAllocations,
  IAllocationsQuery,
  IJobEvent,
  ISocketLike
} from '../api';
import {
  GONE_LABEL,
  TimelineModel,
  TimelineView,
  allocationsEmptyText,
  applyAllocation,
  assignColours,
  axisTicks,
  barColour,
  changeOf,
  describeChange,
  describeDuration,
  describeInterval,
  describeJob,
  dropBefore,
  findRange,
  fitSince,
  hashString,
  jobsShown,
  layoutBars,
  layoutRows,
  mergeAdjacent,
  mergeAnswer,
  timeToX,
  tooltipOf,
  xToTime,
  type ITimeScale
} from '../cluster/timeline';

import { waitFor } from './fixtures/wait';

function change(
  event_id: number,
  time: number,
  cause: string | null,
  gpus: number,
  more: Partial<IAllocationChange> = {}
): IAllocationChange {
  return {
    event_id,
    time,
    cause,
    trigger: null,
    reason: null,
    gpus,
    ...more
  };
}

function interval(
  job_id: string | null,
  start: number,
  end: number | null,
  changes: IAllocationChange[] = [change(start, start, 'start', 1)]
): IAllocationInterval {
  return {
    job_id,
    user: job_id === null ? null : 'alice',
    name: job_id === null ? null : `${job_id}-name`,
    start,
    end,
    changes
  };
}

function device(
  id: string,
  node: string | null,
  intervals: IAllocationInterval[] = [],
  index: number | null = Number(id.replace(/\D/g, ''))
): IAllocationDevice {
  return {
    id,
    node,
    index,
    name: `Virtual GPU ${index}`,
    present: node !== null,
    intervals
  };
}

const SCALE: ITimeScale = { since: 1000, until: 2000, x0: 100, x1: 600 };

describe('timeline geometry', () => {
  it('maps time to x and back, clamped to the range', () => {
    expect(timeToX(1000, SCALE)).toBe(100);
    expect(timeToX(1500, SCALE)).toBe(350);
    expect(timeToX(2000, SCALE)).toBe(600);
    expect(timeToX(0, SCALE)).toBe(100);
    expect(timeToX(5000, SCALE)).toBe(600);
    expect(xToTime(350, SCALE)).toBe(1500);
    expect(timeToX(5, { ...SCALE, until: SCALE.since })).toBe(100);
  });

  it('puts one row per device under its node, the devices gone last', () => {
    const { rows, height } = layoutRows(
      [
        device('gpu1', 'b'),
        device('gone7', null),
        device('gpu0', 'a'),
        device('gpu2', 'b')
      ],
      { device: 20, node: 10 }
    );
    expect(rows.map(r => [r.kind, r.label, r.y])).toEqual([
      ['node', 'b', 0],
      ['device', 'GPU 1', 10],
      ['device', 'GPU 2', 30],
      ['node', 'a', 50],
      ['device', 'GPU 0', 60],
      ['node', GONE_LABEL, 80],
      ['device', 'GPU 7', 90]
    ]);
    expect(height).toBe(110);
    expect(layoutRows([device('x', 'n', [], null)]).rows[1].label).toBe('x');
    expect(layoutRows([])).toEqual({ rows: [], height: 0 });
  });

  it("merges a job's intervals that touch, with all their changes", () => {
    const merged = mergeAdjacent([
      interval('a', 300, 400, [
        change(3, 300, 'grow', 2),
        change(4, 400, 'end', 0)
      ]),
      interval('a', 100, 200, [
        change(1, 100, 'start', 2),
        change(2, 200, 'move', 2)
      ]),
      interval('b', 400, null),
      interval(null, 500, 600),
      interval(null, 600, 700)
    ]);
    expect(merged.map(i => [i.job_id, i.start, i.end])).toEqual([
      ['a', 100, 200],
      ['a', 300, 400],
      ['b', 400, null],
      [null, 500, 700]
    ]);
    // within a tolerance (a pixel's time), the gap closes
    const close = mergeAdjacent(
      [
        interval('a', 100, 200, [change(1, 100, 'start', 2)]),
        interval('a', 201, null, [change(2, 201, 'grow', 2)])
      ],
      2
    );
    expect(close).toHaveLength(1);
    expect(close[0]).toMatchObject({ start: 100, end: null });
    expect(close[0].changes.map(c => c.event_id)).toEqual([1, 2]);
  });

  it('gives each job a colour of its own, the same one wherever it shows', () => {
    expect(hashString('abc')).toBe(hashString('abc'));
    expect(hashString('abc')).not.toBe(hashString('abd'));
    const ids = Array.from({ length: 10 }, (_, i) => `job${i}`);
    const colours = assignColours(ids);
    expect(new Set(colours.values()).size).toBe(10);
    // alone, a job gets the colour its id hashes to
    expect(assignColours(['job7']).get('job7')).toBe(hashString('job7') % 10);
    // past the palette, colours repeat
    expect(assignColours([...ids, 'job10']).get('job10')).toBe(
      hashString('job10') % 10
    );
    expect(barColour(3)).toBe('var(--jp-edt-job-color-3)');
    expect(barColour(null)).toBe('var(--jp-edt-timeline-held-color)');
  });

  it('lays bars out clipped to the range, held ones up to now, short ones visible', () => {
    const { rows } = layoutRows([
      device('gpu0', 'n', [
        interval('old', 100, 900), // before the range: not drawn
        interval('a', 800, 1200), // starts before: clipped to x0
        interval(null, 1500, 1500.1), // a moment: min width
        interval('b', 1900, null) // held: up to now
      ]),
      device('gpu1', 'n', [interval('a', 1100, 1600)])
    ]);
    expect(jobsShown(rows)).toEqual(['old', 'a', 'b']);
    const colours = new Map([
      ['a', 1],
      ['b', 2]
    ]);
    const bars = layoutBars(rows, SCALE, colours, { now: 1950, inset: 2 });
    expect(
      bars.map(b => [
        b.deviceId,
        b.jobId,
        b.x,
        b.width,
        b.y,
        b.height,
        b.colour
      ])
    ).toEqual([
      ['gpu0', 'a', 100, 100, 20, 18, 1],
      ['gpu0', null, 350, 2, 20, 18, null],
      ['gpu0', 'b', 550, 25, 20, 18, 2],
      ['gpu1', 'a', 150, 250, 42, 18, 1]
    ]);
    expect(bars[0].interval.start).toBe(800); // the tooltip tells the whole interval
    expect(new Set(bars.map(b => b.key)).size).toBe(4);
  });

  it('starts the axis a little before the first hold when all of them are young', () => {
    const young = [device('gpu0', 'n', [interval('a', 9000, null)])];
    expect(fitSince(young, 6400, 10_000)).toBe(9000 - 50);
    expect(fitSince(young, 6400, 9010)).toBe(9000 - 2);
    const old = [device('gpu0', 'n', [interval('a', 5000, null)])];
    expect(fitSince(old, 6400, 10_000)).toBe(6400);
    // a hold that ended before the range does not count
    const ended = [device('gpu0', 'n', [interval('a', 5000, 6000)])];
    expect(fitSince(ended, 6400, 10_000)).toBe(6400);
    expect(fitSince([], 6400, 10_000)).toBe(6400);
  });

  it('ticks the time axis on whole minutes, labelled as clock times', () => {
    const since = Date.UTC(2026, 0, 1, 12, 0, 0) / 1000;
    const ticks = axisTicks({ since, until: since + 3600, x0: 0, x1: 800 });
    expect(ticks.length).toBeGreaterThan(2);
    expect(ticks.length).toBeLessThanOrEqual(10);
    for (const tick of ticks) {
      expect(tick.label).toMatch(/^\d\d:\d\d$/);
      expect(tick.x).toBeGreaterThanOrEqual(0);
      expect(tick.x).toBeLessThanOrEqual(800);
    }
    const xs = ticks.map(t => t.x);
    expect(xs).toEqual([...xs].sort((a, b) => a - b));
  });
});

describe('timeline data', () => {
  const event = (more: Partial<IJobEvent>): IJobEvent => ({
    id: 10,
    kind: 'allocation',
    job_id: 'b',
    user: 'bob',
    time: 500,
    devices: ['gpu1'],
    reason: 'admitted',
    cause: 'start',
    trigger: 'arrival',
    ...more
  });

  it('reads the change an allocation event records', () => {
    expect(changeOf(event({}))).toEqual({
      event_id: 10,
      time: 500,
      cause: 'start',
      trigger: 'arrival',
      reason: 'admitted',
      gpus: 1
    });
    expect(changeOf(event({ kind: 'state' }))).toBeNull();
    expect(changeOf(event({ devices: undefined }))).toBeNull();
    expect(changeOf({ ...event({}), id: undefined })).toBeNull();
  });

  it('appends live changes: a shrink ends one interval, a start opens another', () => {
    let devices: IAllocationDevice[] = [
      device('gpu0', 'n', [
        interval('a', 100, null, [change(1, 100, 'start', 2)])
      ]),
      device('gpu1', 'n', [
        interval('a', 100, null, [change(1, 100, 'start', 2)])
      ])
    ];
    devices = applyAllocation(
      devices,
      event({
        id: 9,
        job_id: 'a',
        user: 'alice',
        devices: ['gpu0'],
        cause: 'shrink'
      })
    ) as IAllocationDevice[];
    devices = applyAllocation(
      devices,
      event({}),
      'b-eval'
    ) as IAllocationDevice[];
    expect(devices[0].intervals.map(i => [i.job_id, i.start, i.end])).toEqual([
      ['a', 100, null]
    ]);
    expect(devices[0].intervals[0].changes.map(c => c.cause)).toEqual([
      'start',
      'shrink'
    ]);
    expect(devices[1].intervals.map(i => [i.job_id, i.start, i.end])).toEqual([
      ['a', 100, 500],
      ['b', 500, null]
    ]);
    expect(devices[1].intervals[1]).toMatchObject({
      user: 'bob',
      name: 'b-eval'
    });
    // the same event again (a replay, or one the answer held) changes nothing
    expect(applyAllocation(devices, event({}))).toBeNull();
    expect(applyAllocation(devices, event({ kind: 'state' }))).toBeNull();
    // a device not known yet gets a row
    const grown = applyAllocation(
      devices,
      event({ id: 11, devices: ['gpu1', 'gpu9'], cause: 'grow' })
    ) as IAllocationDevice[];
    expect(grown.map(d => d.id)).toEqual(['gpu0', 'gpu1', 'gpu9']);
    expect(grown[2]).toMatchObject({ node: null, present: true });
    // its end closes every interval it held
    const ended = applyAllocation(
      grown,
      event({ id: 12, devices: [], cause: 'end', trigger: undefined })
    ) as IAllocationDevice[];
    expect(ended[1].intervals[1]).toMatchObject({ end: 500 });
    expect(ended[2].intervals[0].changes.map(c => [c.cause, c.gpus])).toEqual([
      ['grow', 2],
      ['end', 0]
    ]);
  });

  it('merges a later answer over the newest stretch', () => {
    const known = [
      device('gpu0', 'n', [
        interval('a', 100, 200),
        interval(null, 300, null, [change(5, 300, 'start', 1)])
      ]),
      device('gpu5', 'm', [interval('z', 50, 60)])
    ];
    const answer = [
      device('gpu0', 'n', [
        interval(null, 300, 450, [
          change(5, 300, 'start', 1),
          change(8, 450, 'end', 0)
        ]),
        interval('c', 460, null, [change(60, 460, 'start', 1)])
      ]),
      device('gpu1', 'n', [])
    ];
    const merged = mergeAnswer(known, answer);
    expect(merged.map(d => d.id)).toEqual(['gpu0', 'gpu1', 'gpu5']);
    expect(merged[0].intervals.map(i => [i.job_id, i.start, i.end])).toEqual([
      ['a', 100, 200],
      [null, 300, 450],
      ['c', 460, null]
    ]);
    // a live event newer than the answer wins over the answer's older view
    const newer = [
      device('gpu0', 'n', [
        interval('c', 460, 470, [
          change(60, 460, 'start', 1),
          change(99, 470, 'end', 0)
        ])
      ])
    ];
    const kept = mergeAnswer(newer, answer);
    expect(kept[0].intervals.find(i => i.job_id === 'c')?.end).toBe(470);
  });

  it('drops what ended before the range', () => {
    const devices = [
      device('gpu0', 'n', [interval('a', 100, 200), interval('b', 250, null)])
    ];
    expect(dropBefore(devices, 220)[0].intervals.map(i => i.job_id)).toEqual([
      'b'
    ]);
    expect(dropBefore(devices, 50)[0]).toBe(devices[0]);
  });
});

describe('timeline words', () => {
  it('says what each change did and what prompted it', () => {
    const at = new Date(2026, 0, 1, 14, 3, 5).getTime() / 1000;
    expect(
      describeChange(
        change(1, at, 'shrink', 1, {
          trigger: 'arrival',
          reason: 'shrunk to 1 GPU(s)'
        })
      )
    ).toBe('14:03:05 shrank to 1 GPU, as a job arrived');
    expect(
      describeChange(change(2, at, 'grow', 3, { trigger: 'departure' }))
    ).toBe('14:03:05 grew to 3 GPUs, as a job left');
    expect(
      describeChange(change(3, at, 'end', 0, { reason: 'cancelled by ana' }))
    ).toBe('14:03:05 ended: released its GPUs (cancelled by ana)');
    expect(
      describeChange(
        change(4, at, 'device_lost', 3, {
          trigger: 'devices',
          reason: 'vgpu3 gone: shrunk to 3 GPU(s)'
        })
      )
    ).toBe(
      '14:03:05 lost a device (3 GPUs left), as the devices changed (vgpu3 gone: shrunk to 3 GPU(s))'
    );
    expect(describeChange(change(5, at, null, 2))).toBe('14:03:05 held 2 GPUs');
    const long = describeChange(
      change(6, at, 'end', 0, { reason: 'x'.repeat(500) })
    );
    expect(long.length).toBeLessThan(200);
    expect(long.endsWith('…)')).toBe(true);
  });

  it("names a bar's job, or says it is another user's", () => {
    expect(describeJob(interval('a', 1, 2))).toBe('a-name [a]');
    expect(
      describeJob({ ...interval('a', 1, 2), name: null }, 'fromlist')
    ).toBe('fromlist [a]');
    expect(describeJob({ ...interval('a', 1, 2), name: null })).toBe('job a');
    expect(describeJob(interval(null, 1, 2))).toBe(
      "held by another user's job"
    );
  });

  it('tells an interval and its length', () => {
    expect(describeDuration(42)).toBe('42 s');
    expect(describeDuration(720)).toBe('12 min');
    expect(describeDuration(12000)).toBe('3 h 20 min');
    expect(describeDuration(7200)).toBe('2 h');
    expect(describeDuration(187200)).toBe('2 d 4 h');
    const start = new Date(2026, 0, 1, 14, 0, 5).getTime() / 1000;
    expect(describeInterval(interval('a', start, start + 1205), 0)).toBe(
      '14:00:05 – 14:20:10 (20 min)'
    );
    expect(describeInterval(interval('a', start, null), start + 45)).toBe(
      '14:00:05 – now (held 45 s)'
    );
    expect(describeInterval(interval('a', start, start + 2 * 86400), 0)).toBe(
      'Jan 1 14:00 – Jan 3 14:00 (2 d)'
    );
    const tip = tooltipOf(interval('a', start, null), 'gpu0', start + 45);
    expect(tip).toEqual({
      title: 'a-name [a]',
      user: 'alice',
      interval: 'gpu0: 14:00:05 – now (held 45 s)',
      changes: ['14:00:05 started on 1 GPU']
    });
    expect(allocationsEmptyText(findRange('24h'))).toBe(
      'No GPU was held in the last 24 hours.'
    );
  });
});

/** A socket the test opens and feeds by hand. */
class FakeSocket implements ISocketLike {
  constructor(readonly after: number) {}
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: unknown) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  closed = false;
  deliver(...events: IJobEvent[]): void {
    this.onmessage?.({ data: JSON.stringify(events) });
  }
  close(): void {
    this.closed = true;
  }
}

describe('TimelineModel', () => {
  function setup(answers: ((q: IAllocationsQuery) => IAllocations)[]) {
    const queries: IAllocationsQuery[] = [];
    const sockets: FakeSocket[] = [];
    let clock = 1_000_000;
    const model = new TimelineModel({
      fetchAllocations: async query => {
        queries.push(query);
        const answer = answers[Math.min(queries.length, answers.length) - 1];
        return answer(query);
      },
      connect: after => {
        const socket = new FakeSocket(after);
        sockets.push(socket);
        setTimeout(() => socket.onopen?.({}), 0);
        return socket;
      },
      jobName: id => (id === 'b' ? 'b-eval' : null),
      interval: 60_000,
      clock: () => clock,
      stream: { silenceTimeout: 0 }
    });
    return {
      model,
      queries,
      sockets,
      tick: (s: number) => {
        clock += s;
      }
    };
  }

  const first: IAllocations = {
    since: 6400,
    until: 1_000_000,
    last_event_id: 41,
    devices: [
      device('gpu0', 'n', [
        interval('a', 9000, null, [change(40, 9000, 'start', 2)])
      ]),
      device('gpu1', 'n', [
        interval('a', 9000, null, [change(40, 9000, 'start', 2)])
      ])
    ]
  };

  it('reads the range whole, follows the feed after it, and merges the newest stretch', async () => {
    const { model, queries, sockets, tick } = setup([
      () => first,
      q => ({
        since: q.since as number,
        until: 1_000_030,
        last_event_id: 44,
        devices: [
          device('gpu0', 'n', [
            interval('a', 9000, null, [
              change(40, 9000, 'start', 2),
              change(42, 1_000_010, 'shrink', 1)
            ])
          ]),
          device('gpu1', 'n', [
            interval('a', 9000, 1_000_010, [
              change(40, 9000, 'start', 2),
              change(42, 1_000_010, 'shrink', 1)
            ]),
            interval(null, 1_000_010, null, [change(43, 1_000_010, 'start', 1)])
          ])
        ]
      })
    ]);
    model.setActive(true);
    await waitFor(
      () => model.state.until === 1_000_000 && sockets.length === 1
    );
    expect(queries[0]).toEqual({ since: 1_000_000 - 3600 });
    expect(sockets[0].after).toBe(41); // right after what the answer holds
    expect(model.state.loading).toBe(false);

    tick(20);
    expect(model.now()).toBe(1_000_020);
    await waitFor(() => sockets[0].onmessage !== null);
    sockets[0].deliver({
      id: 42,
      kind: 'allocation',
      job_id: 'a',
      user: 'alice',
      time: 1_000_010,
      devices: ['gpu0'],
      cause: 'shrink',
      trigger: 'arrival',
      reason: 'shrunk to 1 GPU(s)'
    });
    expect(model.state.devices[1].intervals[0].end).toBe(1_000_010);

    // the next read asks only for the newest stretch, and brings another user's job
    await model.refresh();
    expect(queries[1]).toEqual({ since: 1_000_000 - 5 });
    expect(model.state.until).toBe(1_000_030);
    expect(
      model.state.devices[1].intervals.map(i => [i.job_id, i.end])
    ).toEqual([
      ['a', 1_000_010],
      [null, null]
    ]);

    // hidden: the socket closes; shown again: it resumes after the last event seen
    model.setActive(false);
    expect(sockets[0].closed).toBe(true);
    model.setActive(true);
    await waitFor(() => sockets.length === 2);
    expect(sockets[1].after).toBe(42);
    model.dispose();
    expect(sockets[1].closed).toBe(true);
  });

  it('reads a new range whole and starts the feed again after it', async () => {
    const { model, queries, sockets } = setup([
      () => first,
      () => ({ ...first, since: 0, last_event_id: 50 })
    ]);
    model.setActive(true);
    await waitFor(() => sockets.length === 1);
    model.setRange('7d');
    expect(model.state.loading).toBe(true);
    await waitFor(() => sockets.length === 2);
    expect(queries[1]).toEqual({ since: 1_000_000 - 7 * 86400 });
    expect(model.state.range.id).toBe('7d');
    expect(sockets[0].closed).toBe(true);
    expect(sockets[1].after).toBe(50);
    model.dispose();
  });

  it('says why a read failed and keeps what it had', async () => {
    const { model } = setup([
      () => {
        throw new Error('server down');
      }
    ]);
    model.setActive(true);
    await waitFor(() => model.state.error !== null);
    expect(model.state.error).toContain('server down');
    expect(model.state.devices).toEqual([]);
    model.dispose();
  });
});

describe('TimelineView', () => {
  it('draws a bar per hold, a legend, and a tooltip on hover', async () => {
    const now = Date.now() / 1000;
    const answer: IAllocations = {
      since: now - 3600,
      until: now,
      last_event_id: 3,
      devices: [
        device('gpu0', 'host', [
          interval('a', now - 600, null, [
            change(1, now - 600, 'start', 2, {
              trigger: 'arrival',
              reason: 'admitted'
            }),
            change(2, now - 300, 'shrink', 1, { trigger: 'arrival' })
          ])
        ]),
        device('gpu1', 'host', [
          interval('a', now - 600, now - 300),
          interval(null, now - 300, null, [change(3, now - 300, 'start', 1)])
        ])
      ]
    };
    const model = new TimelineModel({
      fetchAllocations: async () => answer,
      connect: null
    });
    const opened: string[] = [];
    const view = new TimelineView(model, { openJob: id => opened.push(id) });
    document.body.appendChild(view.node);
    const plot = view.node.querySelector(
      '.jp-edt-timeline-plot'
    ) as HTMLElement;
    Object.defineProperty(plot, 'clientWidth', { value: 800 });
    model.setActive(true);
    await waitFor(() => model.state.until !== null);
    view.render();

    const bars = view.node.querySelectorAll('.jp-edt-timeline-bar');
    expect(bars).toHaveLength(3);
    expect(view.node.querySelectorAll('.jp-edt-timeline-held')).toHaveLength(1);
    expect(view.node.dataset.bars).toBe('3');
    expect(
      view.node.querySelectorAll('.jp-edt-timeline-tick').length
    ).toBeGreaterThan(1);
    expect(
      [...view.node.querySelectorAll('.jp-edt-timeline-device')].map(
        n => n.childNodes[0].textContent
      )
    ).toEqual(['GPU 0', 'GPU 1']);
    expect(view.node.querySelector('.jp-edt-timeline-node')?.textContent).toBe(
      'host'
    );
    const legend = view.node.querySelector(
      '.jp-edt-timeline-legend'
    ) as HTMLElement;
    expect(legend.textContent).toContain('a-name [a] · alice');
    expect(legend.textContent).toContain("held by another user's job");
    expect(
      view.node.querySelector('[data-range="1h"]')?.getAttribute('aria-pressed')
    ).toBe('true');

    const first = bars[0] as SVGRectElement;
    first.dispatchEvent(
      new MouseEvent('mousemove', { bubbles: true, clientX: 10, clientY: 10 })
    );
    const tooltip = view.node.querySelector(
      '.jp-edt-timeline-tooltip'
    ) as HTMLElement;
    expect(tooltip.hidden).toBe(false);
    expect(tooltip.textContent).toContain('a-name [a]');
    expect(tooltip.textContent).toContain('user: alice');
    expect(tooltip.textContent).toContain('shrank to 1 GPU, as a job arrived');
    first.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(opened).toEqual(['a']);
    view.node.querySelector('svg')?.dispatchEvent(new MouseEvent('mouseleave'));
    expect(tooltip.hidden).toBe(true);

    // a range with nothing held says so
    (
      view.node.querySelector('[data-range="24h"]') as HTMLButtonElement
    ).click();
    expect(model.state.range.id).toBe('24h');
    view.dispose();
    model.dispose();
    expect(view.node.isConnected).toBe(false);
  });

  it('says so when no GPU was held', async () => {
    const model = new TimelineModel({
      fetchAllocations: async () => ({
        since: 0,
        until: 3600,
        last_event_id: 0,
        devices: [device('gpu0', 'host')]
      }),
      connect: null
    });
    const view = new TimelineView(model);
    const plot = view.node.querySelector(
      '.jp-edt-timeline-plot'
    ) as HTMLElement;
    Object.defineProperty(plot, 'clientWidth', { value: 500 });
    model.setActive(true);
    await waitFor(() => model.state.until !== null);
    view.render();
    const empty = view.node.querySelector(
      '.jp-edt-timeline-empty'
    ) as HTMLElement;
    expect(empty.hidden).toBe(false);
    expect(empty.textContent).toBe('No GPU was held in the last hour.');
    view.dispose();
    model.dispose();
  });
});
