import {
  DEFAULT_MAX_POINTS,
  SeriesBuffer,
  thinOlderHalf
} from '../charts/downsample';
import {
  AllocationSeries,
  LossSeries,
  alignSeries,
  emetricsPoints
} from '../charts/series';
import type { IMetricRecord } from '../api';
import {
  LossChart,
  isLossName,
  isValidationName,
  lossSeriesSpecs
} from '../charts/loss';
import { withAlpha } from '../charts/chart';
import {
  AllocationTimeline,
  releaseTail,
  timelineColumns
} from '../charts/allocation';
import { lossChartEmptyText, timelineEmptyText } from '../charts/empty';
import { ScalePreference } from '../charts/preference';
import { EMETRICS } from './fixtures/emetrics';

function range(n: number, start = 0): number[] {
  return Array.from({ length: n }, (_, i) => start + i);
}

function step(
  globalStep: number,
  loss: number,
  epoch = 0,
  stepInEpoch = globalStep
): IMetricRecord {
  return {
    type: 'step',
    global_step: globalStep,
    epoch,
    step: stepInEpoch,
    loss,
    world_size: 2,
    samples_per_s: 100
  };
}

describe('downsampling', () => {
  it('thins the older half to every other point and keeps the newer half', () => {
    const xs = range(10);
    const ys = xs.map(x => x * 10);
    thinOlderHalf(xs, ys);
    expect(xs).toEqual([0, 2, 4, 5, 6, 7, 8, 9]);
    expect(ys).toEqual([0, 20, 40, 50, 60, 70, 80, 90]);
  });

  it('caps a series deterministically, as the kernel does', () => {
    // The same pushes in Python (tests/notebook/test_widgets.py) give the same points.
    const buffer = new SeriesBuffer(10);
    for (const x of range(25)) {
      buffer.push(x, -x);
    }
    expect(buffer.x).toEqual([0, 16, 18, 19, 20, 21, 22, 23, 24]);
    expect(buffer.y).toEqual(buffer.x.map(x => -x));
    const again = new SeriesBuffer(10);
    again.pushMany(
      range(25),
      range(25).map(x => -x)
    );
    expect(again.x).toEqual(buffer.x);
  });

  it('never holds more than the cap, keeps the first and last points', () => {
    const buffer = new SeriesBuffer(1000);
    let longest = 0;
    for (let x = 0; x < 250_000; x++) {
      buffer.push(x, Math.sin(x));
      longest = Math.max(longest, buffer.length);
    }
    expect(longest).toBe(1000);
    expect(buffer.x[0]).toBe(0);
    expect(buffer.lastX).toBe(249_999);
    // strictly increasing after any number of thinnings
    for (let i = 1; i < buffer.length; i++) {
      expect(buffer.x[i]).toBeGreaterThan(buffer.x[i - 1]);
    }
    // recent data stays exact: the last few hundred points are consecutive
    const tail = buffer.x.slice(-300);
    expect(tail).toEqual(range(300, 249_700));
  });

  it('defaults to 100k points', () => {
    expect(new SeriesBuffer().maxPoints).toBe(DEFAULT_MAX_POINTS);
    expect(DEFAULT_MAX_POINTS).toBe(100_000);
  });
});

describe('alignSeries', () => {
  it('joins series on the union of their x values, with nulls for gaps', () => {
    const aligned = alignSeries([
      { name: 'loss', x: [0, 1, 2, 3], y: [4, 3, 2, 1] },
      { name: 'val_loss', x: [1, 3], y: [3.5, 1.5] },
      { name: 'val_acc', x: [3, 5], y: [0.8, 0.9] }
    ]);
    expect(aligned).toEqual([
      [0, 1, 2, 3, 5],
      [4, 3, 2, 1, null],
      [null, 3.5, null, 1.5, null],
      [null, null, null, 0.8, 0.9]
    ]);
  });

  it('gives empty columns for no points', () => {
    expect(alignSeries([{ name: 'loss', x: [], y: [] }])).toEqual([[], []]);
    expect(alignSeries([])).toEqual([[]]);
  });
});

