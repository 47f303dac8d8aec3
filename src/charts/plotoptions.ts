/**
 * The uPlot options of a chart: its axes with our own ticks and labels
 * (ticks.ts), its scales (scale.ts, log included), and a legend that shows
 * the latest values when the cursor is off the chart (legend.ts). No DOM:
 * `StreamingChart` resolves the theme's colours and owns the plot; jest calls
 * the functions these options hold.
 */
import uPlot from 'uplot';

import {
  formatClock,
  formatCount,
  formatSignificant,
  formatTicks
} from '../format';
import type { IChartOptions, XKind } from './chart';
import { legendText } from './legend';
import {
  linearDomain,
  logDomain,
  stepDomain,
  timeDomain,
  type ScaleKind
} from './scale';
import type { AlignedColumns } from './series';
import { linearTicks, logTicks, tickBudget, timeTicks } from './ticks';

/** Pixels between two labels of an axis, by what they read. */
export const TICK_SPACING = { step: 70, number: 70, time: 90, y: 24 };

/** The colours and font a chart is drawn with (resolved CSS variables). */
export interface IChartTheme {
  /** Text of the axes. */
  text: string;
  /** Grid lines and ticks. */
  grid: string;
  /** Canvas font of the axes, e.g. "11px sans-serif". */
  font: string;
  /** Each series' stroke, in the order of `IChartOptions.series`. */
  strokes: string[];
}

/** What the plot options are built from. */
export interface IPlotInputs {
  options: IChartOptions;
  width: number;
  height: number;
  theme: IChartTheme;
  /** The scale the left y axis is drawn with (log only with a value > 0). */
  yScale: ScaleKind;
  /** The data as given (a log axis' gaps left out): what the legend reads. */
  values: () => AlignedColumns;
  /** Each column's latest index with a value (legend.latestIndices). */
  latest: () => (number | null)[];
  /** A colour with an alpha, for fills. */
  translucent: (color: string, alpha: number) => string;
  /** Told each axis' tick labels (by its scale: x, y, y2) as they are drawn. */
  ticks?: (scale: string, labels: string[]) => void;
}

/** An axis that tells `report` the labels it draws. */
function reporting(
  axis: uPlot.Axis,
  report: ((scale: string, labels: string[]) => void) | undefined
): uPlot.Axis {
  const values = axis.values;
  if (!report || typeof values !== 'function') {
    return axis;
  }
  return {
    ...axis,
    values: (u, splits, axisIdx, space, incr) => {
      const labels = values(u, splits, axisIdx, space, incr);
      report(
        axis.scale ?? 'x',
        labels.map(label => (label === null ? '' : String(label)))
      );
      return labels;
    }
  };
}

/** How an x value reads in the legend and under a tick. */
export function formatX(kind: XKind): (value: number) => string {
  switch (kind) {
    case 'step':
      return formatCount;
    case 'time':
      return value => formatClock(value, 'seconds');
    default:
      return value => formatSignificant(value);
  }
}

/** Width of a y axis (pixels) whose labels are `labels`: the longest fits. */
export function yAxisWidth(labels: readonly (string | null)[] | null): number {
  const longest = Math.max(0, ...(labels ?? []).map(l => (l ?? '').length));
  return Math.max(32, Math.ceil(longest * 6.5) + 16);
}

/** The plot's length along an axis (CSS pixels), or the chart's when not laid out. */
function plotLength(u: uPlot, horizontal: boolean): number {
  const ratio = uPlot.pxRatio || 1;
  const length = (horizontal ? u.bbox?.width : u.bbox?.height) ?? 0;
  if (length > 0) {
    return length / ratio;
  }
  return horizontal ? u.width : Math.max(0, u.height - 40);
}

function xBudget(u: uPlot, kind: XKind): number {
  return tickBudget(plotLength(u, true), TICK_SPACING[kind]);
}

function yBudget(u: uPlot): number {
  return tickBudget(plotLength(u, false), TICK_SPACING.y);
}

/** The x axis: steps as whole numbers, wall times on whole seconds, minutes or hours. */
function xAxisTicks(kind: XKind): Pick<uPlot.Axis, 'splits' | 'values'> {
  if (kind === 'time') {
    return {
      splits: (u, _axis, min, max) =>
        timeTicks(min, max, xBudget(u, kind)).ticks,
      values: (u, splits) => {
        const { min, max } = u.scales.x;
        const { precision } = timeTicks(
          min ?? splits[0],
          max ?? splits[splits.length - 1],
          xBudget(u, kind)
        );
        return splits.map(t => formatClock(t, precision));
      }
    };
  }
  return {
    splits: (u, _axis, min, max) =>
      linearTicks(min, max, xBudget(u, kind), { integer: kind === 'step' }),
    values: (_u, splits) =>
      kind === 'step' ? splits.map(formatCount) : formatTicks(splits)
  };
}

