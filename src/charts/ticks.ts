/**
 * Where an axis puts its ticks: "nice" values, 1, 2 or 5 times a power of ten
 * on a linear axis, powers of ten (and 2 and 5 times them when few) on a log
 * axis, whole seconds, minutes, hours or days on a time axis. Pure: the chart
 * (chart.ts) hands them to uPlot, and jest tests them.
 */
import type { ClockPrecision } from '../format';

/** Tolerance of the float comparisons below (relative to a step or a decade). */
const EPSILON = 1e-9;

/** A float cleaned of its rounding noise: 0.30000000000000004 -> 0.3. */
export function cleanFloat(value: number): number {
  const rounded = Number(value.toPrecision(15));
  return rounded === 0 ? 0 : rounded; // no -0
}

/** How many tick labels fit `length` pixels, `spacing` pixels apart (at least 2). */
export function tickBudget(length: number, spacing: number): number {
  if (!(length > 0) || !(spacing > 0)) {
    return 2;
  }
  return Math.max(2, Math.floor(length / spacing));
}

/**
 * The smallest of 1, 2 or 5 times a power of ten that cuts `span` into at
 * most `intervals` pieces.
 */
export function niceStep(span: number, intervals: number): number {
  if (!(span > 0) || !Number.isFinite(span)) {
    return 1;
  }
  const raw = span / Math.max(1, Math.floor(intervals));
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const multiple of [1, 2, 5]) {
    const step = cleanFloat(multiple * power);
    if (step >= raw * (1 - EPSILON)) {
      return step;
    }
  }
  return cleanFloat(10 * power);
}

/** Options of linear ticks. */
export interface ILinearTickOptions {
  /** Whole numbers only (steps, GPU counts): the step is at least 1. */
  integer?: boolean;
}

/** How many multiples of `step` lie in [min, max]. */
function multiplesIn(min: number, max: number, step: number): number {
  return Math.floor(max / step + EPSILON) - Math.ceil(min / step - EPSILON) + 1;
}

/**
 * The step of linear ticks over [min, max]: the smallest nice step (whole
 * when `integer`) with at most `maxTicks` multiples in the range.
 */
export function tickStep(
  min: number,
  max: number,
  maxTicks: number,
  integer = false
): number {
  const budget = Math.max(1, Math.floor(maxTicks));
  let step = niceStep(max - min, budget);
  if (integer) {
    step = Math.max(1, step);
  }
  while (multiplesIn(min, max, step) > budget) {
    step = niceStep(step * (1 + 1e-6), 1); // the next nice step
  }
  return step;
}

/**
 * At most `maxTicks` nice values in [min, max], in increasing order: the
 * multiples of a `tickStep`. One value when min equals max; none when either
 * is not a number.
 */
export function linearTicks(
  min: number,
  max: number,
  maxTicks: number,
  options: ILinearTickOptions = {}
): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) {
    return [];
  }
  if (max < min) {
    [min, max] = [max, min];
  }
  if (min === max) {
    return options.integer && !Number.isInteger(min) ? [] : [cleanFloat(min)];
  }
  const step = tickStep(min, max, maxTicks, options.integer ?? false);
  const first = Math.ceil(min / step - EPSILON);
  const last = Math.floor(max / step + EPSILON);
  const ticks: number[] = [];
  for (let k = first; k <= last; k++) {
    ticks.push(cleanFloat(k * step));
  }
  return ticks;
}

/**
 * Ticks of a log axis over [min, max] (min > 0): powers of ten, every one or
 * every n-th so that at most `maxTicks` show; with room to spare, also 2 and 5
 * times them; within less than a decade, linear ticks. None when min is not
 * positive.
 */
export function logTicks(min: number, max: number, maxTicks: number): number[] {
  if (!(min > 0) || !Number.isFinite(max) || max < min) {
    return [];
  }
  const budget = Math.max(2, Math.floor(maxTicks));
  const low = Math.ceil(Math.log10(min) - EPSILON);
  const high = Math.floor(Math.log10(max) + EPSILON);
  const decades = high - low + 1;
  if (decades * 3 <= budget) {
    const ticks: number[] = [];
    for (let k = low - 1; k <= high; k++) {
      for (const multiple of [1, 2, 5]) {
        const value = cleanFloat(multiple * 10 ** k);
        if (value >= min * (1 - EPSILON) && value <= max * (1 + EPSILON)) {
          ticks.push(value);
        }
      }
    }
    if (ticks.length >= 2) {
      return ticks;
    }
  }
  if (decades >= 2) {
    const every = Math.ceil(decades / budget);
    const ticks: number[] = [];
    for (let k = low; k <= high; k++) {
      if (k % every === 0) {
        ticks.push(cleanFloat(10 ** k));
      }
    }
    return ticks;
  }
  // Less than a decade (or one power of ten): linear ticks read best.
  return linearTicks(min, max, budget).filter(value => value > 0);
}

/** The steps of a time axis, in seconds. */
const TIME_STEPS = [
  1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
  43200, 86400, 172800, 604800
];

const DAY = 86400;

/** The offset of the browser's time zone from UTC at `time`, in seconds. */
export function localUtcOffset(time: number): number {
  return -new Date(time * 1000).getTimezoneOffset() * 60;
}

/** Ticks of a time axis and how precisely their labels need to read. */
export interface ITimeTicks {
  /** Seconds since the epoch, increasing. */
  ticks: number[];
  /** Seconds between two ticks. */
  step: number;
  /** What a label shows: seconds below a minute's step, days from a day's. */
  precision: ClockPrecision;
}

/**
 * At most `maxTicks` wall times in [min, max] (seconds since the epoch), on
 * whole seconds, minutes, hours or days of the time zone `utcOffset` seconds
 * east of UTC (the browser's by default): 14:00, 14:15, 14:30 rather than
 * 14:03:17.
 */
export function timeTicks(
  min: number,
  max: number,
  maxTicks: number,
  utcOffset: number = localUtcOffset(min)
): ITimeTicks {
  if (!Number.isFinite(min) || !Number.isFinite(max) || max < min) {
    return { ticks: [], step: 1, precision: 'seconds' };
  }
  const intervals = Math.max(1, Math.floor(maxTicks) - 1);
  const span = max - min;
  let step = TIME_STEPS.find(s => span / s <= intervals);
  if (step === undefined) {
    const week = TIME_STEPS[TIME_STEPS.length - 1];
    step = Math.ceil(span / intervals / week) * week;
  }
  const first =
    Math.ceil((min + utcOffset) / step - EPSILON) * step - utcOffset;
  const ticks: number[] = [];
  for (let t = first; t <= max + EPSILON; t += step) {
    ticks.push(t);
  }
  const precision: ClockPrecision =
    step < 60 ? 'seconds' : step < DAY ? 'minutes' : 'days';
  return { ticks, step, precision };
}