describe('LossSeries', () => {
  it('puts train loss per step and validation per epoch on one step axis', () => {
    const loss = new LossSeries();
    const changed = loss.addRecords([
      step(0, 1.0, 0, 0),
      step(1, 0.8, 0, 1),
      step(2, 0.7, 0, 2),
      { type: 'epoch', epoch: 0, val_loss: 0.75, val_acc: 0.6 },
      { type: 'checkpoint', path: '/x', global_step: 3 },
      step(3, 0.6, 1, 0),
      step(4, 0.5, 1, 1),
      step(5, 0.4, 1, 2),
      { type: 'epoch', epoch: 1, val_loss: 0.45, val_acc: 0.8 }
    ]);
    expect(changed).toBe(true);
    expect(loss.train.x).toEqual([0, 1, 2, 3, 4, 5]);
    expect(loss.validationNames).toEqual(['val_loss', 'val_acc']);
    expect(loss.validation.get('val_loss')?.x).toEqual([2, 5]);
    expect(loss.validation.get('val_acc')?.y).toEqual([0.6, 0.8]);
    expect(loss.columns()).toEqual([
      [0, 1, 2, 3, 4, 5],
      [1.0, 0.8, 0.7, 0.6, 0.5, 0.4],
      [null, null, 0.75, null, null, 0.45],
      [null, null, 0.6, null, null, 0.8]
    ]);
    expect(loss.progress).toEqual({
      epoch: 1,
      step: 2,
      globalStep: 5,
      stepsPerEpoch: 3,
      epochsDone: 2,
      worldSize: 2,
      samplesPerS: 100,
      lastLoss: 0.4
    });
    expect(loss.pointCount).toBe(10);
  });

  it('keeps records seen twice once (history, then the replayed feed)', () => {
    const loss = new LossSeries();
    const history = [step(0, 1), step(1, 0.9), step(2, 0.8)];
    expect(loss.addRecords(history)).toBe(true);
    expect(loss.addRecords(history)).toBe(false);
    expect(loss.addRecords([step(1, 0.9), step(2, 0.8), step(3, 0.7)])).toBe(
      true
    );
    expect(loss.train.x).toEqual([0, 1, 2, 3]);
    const epoch = { type: 'epoch', epoch: 0, val_loss: 0.7 };
    expect(loss.addRecords([epoch])).toBe(true);
    expect(loss.addRecords([epoch])).toBe(false);
    expect(loss.validation.get('val_loss')?.length).toBe(1);
  });

  it('skips records without numbers', () => {
    const loss = new LossSeries();
    expect(
      loss.addRecords([
        { type: 'step', epoch: 0 },
        { type: 'epoch', val_loss: 1 },
        { type: 'model_saved' }
      ])
    ).toBe(false);
    expect(loss.progress).toBeNull();
  });

  it("draws a WMLA program's emetrics as train/ and test/ series by iteration", () => {
    const loss = new LossSeries();
    expect(loss.addRecords(EMETRICS)).toBe(true);
    // Only numbers are drawn ("phase" is a string); no empty step-loss series.
    expect(loss.series().map(s => s.name)).toEqual([
      'train/loss',
      'train/accuracy',
      'test/loss',
      'test/accuracy'
    ]);
    const train = loss.emetrics.get('train/loss');
    expect(train?.x).toEqual([1, 2, 3, 4, 5, 6]);
    // The second process's copies of iterations 4 and 5 are not drawn again.
    expect(train?.y).toEqual([2, 1, 0.6667, 0.5, 0.4, 0.3333]);
    expect(loss.emetrics.get('train/accuracy')?.y[5]).toBe(95);
    expect(loss.emetrics.get('test/loss')?.x).toEqual([3, 6]);
    expect(loss.emetrics.get('test/accuracy')?.y).toEqual([69, 90]);
    expect(loss.lastIteration).toBe(6);
    expect(loss.pointCount).toBe(16);
    expect(loss.columns()[0]).toEqual([1, 2, 3, 4, 5, 6]);
    // The step progress stays the runtime's.
    expect(loss.progress).toBeNull();

    // Replayed by the events feed after the history: nothing changes.
    expect(loss.addRecords(EMETRICS)).toBe(false);
    expect(loss.pointCount).toBe(16);
  });

  it("puts emetrics beside the runtime's step and epoch series", () => {
    const loss = new LossSeries();
    loss.addRecords([
      step(0, 1.0),
      step(1, 0.8),
      step(2, 0.7),
      { type: 'epoch', epoch: 0, val_loss: 0.75 },
      ...EMETRICS.slice(0, 4)
    ]);
    expect(loss.series().map(s => s.name)).toEqual([
      'loss',
      'val_loss',
      'train/loss',
      'train/accuracy',
      'test/loss',
      'test/accuracy'
    ]);
    expect(loss.columns()[0]).toEqual([0, 1, 2, 3]);
    expect(loss.progress?.globalStep).toBe(2);
  });

  it('reads the values of an emetrics record, not its fields', () => {
    expect(emetricsPoints(EMETRICS[0])).toEqual([
      { name: 'train/loss', x: 1, y: 2 },
      { name: 'train/accuracy', x: 1, y: 57.5 }
    ]);
    expect(
      emetricsPoints({ type: 'emetrics', group: 'train', loss: 1 })
    ).toEqual([]);
    expect(emetricsPoints({ type: 'emetrics', iteration: 2, loss: 1 })).toEqual(
      []
    );
  });

  it('caps every series', () => {
    const loss = new LossSeries(100);
    loss.addRecords(range(1000).map(i => step(i, 1 / (i + 1))));
    expect(loss.train.length).toBeLessThanOrEqual(100);
    expect(loss.train.lastX).toBe(999);
  });
});

