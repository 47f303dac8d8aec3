/**
 * The charts' geometry, without a canvas: ticks, scales (log included), the
 * legend's latest values, and the uPlot options built from them.
 */
import type uPlot from 'uplot';

import type { IChartOptions } from '../charts/chart';
import { NO_VALUE, latestIndices, legendText } from '../charts/legend';
import { plotOptions, yAxisWidth } from '../charts/plotoptions';
import {
  drawnScale,
  isScaleKind,
  linearDomain,
  logColumns,
  logDomain,
  logScaleNote,
  stepDomain,
  timeDomain,
  type ScaleKind
} from '../charts/scale';
import type { AlignedColumns } from '../charts/series';
import {
  linearTicks,
  logTicks,
  niceStep,
  tickBudget,
  tickStep,
  timeTicks
} from '../charts/ticks';
import { formatSignificant, formatTicks } from '../format';

/** Whether `step` is 1, 2 or 5 times a power of ten. */
function isNice(step: number): boolean {
  const mantissa = step / 10 ** Math.floor(Math.log10(step) + 1e-9);
  return [1, 2, 5].some(m => Math.abs(mantissa - m) < 1e-6);
}

/** A deterministic pseudo-random sequence in [0, 1). */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 16807) % 2147483647;
    return (state - 1) / 2147483646;
  };
}

