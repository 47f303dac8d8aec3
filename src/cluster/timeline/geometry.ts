/**
 * The allocation timeline's geometry, as pure functions: time to x, a row per
 * device grouped by node, the bars (a job's adjacent intervals on a device
 * merged into one), their colours, the time axis' ticks. The view
 * (view.ts) draws what these compute; jest tests them.
 */
import type { IAllocationDevice, IAllocationInterval } from '../../api';
import { formatClock } from '../../format';
import { tickBudget, timeTicks } from '../../charts/ticks';

/** The time range a timeline shows, and the pixels it spans. */
export interface ITimeScale {
  /** Seconds since the epoch at x0 and x1. */
  since: number;
  until: number;
  /** Pixels: where `since` and `until` fall. */
  x0: number;
  x1: number;
}

/** Where `time` falls, clamped to the scale's pixels. */
export function timeToX(time: number, scale: ITimeScale): number {
  const span = scale.until - scale.since;
  if (!(span > 0)) {
    return scale.x0;
  }
  const share = Math.min(1, Math.max(0, (time - scale.since) / span));
  return scale.x0 + share * (scale.x1 - scale.x0);
}

/** The time at pixel `x` (unclamped). */
export function xToTime(x: number, scale: ITimeScale): number {
  const width = scale.x1 - scale.x0;
  if (!(width > 0)) {
    return scale.since;
  }
  return scale.since + ((x - scale.x0) / width) * (scale.until - scale.since);
}

/**
 * Where the drawn time axis starts: the range's start, or, when every hold in
 * the range began later, a little before the first (a twentieth of the time
 * since, at least `pad` seconds), so that a young history fills the width
 * instead of a sliver at its right edge.
 */
export function fitSince(
  devices: readonly IAllocationDevice[],
  since: number,
  now: number,
  pad = 2
): number {
  let first = Infinity;
  for (const device of devices) {
    for (const interval of device.intervals) {
      if (interval.end === null || interval.end > since) {
        first = Math.min(first, interval.start);
      }
    }
  }
  if (!Number.isFinite(first) || first <= since) {
    return since;
  }
  return Math.max(since, first - Math.max(pad, (now - first) / 20));
}

/** A row of the timeline: a node's heading, or one device. */
export type TimelineRow =
  | { kind: 'node'; label: string; y: number; height: number }
  | {
      kind: 'device';
      label: string;
      device: IAllocationDevice;
      y: number;
      height: number;
    };

/** Sizes of the rows, in pixels. */
export interface IRowSizes {
  /** A device's row (default 22). */
  device?: number;
  /** A node's heading (default 18). */
  node?: number;
}

/** The heading of the devices that are gone (their node left). */
export const GONE_LABEL = 'no longer present';

/** What a device's row is labelled: its index on its node, else its id. */
export function deviceLabel(device: IAllocationDevice): string {
  return device.index !== null ? `GPU ${device.index}` : device.id;
}

/**
 * One row per device, grouped by node (in the order nodes first appear; the
 * devices that are gone last), each group under a heading row; and the
 * height of them all.
 */
export function layoutRows(
  devices: readonly IAllocationDevice[],
  sizes: IRowSizes = {}
): { rows: TimelineRow[]; height: number } {
  const deviceHeight = sizes.device ?? 22;
  const nodeHeight = sizes.node ?? 18;
  const groups = new Map<string | null, IAllocationDevice[]>();
  for (const device of devices) {
    const node = device.present ? device.node : null;
    const group = groups.get(node) ?? [];
    group.push(device);
    groups.set(node, group);
  }
  const order = [...groups.keys()].sort(
    (a, b) => Number(a === null) - Number(b === null)
  );
  const rows: TimelineRow[] = [];
  let y = 0;
  for (const node of order) {
    rows.push({
      kind: 'node',
      label: node ?? GONE_LABEL,
      y,
      height: nodeHeight
    });
    y += nodeHeight;
    for (const device of groups.get(node) ?? []) {
      rows.push({
        kind: 'device',
        label: deviceLabel(device),
        device,
        y,
        height: deviceHeight
      });
      y += deviceHeight;
    }
  }
  return { rows, height: y };
}

/**
 * A device's intervals with each run of one job's intervals that touch (the
 * next starts at most `tolerance` seconds after one ends) merged into one,
 * with the changes of all; the intervals of jobs the caller may not see
 * (null ids) merge with each other the same way: all are "held".
 */
export function mergeAdjacent(
  intervals: readonly IAllocationInterval[],
  tolerance = 0
): IAllocationInterval[] {
  const out: IAllocationInterval[] = [];
  for (const interval of [...intervals].sort((a, b) => a.start - b.start)) {
    const last = out[out.length - 1];
    if (
      last !== undefined &&
      last.job_id === interval.job_id &&
      last.end !== null &&
      interval.start - last.end <= tolerance
    ) {
      const end =
        interval.end === null ? null : Math.max(last.end, interval.end);
      const seen = new Set(last.changes.map(c => c.event_id));
      out[out.length - 1] = {
        ...last,
        end,
        changes: [
          ...last.changes,
          ...interval.changes.filter(c => !seen.has(c.event_id))
        ]
      };
    } else {
      out.push(interval);
    }
  }
  return out;
}

