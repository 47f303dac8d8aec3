/**
 * How values map onto an axis: the range each kind of axis shows (linear,
 * log, steps, wall time), and the data a log axis can draw. Pure: the chart
 * (chart.ts) hands them to uPlot, and jest tests them.
 */
import type { AlignedColumns } from './series';
import { cleanFloat, tickStep } from './ticks';

/** A y axis' scale. */
export type ScaleKind = 'linear' | 'log';

/** The scales a y axis may take, for settings and toggles. */
export const SCALE_KINDS: readonly ScaleKind[] = ['linear', 'log'];

/** Whether a value names a scale. */
export function isScaleKind(value: unknown): value is ScaleKind {
  return SCALE_KINDS.includes(value as ScaleKind);
}

/** A range of values, [low, high]. */
export type Domain = [number, number];

function known(value: number | null | undefined): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * The range of a linear axis over data from `min` to `max`: widened to the
 * nice ticks around them, so that the first and last gridlines are labelled.
 * A single value gets room around it; no data gives [0, 1].
 */
export function linearDomain(
  min: number | null | undefined,
  max: number | null | undefined,
  maxTicks: number
): Domain {
  if (!known(min) || !known(max)) {
    return [0, 1];
  }
  if (min === max) {
    const pad = Math.abs(min) * 0.1 || 1;
    [min, max] = [min - pad, max + pad];
  }
  // Widen to whole steps until the step settles (as d3's scale.nice() does),
  // so that the ticks over the range (the same step) fall on both its ends.
  let [low, high] = [min, max];
  let step = 0;
  for (let round = 0; round < 10; round++) {
    const next = tickStep(low, high, maxTicks);
    if (next === step) {
      break;
    }
    step = next;
    low = cleanFloat(Math.floor(low / step + 1e-9) * step);
    high = cleanFloat(Math.ceil(high / step - 1e-9) * step);
  }
  return [low, high];
}

/**
 * The range of a log axis over positive data from `min` to `max`: the whole
 * decades around them (0.1 to 10 for 0.3 to 2.5). Null when there is no
 * positive value to place.
 */
export function logDomain(
  min: number | null | undefined,
  max: number | null | undefined
): Domain | null {
  if (!known(min) || !known(max) || !(max > 0)) {
    return null;
  }
  const low = min > 0 ? min : max;
  const lowPower = Math.floor(Math.log10(low) + 1e-9);
  let highPower = Math.ceil(Math.log10(max) - 1e-9);
  if (highPower <= lowPower) {
    highPower = lowPower + 1;
  }
  return [cleanFloat(10 ** lowPower), cleanFloat(10 ** highPower)];
}

/**
 * The range of a step axis: exactly the steps shown (a curve starts at the
 * left edge and ends at the right one); one step gets a step of room; no data
 * gives [0, 1].
 */
export function stepDomain(
  min: number | null | undefined,
  max: number | null | undefined
): Domain {
  if (!known(min) || !known(max)) {
    return [0, 1];
  }
  return min === max ? [min, min + 1] : [min, max];
}

/**
 * The range of a wall-time axis (seconds): exactly the times shown; a single
 * time gets half a minute each side; no data gives the minute before now.
 */
export function timeDomain(
  min: number | null | undefined,
  max: number | null | undefined,
  now: number = Date.now() / 1000
): Domain {
  if (!known(min) || !known(max)) {
    return [now - 60, now];
  }
  return min === max ? [min - 30, max + 30] : [min, max];
}

/** Data made drawable on a log axis, and what that left out. */
export interface ILogColumns {
  /** The columns with each value <= 0 on the log axis made a gap. */
  columns: AlignedColumns;
  /** Values on the log axis that are drawn (> 0). */
  drawn: number;
  /** Values on the log axis left out (<= 0: a log axis has no place for them). */
  hidden: number;
}

/**
 * The columns a log axis can draw: on the series of that axis (`onAxis[i]`
 * for column i + 1) every value <= 0 becomes a gap (null); other series and
 * the x values stay as they are. The input is not modified.
 */
export function logColumns(
  columns: AlignedColumns,
  onAxis: readonly boolean[]
): ILogColumns {
  let drawn = 0;
  let hidden = 0;
  const [x, ...ys] = columns;
  const out = ys.map((column, index) => {
    if (!onAxis[index]) {
      return column;
    }
    return column.map(value => {
      if (value === null || value === undefined || Number.isNaN(value)) {
        return null;
      }
      if (value > 0) {
        drawn++;
        return value;
      }
      hidden++;
      return null;
    });
  });
  return { columns: [x, ...out], drawn, hidden };
}

/**
 * The scale a y axis is drawn with: log when asked and some value can be
 * placed on it, linear otherwise (all values <= 0, or no data yet).
 */
export function drawnScale(requested: ScaleKind, drawn: number): ScaleKind {
  return requested === 'log' && drawn > 0 ? 'log' : 'linear';
}

/**
 * What a chart says under a log scale about the values it cannot place; null
 * when nothing is left out.
 */
export function logScaleNote(
  requested: ScaleKind,
  drawn: number,
  hidden: number
): string | null {
  if (requested !== 'log' || hidden === 0) {
    return null;
  }
  if (drawn === 0) {
    return 'no value > 0: shown on a linear scale';
  }
  return `${hidden} value${hidden === 1 ? '' : 's'} ≤ 0 not drawn`;
}