/** A y axis: nice values, or decades on a log scale; values to significant digits. */
function yAxisTicks(
  scale: ScaleKind,
  integer: boolean
): Pick<uPlot.Axis, 'splits' | 'values' | 'filter'> {
  return {
    splits: (u, _axis, min, max) =>
      scale === 'log'
        ? logTicks(min, max, yBudget(u))
        : linearTicks(min, max, yBudget(u), { integer }),
    values: (_u, splits) =>
      scale === 'log'
        ? splits.map(value => formatSignificant(value))
        : formatTicks(splits),
    // uPlot thins a log axis' labels by itself: ours are already thinned.
    filter: (_u, splits) => splits
  };
}

/** The uPlot options of a chart. */
export function plotOptions(inputs: IPlotInputs): uPlot.Options {
  const { options, theme } = inputs;
  const xKind: XKind = options.xKind ?? 'number';
  const axis = (label: string | undefined, scale: string): uPlot.Axis => ({
    scale,
    label,
    stroke: theme.text,
    font: theme.font,
    labelFont: theme.font,
    labelSize: label ? 16 : 0,
    labelGap: 0,
    gap: 4,
    grid: { stroke: theme.grid, width: 1 },
    ticks: { stroke: theme.grid, width: 1, size: 4 }
  });

  const hasY2 = options.series.some(s => s.scale === 'y2');
  const axes: uPlot.Axis[] = [
    { ...axis(options.xLabel, 'x'), size: 24, ...xAxisTicks(xKind) },
    {
      ...axis(options.yLabel, 'y'),
      size: (_u, values) => yAxisWidth(values),
      ...yAxisTicks(inputs.yScale, options.yInteger ?? false)
    }
  ];
  if (hasY2) {
    axes.push({
      ...axis(options.y2Label, 'y2'),
      side: 1,
      grid: { show: false },
      size: (_u, values) => yAxisWidth(values),
      ...yAxisTicks('linear', false)
    });
  }

  const legendValue =
    (format: (value: number) => string) =>
    (_u: uPlot, _raw: unknown, seriesIdx: number, idx: number | null) =>
      legendText(
        inputs.values()[seriesIdx],
        idx ?? null,
        inputs.latest()[seriesIdx] ?? null,
        format
      );

  const stepped = uPlot.paths.stepped
    ? uPlot.paths.stepped({ align: 1 })
    : undefined;
  const series: uPlot.Series[] = [
    {
      label: options.xLabel ?? (xKind === 'time' ? 'time' : 'x'),
      value: legendValue(formatX(xKind))
    },
    ...options.series.map((spec, index): uPlot.Series => {
      const stroke = theme.strokes[index];
      return {
        label: spec.label,
        scale: spec.scale ?? 'y',
        stroke,
        width: spec.width ?? 1.5,
        dash: spec.dash,
        fill: spec.fill ? inputs.translucent(stroke, 0.15) : undefined,
        spanGaps: true,
        paths: spec.stepped ? stepped : undefined,
        value: legendValue(value => formatSignificant(value)),
        // Without `points`, uPlot's own: dots while the line is sparse (its
        // first step), none once dense.
        ...(spec.points
          ? { points: { show: true, size: 6, stroke, fill: stroke } }
          : spec.stepped
            ? { points: { show: false } }
            : {})
      };
    })
  ];

  const yRange = options.yRange;
  const scales: uPlot.Scales = {
    x: {
      time: false,
      range: (u, min, max) =>
        xKind === 'time'
          ? timeDomain(min, max)
          : xKind === 'step'
            ? stepDomain(min, max)
            : linearDomain(min, max, xBudget(u, xKind))
    },
    y:
      inputs.yScale === 'log'
        ? {
            distr: 3,
            log: 10,
            range: (_u, min, max) => logDomain(min, max) ?? [0.1, 1]
          }
        : {
            distr: 1,
            range: (u, min, max) =>
              yRange ? yRange(min, max) : linearDomain(min, max, yBudget(u))
          }
  };
  if (hasY2) {
    scales.y2 = {
      range: (u, min, max) => linearDomain(min, max, yBudget(u))
    };
  }

  return {
    width: inputs.width,
    height: inputs.height,
    scales,
    axes: axes.map(axis => reporting(axis, inputs.ticks)),
    series,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false } }
  };
}