describe('AllocationSeries', () => {
  it('is a step line of GPU counts that reaches "now" while running', () => {
    const allocation = new AllocationSeries();
    expect(allocation.add(100, 1)).toBe(true);
    expect(allocation.add(110, 2)).toBe(true);
    expect(allocation.add(110, 2)).toBe(false); // same count again
    expect(allocation.add(90, 4)).toBe(false); // older than the last change
    expect(allocation.add(130, 0)).toBe(true);
    expect(allocation.current).toBe(0);
    expect(allocation.columns()).toEqual([
      [100, 110, 130],
      [1, 2, 0]
    ]);
    expect(allocation.columns(140)).toEqual([
      [100, 110, 130, 140],
      [1, 2, 0, 0]
    ]);
    expect(new AllocationSeries().columns(5)).toEqual([[], []]);
  });
});

describe('chart styling', () => {
  it('puts losses on the left axis and other metrics on the right', () => {
    expect(isLossName('val_loss')).toBe(true);
    const specs = lossSeriesSpecs(['loss', 'val_loss', 'val_acc', 'lr']);
    expect(specs.map(s => s.scale)).toEqual(['y', 'y', 'y2', 'y2']);
    expect(specs.map(s => !!s.points)).toEqual([false, true, true, false]);
    expect(specs[0].color).toBe('--jp-brand-color1');
  });

  it('draws emetrics losses with the losses and their accuracy with the metrics', () => {
    const names = [
      'loss',
      'val_loss',
      'train/loss',
      'train/accuracy',
      'test/loss',
      'test/accuracy'
    ];
    const specs = lossSeriesSpecs(names);
    expect(specs.map(s => s.scale)).toEqual(['y', 'y', 'y', 'y2', 'y', 'y2']);
    // test/ values come once per test run: dots, like validation.
    expect(names.map(isValidationName)).toEqual([
      false,
      true,
      false,
      false,
      true,
      true
    ]);
    expect(specs.map(s => !!s.points)).toEqual([
      false,
      true,
      false,
      false,
      true,
      true
    ]);
    // Two train losses (or two validation losses) are told apart by colour.
    expect(specs[2].color).not.toBe(specs[0].color);
    expect(specs[4].color).not.toBe(specs[1].color);
    expect(specs[5].color).not.toBe(specs[3].color);
  });

  it('makes translucent fills from theme colours', () => {
    expect(withAlpha('#1976d2', 0.15)).toBe('rgba(25, 118, 210, 0.15)');
    expect(withAlpha('#fff', 0.5)).toBe('rgba(255, 255, 255, 0.5)');
    expect(withAlpha('rgb(1, 2, 3)', 0.2)).toBe('rgba(1, 2, 3, 0.2)');
    expect(withAlpha('red', 0.2)).toBe('red');
  });
});

describe('the GPU timeline', () => {
  const changes = (): [number[], number[]] => [
    [100, 110, 150],
    [1, 2, 4]
  ];

  it('draws the counts and the maximum while the job runs', () => {
    expect(timelineColumns(changes(), 4)).toEqual([
      [100, 110, 150],
      [1, 2, 4],
      [4, 4, 4]
    ]);
  });

  it('drops to 0 when the job releases its GPUs, and shows 0 after', () => {
    // Finished at 200 holding 4: 4 until 200, then 0 for a while.
    const tail = releaseTail(100, 200);
    expect(tail).toBe(4);
    expect(timelineColumns(changes(), 4, { time: 200 })).toEqual([
      [100, 110, 150, 200, 204],
      [1, 2, 4, 0, 0],
      [4, 4, 4, 4, null]
    ]);
  });

  it('shows 0 after a release the allocation events already recorded', () => {
    const released: [number[], number[]] = [
      [100, 110, 200],
      [1, 2, 0]
    ];
    expect(timelineColumns(released, 2, { time: 200 })).toEqual([
      [100, 110, 200, 204],
      [1, 2, 0, 0],
      [2, 2, 2, null]
    ]);
  });

  it('releases at the last change when the finish time is unknown or earlier', () => {
    // Released when it last changed: the drop a second later, to show both.
    const [x, counts] = timelineColumns(changes(), 4, { time: null });
    expect(x.slice(0, 4)).toEqual([100, 110, 150, 151]);
    expect(x[4]).toBeCloseTo(151 + releaseTail(100, 151));
    expect(counts).toEqual([1, 2, 4, 0, 0]);
    expect(timelineColumns(changes(), 4, { time: 120 })[0][3]).toBe(151);
  });

  it('holds at least a second at 0', () => {
    expect(releaseTail(100, 100)).toBe(1);
    expect(releaseTail(0, 1000)).toBe(40);
  });

  it('stays empty without an allocation', () => {
    expect(timelineColumns([[], []], 2, { time: 50 })).toEqual([[], [], []]);
  });

  it('goes to 0 in the chart of a finished job', () => {
    const chart = new AllocationTimeline();
    chart.update(changes(), 4, { time: 200 });
    expect(chart.pointCount).toBe(5);
    expect(chart.data[1][4]).toBe(0);
    chart.dispose();
  });
});