/** How many colours jobs are told apart by (`--jp-edt-job-color-0` ...). */
export const PALETTE_SIZE = 10;

/** A string's 32-bit FNV-1a hash: the same job gets the same colour anywhere. */
export function hashString(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

/**
 * A colour index for each job, in the order given (the first shown first):
 * the one its id hashes to, or, when a job before it took that one, the next
 * free one; once every colour is taken, the hashed one again.
 */
export function assignColours(
  jobIds: readonly string[],
  size = PALETTE_SIZE
): Map<string, number> {
  const out = new Map<string, number>();
  const taken = new Set<number>();
  for (const id of jobIds) {
    if (out.has(id)) {
      continue;
    }
    const preferred = hashString(id) % size;
    let colour = preferred;
    if (taken.size < size) {
      while (taken.has(colour)) {
        colour = (colour + 1) % size;
      }
    }
    out.set(id, colour);
    taken.add(colour);
  }
  return out;
}

/** The CSS colour of a job's bars; the grey of "held" for another user's. */
export function barColour(colour: number | null): string {
  return colour === null
    ? 'var(--jp-edt-timeline-held-color)'
    : `var(--jp-edt-job-color-${colour})`;
}

/** One bar: a job's hold on one device, where it is drawn. */
export interface IBar {
  key: string;
  deviceId: string;
  /** Null for a job the caller may not see. */
  jobId: string | null;
  /** The merged interval it shows (its start and end unclipped). */
  interval: IAllocationInterval;
  x: number;
  width: number;
  y: number;
  height: number;
  /** A colour index (`barColour`); null for another user's job. */
  colour: number | null;
}

/** Options of `layoutBars`. */
export interface IBarOptions {
  /** The end of an interval still held (the server's now). */
  now: number;
  /** Pixels left free above and below a bar in its row (default 3). */
  inset?: number;
  /** The narrowest bar, so that a short hold shows (default 2 px). */
  minWidth?: number;
}

/** The jobs the rows show, in the order their first bar starts. */
export function jobsShown(rows: readonly TimelineRow[]): string[] {
  const first = new Map<string, number>();
  for (const row of rows) {
    if (row.kind !== 'device') {
      continue;
    }
    for (const interval of row.device.intervals) {
      if (interval.job_id !== null) {
        const start = first.get(interval.job_id);
        if (start === undefined || interval.start < start) {
          first.set(interval.job_id, interval.start);
        }
      }
    }
  }
  return [...first.entries()]
    .sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))
    .map(([id]) => id);
}

/**
 * The bars of the device rows within the scale's range: each device's
 * intervals merged where one job's touch (within a pixel's time), clipped to
 * the range (one still held runs to `now`), at least `minWidth` wide, inset
 * in its row; coloured by `colours` (another user's job: null).
 */
export function layoutBars(
  rows: readonly TimelineRow[],
  scale: ITimeScale,
  colours: ReadonlyMap<string, number>,
  options: IBarOptions
): IBar[] {
  const inset = options.inset ?? 3;
  const minWidth = options.minWidth ?? 2;
  const width = scale.x1 - scale.x0;
  const pixel = width > 0 ? (scale.until - scale.since) / width : 0;
  const bars: IBar[] = [];
  for (const row of rows) {
    if (row.kind !== 'device') {
      continue;
    }
    for (const interval of mergeAdjacent(row.device.intervals, pixel)) {
      const end = interval.end ?? Math.max(options.now, interval.start);
      if (end < scale.since || interval.start > scale.until) {
        continue;
      }
      const x = timeToX(interval.start, scale);
      const right = Math.max(timeToX(end, scale), x + minWidth);
      bars.push({
        key: `${row.device.id}/${interval.job_id ?? ''}@${interval.start}`,
        deviceId: row.device.id,
        jobId: interval.job_id,
        interval,
        x,
        width: Math.min(right, scale.x1) - x,
        y: row.y + inset,
        height: Math.max(1, row.height - 2 * inset),
        colour:
          interval.job_id === null
            ? null
            : (colours.get(interval.job_id) ?? null)
      });
    }
  }
  return bars;
}

/** A tick of the time axis. */
export interface IAxisTick {
  x: number;
  label: string;
}

/**
 * The time axis' ticks over the scale: whole seconds, minutes, hours or days
 * (charts/ticks.ts), about `spacing` pixels apart at least, labelled as the
 * other charts label wall time (formatClock).
 */
export function axisTicks(scale: ITimeScale, spacing = 80): IAxisTick[] {
  const budget = tickBudget(scale.x1 - scale.x0, spacing);
  const { ticks, precision } = timeTicks(scale.since, scale.until, budget);
  return ticks.map(time => ({
    x: timeToX(time, scale),
    label: formatClock(time, precision)
  }));
}