describe('ticks', () => {
  it('picks 1, 2 or 5 times a power of ten', () => {
    expect(niceStep(10, 5)).toBe(2);
    expect(niceStep(1, 5)).toBe(0.2);
    expect(niceStep(0.0007, 4)).toBe(0.0002);
    expect(niceStep(7, 1)).toBe(10);
    expect(niceStep(0, 5)).toBe(1);
  });

  it('puts linear ticks on multiples of the step, without float noise', () => {
    expect(linearTicks(0, 10, 6)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(linearTicks(0.13, 0.87, 5)).toEqual([0.2, 0.4, 0.6, 0.8]);
    expect(linearTicks(0, 0.3, 4)).toEqual([0, 0.1, 0.2, 0.3]);
    expect(linearTicks(-1, 1, 3)).toEqual([-1, 0, 1]);
    expect(linearTicks(10, 0, 6)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(linearTicks(5, 5, 6)).toEqual([5]);
    expect(linearTicks(Number.NaN, 1, 6)).toEqual([]);
  });

  it('keeps whole numbers whole (steps, GPU counts)', () => {
    expect(linearTicks(0, 3, 10, { integer: true })).toEqual([0, 1, 2, 3]);
    expect(linearTicks(0, 0.5, 10, { integer: true })).toEqual([0]);
    expect(linearTicks(0, 12000, 5, { integer: true })).toEqual([
      0, 5000, 10000
    ]);
  });

  it('never gives more ticks than asked, all nice, evenly spaced and in range', () => {
    const next = random(7);
    for (let i = 0; i < 500; i++) {
      const min = (next() - 0.5) * 10 ** Math.floor(next() * 12 - 6);
      const max = min + next() * 10 ** Math.floor(next() * 12 - 6);
      const budget = 2 + Math.floor(next() * 10);
      const ticks = linearTicks(min, max, budget);
      const step = tickStep(min, max, budget);
      const noise = Math.max(Math.abs(min), Math.abs(max)) * 1e-9;
      expect(isNice(step)).toBe(true);
      expect(ticks.length).toBeLessThanOrEqual(budget);
      ticks.forEach((tick, k) => {
        expect(tick).toBeGreaterThanOrEqual(min - noise);
        expect(tick).toBeLessThanOrEqual(max + noise);
        expect(Math.abs(tick - ticks[0] - k * step)).toBeLessThanOrEqual(
          noise + step * 1e-9
        );
      });
      // Their labels tell neighbours apart, however narrow the range.
      const labels = formatTicks(ticks);
      expect(new Set(labels).size).toBe(ticks.length);
    }
  });

  it('fits as many labels as the axis has room for', () => {
    expect(tickBudget(700, 70)).toBe(10);
    expect(tickBudget(50, 70)).toBe(2);
    expect(tickBudget(0, 70)).toBe(2);
  });

  it('puts log ticks on decades, every n-th when many', () => {
    expect(logTicks(1e-4, 1, 6)).toEqual([1e-4, 1e-3, 0.01, 0.1, 1]);
    expect(logTicks(1e-8, 1, 5)).toEqual([1e-8, 1e-6, 1e-4, 0.01, 1]);
    expect(logTicks(1e-4, 1, 6).map(v => formatSignificant(v))).toEqual([
      '1e-4',
      '0.001',
      '0.01',
      '0.1',
      '1'
    ]);
  });

  it('adds 2 and 5 times the decades when there is room', () => {
    expect(logTicks(0.1, 10, 10)).toEqual([0.1, 0.2, 0.5, 1, 2, 5, 10]);
  });

  it('gives 2 and 5 times a decade, or linear ticks, within less than a decade', () => {
    expect(logTicks(0.2, 0.9, 5)).toEqual([0.2, 0.5]);
    expect(logTicks(0.21, 0.45, 5)).toEqual([0.25, 0.3, 0.35, 0.4, 0.45]);
  });

  it('gives no log ticks without a positive range', () => {
    expect(logTicks(0, 1, 5)).toEqual([]);
    expect(logTicks(-1, 1, 5)).toEqual([]);
  });

  it('puts time ticks on whole seconds, minutes and hours', () => {
    expect(timeTicks(1000, 1100, 6, 0)).toEqual({
      ticks: [1020, 1050, 1080],
      step: 30,
      precision: 'seconds'
    });
    const hour = timeTicks(3600 * 10 + 17, 3600 * 11 + 17, 5, 0);
    expect(hour.step).toBe(900);
    expect(hour.precision).toBe('minutes');
    expect(hour.ticks).toEqual([36900, 37800, 38700, 39600]);
    const days = timeTicks(0, 86400 * 6, 4, 0);
    expect(days.step).toBe(172800);
    expect(days.precision).toBe('days');
  });

  it("aligns time ticks to the time zone's quarter hours", () => {
    const offset = 5.5 * 3600; // India: UTC+05:30
    const { ticks, step } = timeTicks(1_700_000_000, 1_700_003_600, 5, offset);
    expect(step).toBe(900);
    for (const tick of ticks) {
      expect((tick + offset) % 900).toBe(0);
    }
  });
});

describe('scales', () => {
  it('widens a linear range to nice ticks', () => {
    expect(linearDomain(0.13, 0.87, 5)).toEqual([0, 1]);
    expect(linearDomain(0.1, 4.1, 5)).toEqual([0, 6]);
    expect(linearDomain(-0.3, 2.2, 6)).toEqual([-1, 3]);
    expect(linearDomain(5, 5, 5)).toEqual([4, 6]);
    expect(linearDomain(0, 0, 5)).toEqual([-1, 1]);
    expect(linearDomain(null, null, 5)).toEqual([0, 1]);
  });

  it('labels both ends of a linear range', () => {
    const next = random(11);
    for (let i = 0; i < 200; i++) {
      const min = (next() - 0.5) * 100;
      const max = min + next() * 50 + 1e-3;
      const budget = 3 + Math.floor(next() * 6);
      const [low, high] = linearDomain(min, max, budget);
      expect(low).toBeLessThanOrEqual(min);
      expect(high).toBeGreaterThanOrEqual(max);
      const ticks = linearTicks(low, high, budget);
      expect(ticks[0]).toBe(low);
      expect(ticks[ticks.length - 1]).toBe(high);
    }
  });

  it('spans whole decades on a log axis', () => {
    expect(logDomain(0.3, 2.5)).toEqual([0.1, 10]);
    expect(logDomain(1e-4, 1e-4)).toEqual([1e-4, 1e-3]);
    expect(logDomain(0.01, 1)).toEqual([0.01, 1]);
    expect(logDomain(-1, -0.5)).toBeNull();
    expect(logDomain(null, null)).toBeNull();
  });

  it('shows steps and times as they are, with room around a single one', () => {
    expect(stepDomain(3, 90)).toEqual([3, 90]);
    expect(stepDomain(0, 0)).toEqual([0, 1]);
    expect(stepDomain(null, null)).toEqual([0, 1]);
    expect(timeDomain(100, 200)).toEqual([100, 200]);
    expect(timeDomain(100, 100)).toEqual([70, 130]);
    expect(timeDomain(null, null, 1000)).toEqual([940, 1000]);
  });

  it('leaves the values <= 0 out of a log axis, and only there', () => {
    const columns: AlignedColumns = [
      [0, 1, 2, 3],
      [1, 0, -0.5, 0.01],
      [null, -2, null, 3]
    ];
    const log = logColumns(columns, [true, false]);
    expect(log.columns).toEqual([
      [0, 1, 2, 3],
      [1, null, null, 0.01],
      [null, -2, null, 3]
    ]);
    expect(log.drawn).toBe(2);
    expect(log.hidden).toBe(2);
    expect(columns[1]).toEqual([1, 0, -0.5, 0.01]); // not modified
  });

  it('falls back to linear when a log axis has nothing to place, and says so', () => {
    expect(drawnScale('log', 3)).toBe('log');
    expect(drawnScale('log', 0)).toBe('linear');
    expect(drawnScale('linear', 3)).toBe('linear');
    expect(logScaleNote('log', 10, 0)).toBeNull();
    expect(logScaleNote('log', 10, 1)).toBe('1 value ≤ 0 not drawn');
    expect(logScaleNote('log', 10, 3)).toBe('3 values ≤ 0 not drawn');
    expect(logScaleNote('log', 0, 3)).toBe(
      'no value > 0: shown on a linear scale'
    );
    expect(logScaleNote('linear', 0, 3)).toBeNull();
    expect(isScaleKind('log')).toBe(true);
    expect(isScaleKind('sqrt')).toBe(false);
  });
});

describe('legend', () => {
  const columns: AlignedColumns = [
    [0, 1, 2],
    [1.6e-4, 1e-4, null],
    [null, 0.5, null]
  ];

  it("finds each series' latest value", () => {
    expect(latestIndices(columns)).toEqual([2, 1, 1]);
    expect(latestIndices([[], []])).toEqual([null, null]);
  });

  it('reads the latest values off the chart, the hovered ones on it', () => {
    const format = (v: number) => formatSignificant(v);
    expect(legendText(columns[1], null, 1, format)).toBe('1e-4');
    expect(legendText(columns[1], 0, 1, format)).toBe('1.6e-4');
    expect(legendText(columns[1], 2, 1, format)).toBe(NO_VALUE);
    expect(legendText(columns[2], null, null, format)).toBe(NO_VALUE);
  });
});

/** A stand-in for the uPlot instance the options' functions receive. */
function fakePlot(
  width = 600,
  height = 220,
  x: { min?: number; max?: number } = {}
): uPlot {
  return {
    width,
    height,
    bbox: { left: 0, top: 0, width: 0, height: 0 },
    scales: { x }
  } as unknown as uPlot;
}

function build(
  options: IChartOptions,
  columns: AlignedColumns,
  yScale: ScaleKind = 'linear'
): uPlot.Options {
  return plotOptions({
    options,
    width: 600,
    height: 220,
    theme: {
      text: '#616161',
      grid: '#e0e0e0',
      font: '11px sans-serif',
      strokes: options.series.map(() => '#1976d2')
    },
    yScale,
    values: () => columns,
    latest: () => latestIndices(columns),
    translucent: (color: string) => color
  });
}

type Splits = (
  u: uPlot,
  axis: number,
  min: number,
  max: number,
  incr: number,
  space: number
) => number[];
type Values = (u: uPlot, splits: number[]) => string[];
type Range = (
  u: uPlot,
  min: number | null,
  max: number | null
) => [number, number];
type LegendValue = (
  u: uPlot,
  raw: unknown,
  seriesIdx: number,
  idx: number | null
) => string;

function axisTicks(
  axis: uPlot.Axis,
  u: uPlot,
  min: number,
  max: number
): string[] {
  const splits = (axis.splits as Splits)(u, 0, min, max, 1, 50);
  return (axis.values as Values)(u, splits);
}

describe('plot options', () => {
  const loss: IChartOptions = {
    series: [
      { label: 'loss', color: '--jp-brand-color1', scale: 'y' },
      { label: 'acc', color: '--jp-success-color1', scale: 'y2' }
    ],
    xKind: 'step',
    xLabel: 'step',
    yLabel: 'loss',
    y2Label: 'metric'
  };
  const columns: AlignedColumns = [
    [0, 500, 1000],
    [2.3, 0.01, 1.6e-4],
    [null, 0.8, null]
  ];

  it('labels the step axis with whole steps', () => {
    const options = build(loss, columns);
    const axes = options.axes!;
    expect(axes[0].label).toBe('step');
    expect(axisTicks(axes[0], fakePlot(), 0, 1000)).toEqual([
      '0',
      '200',
      '400',
      '600',
      '800',
      '1000'
    ]);
    expect(axisTicks(axes[0], fakePlot(), 0, 3)).toEqual(['0', '1', '2', '3']);
    // The right-hand axis of the metrics is there, and linear.
    expect(axes.map(a => a.scale)).toEqual(['x', 'y', 'y2']);
  });

  it('labels a linear loss axis to significant digits', () => {
    const options = build(loss, columns);
    expect(axisTicks(options.axes![1], fakePlot(), 0, 4e-4)).toEqual([
      '0',
      '1e-4',
      '2e-4',
      '3e-4',
      '4e-4'
    ]);
    expect(options.scales!.y.distr).toBe(1);
  });

  it('draws a log loss axis on decades', () => {
    const options = build(loss, columns, 'log');
    expect(options.scales!.y.distr).toBe(3);
    const range = options.scales!.y.range as Range;
    expect(range(fakePlot(), 1.6e-4, 2.3)).toEqual([1e-4, 10]);
    expect(axisTicks(options.axes![1], fakePlot(), 1e-4, 10)).toEqual([
      '1e-4',
      '0.001',
      '0.01',
      '0.1',
      '1',
      '10'
    ]);
    // The metrics stay linear.
    expect(options.scales!.y2.distr).toBeUndefined();
  });

  it('ranges the step axis over the steps shown', () => {
    const range = build(loss, columns).scales!.x.range as Range;
    expect(range(fakePlot(), 0, 1000)).toEqual([0, 1000]);
    expect(range(fakePlot(), 7, 7)).toEqual([7, 8]);
  });

  it('shows the latest values in the legend until hovered', () => {
    const series = build(loss, columns).series;
    const text = (index: number, idx: number | null) =>
      (series[index].value as LegendValue)(fakePlot(), null, index, idx);
    expect(series.map(s => s.label)).toEqual(['step', 'loss', 'acc']);
    // Off the chart: the last step, the last loss, the last accuracy.
    expect([0, 1, 2].map(i => text(i, null))).toEqual([
      '1000',
      '1.6e-4',
      '0.8'
    ]);
    // Hovered: the values at that step.
    expect([0, 1, 2].map(i => text(i, 0))).toEqual(['0', '2.3', NO_VALUE]);
  });

  it('labels the wall-time axis with clock times', () => {
    const timeline: IChartOptions = {
      series: [{ label: 'GPUs', color: '--jp-brand-color1', stepped: true }],
      xKind: 'time',
      xLabel: 'time',
      yInteger: true,
      yRange: (_min, max) => [0, Math.max(1, Math.ceil(max)) + 0.5]
    };
    const start = new Date(2024, 2, 3, 14, 0, 0).getTime() / 1000;
    const options = build(timeline, [
      [start, start + 600],
      [2, 0]
    ]);
    const u = fakePlot(600, 130, { min: start, max: start + 600 });
    expect(axisTicks(options.axes![0], u, start, start + 600)).toEqual([
      '14:00',
      '14:02',
      '14:04',
      '14:06',
      '14:08',
      '14:10'
    ]);
    // GPU counts: whole ticks from 0.
    expect(axisTicks(options.axes![1], u, 0, 2.5)).toEqual(['0', '1', '2']);
    expect((options.scales!.y.range as Range)(u, 0, 2)).toEqual([0, 2.5]);
    // The legend's time is a clock time.
    const value = options.series[0].value as LegendValue;
    expect(value(u, null, 0, null)).toBe('14:10:00');
    // A step line draws no dots.
    expect(options.series[1].points).toEqual({ show: false });
  });

  it('sizes a y axis to its longest label', () => {
    expect(yAxisWidth(['0', '1'])).toBe(32);
    expect(yAxisWidth(['1.6e-4', '1234567'])).toBeGreaterThan(
      yAxisWidth(['0', '1'])
    );
    expect(yAxisWidth(null)).toBe(32);
  });
});