describe('empty charts', () => {
  it('say why they are empty', () => {
    expect(lossChartEmptyText('RUNNING')).toBe('no step yet');
    expect(lossChartEmptyText(null)).toBe('no step yet');
    expect(lossChartEmptyText('FAILED')).toBe('failed before its first step');
    expect(lossChartEmptyText('CANCELLED')).toBe(
      'cancelled before its first step'
    );
    expect(lossChartEmptyText('QUEUED')).toBe('no step yet: waiting for GPUs');
    expect(timelineEmptyText('FAILED')).toBe('held no GPU');
    expect(timelineEmptyText('RUNNING')).toBe('no GPU held yet');
  });

  it('show the reason in place of the plot until the first point', () => {
    const chart = new LossChart({ scale: new ScalePreference() });
    const empty = chart.node.querySelector(
      '.jp-edt-chart-empty'
    ) as HTMLElement;
    expect(empty.hidden).toBe(false);
    expect(empty.textContent).toBe('no step yet');
    expect(chart.node.dataset.empty).toBe('true');
    chart.setEmptyText(lossChartEmptyText('FAILED'));
    expect(empty.textContent).toBe('failed before its first step');
    chart.update([{ name: 'loss', x: [0], y: [2.3] }]);
    expect(empty.hidden).toBe(true);
    expect(chart.node.dataset.empty).toBe('false');
    chart.dispose();
  });
});

describe('the log scale toggle', () => {
  function toggleOf(chart: LossChart): HTMLInputElement {
    return chart.node.querySelector(
      'input.jp-edt-chart-log-toggle'
    ) as HTMLInputElement;
  }

  it('switches every loss chart that shares the preference', () => {
    const scale = new ScalePreference();
    const widget = new LossChart({ scale });
    const tab = new LossChart({ scale });
    widget.update([{ name: 'loss', x: [0, 1, 2], y: [2.3, 0.01, 1.6e-4] }]);
    expect(widget.yScale).toBe('linear');
    expect(toggleOf(widget).checked).toBe(false);

    toggleOf(widget).checked = true;
    toggleOf(widget).dispatchEvent(new Event('change'));
    expect(scale.value).toBe('log');
    expect(widget.drawnYScale).toBe('log');
    expect(widget.node.dataset.yScale).toBe('log');
    // The other chart follows, and its toggle says so.
    expect(tab.yScale).toBe('log');
    expect(toggleOf(tab).checked).toBe(true);

    scale.value = 'linear';
    expect(widget.yScale).toBe('linear');
    expect(toggleOf(widget).checked).toBe(false);

    // A disposed chart no longer follows.
    tab.dispose();
    scale.value = 'log';
    expect(tab.yScale).toBe('linear');
    widget.dispose();
  });

  it('leaves values <= 0 out of a log axis, says so, and keeps them in the data', () => {
    const scale = new ScalePreference('log');
    const chart = new LossChart({ scale });
    const note = chart.node.querySelector('.jp-edt-chart-note') as HTMLElement;
    expect(note.hidden).toBe(true);
    chart.update([{ name: 'loss', x: [0, 1, 2, 3], y: [1, 0, -0.5, 0.01] }]);
    expect(chart.drawnYScale).toBe('log');
    expect(note.hidden).toBe(false);
    expect(note.textContent).toBe('2 values ≤ 0 not drawn');
    // The legend reads the data as given.
    expect(chart.data[1]).toEqual([1, 0, -0.5, 0.01]);

    // Nothing above 0: drawn linear, and said so.
    chart.update([{ name: 'loss', x: [0, 1], y: [-1, -2] }]);
    expect(chart.drawnYScale).toBe('linear');
    expect(note.textContent).toBe('no value > 0: shown on a linear scale');

    // Linear again: no note.
    scale.value = 'linear';
    expect(note.hidden).toBe(true);
    chart.dispose();
  });

  it('keeps metrics on a linear axis', () => {
    const chart = new LossChart({ scale: new ScalePreference('log') });
    chart.update([
      { name: 'loss', x: [0, 1], y: [1, 0.5] },
      { name: 'val_acc', x: [1], y: [0] }
    ]);
    // A 0 accuracy is a metric (right axis): nothing is left out.
    expect(chart.scaleNote).toBeNull();
    chart.dispose();
  });
});

