/**
 * What the allocation timeline says in words: a bar's job, its interval, and
 * each change with what it did and what prompted it. Pure, tested on its own.
 */
import type { IAllocationChange, IAllocationInterval } from '../../api';
import { formatClock } from '../../format';

function gpus(n: number): string {
  return `${n} GPU${n === 1 ? '' : 's'}`;
}

/** What a change did to its job, e.g. "shrank to 1 GPU". */
export function describeCause(change: IAllocationChange): string {
  const n = gpus(change.gpus);
  switch (change.cause) {
    case 'start':
      return `started on ${n}`;
    case 'grow':
      return `grew to ${n}`;
    case 'shrink':
      return `shrank to ${n}`;
    case 'move':
      return `moved (${n})`;
    case 'device_lost':
      return `lost a device (${n} left)`;
    case 'node_drain':
      return `moved off a draining node (${n})`;
    case 'suspend':
      return 'suspended: released its GPUs';
    case 'lost':
      return 'its processes were lost: released its GPUs';
    case 'end':
      return 'ended: released its GPUs';
    default:
      return change.gpus > 0 ? `held ${n}` : 'released its GPUs';
  }
}

/** What prompted a change, e.g. "a job arrived"; null when nothing is known. */
export function describeTrigger(change: IAllocationChange): string | null {
  switch (change.trigger) {
    case 'arrival':
      return 'a job arrived';
    case 'departure':
      return 'a job left';
    case 'priority':
      return 'a priority changed';
    case 'limits':
      return "a job's max GPUs changed";
    case 'quota':
      return 'the quotas changed';
    case 'devices':
      return 'the devices changed';
    case null:
    case undefined:
      return null;
    default:
      return String(change.trigger);
  }
}

/**
 * One change as a line: when, what it did, what prompted it, and the job's
 * own sentence when it says more (e.g. "14:03:05 shrank to 1 GPU, as a job
 * arrived"; "14:09:40 ended: released its GPUs (cancelled by ana)").
 */
export function describeChange(change: IAllocationChange): string {
  let line = `${formatClock(change.time)} ${describeCause(change)}`;
  const trigger = describeTrigger(change);
  if (trigger !== null) {
    line += `, as ${trigger}`;
  }
  const reason = change.reason?.trim();
  if (reason && !SAID.test(reason)) {
    line += ` (${clip(reason, REASON_LENGTH)})`;
  }
  return line;
}

/** The job's sentences that say no more than `describeCause`. */
const SAID =
  /^(admitted|grown to \d+ GPU\(s\)|shrunk to \d+ GPU\(s\)|moved to \d+ GPU\(s\))$/;

/** The most of a job's own sentence a line quotes (a failure's may be long). */
const REASON_LENGTH = 120;

function clip(text: string, length: number): string {
  return text.length <= length ? text : `${text.slice(0, length - 1)}…`;
}

/** Whose a bar is: "train [3f2a9c1e07b4]", or "held" for another user's job. */
export function describeJob(
  interval: IAllocationInterval,
  name: string | null = null
): string {
  if (interval.job_id === null) {
    return "held by another user's job";
  }
  const shown = interval.name ?? name;
  return shown ? `${shown} [${interval.job_id}]` : `job ${interval.job_id}`;
}

/** A duration in words: "45 s", "12 min", "3 h 20 min", "2 d 4 h". */
export function describeDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.round(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    const rest = minutes % 60;
    return rest ? `${hours} h ${rest} min` : `${hours} h`;
  }
  const days = Math.floor(hours / 24);
  const rest = hours % 24;
  return rest ? `${days} d ${rest} h` : `${days} d`;
}

/**
 * A bar's interval: "14:00:05 – 14:20:10 (20 min)", or "14:00:05 – now
 * (held 20 min)" while still held at `now`. A span over a day names the days.
 */
export function describeInterval(
  interval: IAllocationInterval,
  now: number
): string {
  const end = interval.end ?? now;
  const days = end - interval.start >= 86400;
  const clock = (t: number) =>
    days
      ? `${formatClock(t, 'days')} ${formatClock(t, 'minutes')}`
      : formatClock(t);
  const length = describeDuration(end - interval.start);
  return interval.end === null
    ? `${clock(interval.start)} – now (held ${length})`
    : `${clock(interval.start)} – ${clock(interval.end)} (${length})`;
}

/** What hovering a bar shows. */
export interface ITooltip {
  /** The job, e.g. "train [3f2a9c1e07b4]". */
  title: string;
  /** Its user; null for another user's job. */
  user: string | null;
  /** Its interval on the device. */
  interval: string;
  /** Each change while it held the device, oldest first. */
  changes: string[];
}

/** The tooltip of a bar on device `device`. */
export function tooltipOf(
  interval: IAllocationInterval,
  device: string,
  now: number,
  name: string | null = null
): ITooltip {
  return {
    title: describeJob(interval, name),
    user: interval.user,
    interval: `${device}: ${describeInterval(interval, now)}`,
    changes: interval.changes.map(describeChange)
  };
}