describe('charts drawn by uPlot (on a stand-in canvas)', () => {
  /** An object whose every method does nothing (a 2D context, a Path2D). */
  function inert(): any {
    const known: Record<string | symbol, unknown> = {
      measureText: (text: string) => ({ width: text.length * 6 }),
      getLineDash: () => []
    };
    return new Proxy(known, {
      get: (target, key) => (key in target ? target[key] : () => undefined),
      set: (target, key, value) => {
        target[key] = value;
        return true;
      }
    });
  }

  const getContext = HTMLCanvasElement.prototype.getContext;
  const hadPath2D = 'Path2D' in globalThis;
  beforeAll(() => {
    (globalThis as any).Path2D = function Path2D() {
      return inert();
    };
    HTMLCanvasElement.prototype.getContext = (() => inert()) as any;
  });
  afterAll(() => {
    HTMLCanvasElement.prototype.getContext = getContext;
    if (!hadPath2D) {
      delete (globalThis as any).Path2D;
    }
  });

  /** Lay the chart out 600 px wide and let uPlot draw. */
  async function draw(chart: { node: HTMLElement; fit(): void }) {
    document.body.appendChild(chart.node);
    Object.defineProperty(chart.node, 'clientWidth', { value: 600 });
    chart.fit();
    await new Promise(resolve => setTimeout(resolve, 0)); // uPlot commits later
  }

  const axisLabels = (chart: object): (string[] | null)[] =>
    (chart as any)._plot.axes.map((axis: any) => axis._values);

  it('labels its axes and reads its latest values without a mouse', async () => {
    const scale = new ScalePreference();
    const chart = new LossChart({ scale });
    chart.update([
      { name: 'loss', x: [0, 500, 1000], y: [2.3, 0.01, 1.6e-4] },
      { name: 'val_acc', x: [500], y: [0.8] }
    ]);
    await draw(chart);
    const legend = () =>
      [...chart.node.querySelectorAll('.u-legend .u-series')].map(row =>
        row.textContent?.trim()
      );
    expect(legend()).toEqual(['step1000', 'loss1.6e-4', 'val_acc0.8']);
    const [steps, losses] = axisLabels(chart);
    expect(steps).toEqual(['0', '200', '400', '600', '800', '1000']);
    expect(losses).toContain('1');
    // The node says what the canvas shows, for whoever cannot read a canvas.
    const ticks = (axis: string) =>
      JSON.parse(chart.node.getAttribute(`data-${axis}-ticks`) ?? 'null');
    expect(ticks('x')).toEqual(steps);
    expect(ticks('y')).toEqual(losses);
    expect(ticks('y2')).toEqual(axisLabels(chart)[2]);

    scale.value = 'log';
    await draw(chart);
    expect(axisLabels(chart)[1]?.[0]).toBe('1e-4');
    expect(ticks('y')).toEqual(axisLabels(chart)[1]);
    expect(ticks('y')).not.toEqual(losses);
    expect(legend()).toEqual(['step1000', 'loss1.6e-4', 'val_acc0.8']);
    chart.dispose();
  });

  it('labels the GPU timeline with clock times and ends at 0', async () => {
    const start = new Date(2024, 2, 3, 14, 0, 0).getTime() / 1000;
    const chart = new AllocationTimeline();
    chart.update(
      [
        [start, start + 60],
        [1, 2]
      ],
      2,
      { time: start + 600 }
    );
    await draw(chart);
    const [times, counts] = axisLabels(chart);
    expect(times?.[0]).toBe('14:00');
    expect(counts).toEqual(['0', '1', '2']);
    expect(
      chart.node.querySelector('.u-legend .u-series:nth-child(2)')?.textContent
    ).toBe('GPUs0');
    chart.dispose();
  });
});
