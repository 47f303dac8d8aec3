/**
 * The allocation timeline's list of changes: each allocation event that
 * changed the job's GPU count, as "when, from, to", and each restart of a
 * restart job's workers. Pure, tested on its own.
 */
import type { JobKind } from '../api';
import { formatClock } from '../format';

/** One change of a job's GPU count. */
export interface IAllocationChange {
  /** Seconds since the epoch. */
  time: number;
  /** GPUs before (null for the first allocation). */
  from: number | null;
  to: number;
}

/** The changes in a count series (x: times, y: counts), oldest first. */
export function allocationChanges(
  times: readonly number[],
  counts: readonly number[]
): IAllocationChange[] {
  const out: IAllocationChange[] = [];
  let previous: number | null = null;
  const n = Math.min(times.length, counts.length);
  for (let i = 0; i < n; i++) {
    if (counts[i] !== previous) {
      out.push({ time: times[i], from: previous, to: counts[i] });
      previous = counts[i];
    }
  }
  return out;
}

/** A group the job's workers formed (a `formed` event). */
export interface IFormedGroup {
  /** Seconds since the epoch. */
  time: number;
  world_size: number;
  /** The survivors' pause for it, in seconds. */
  pause_s: number;
  /** How long the allocation before it waited for it (null: none did). */
  waited_s: number | null;
}

/**
 * Each change (oldest first, as `allocationChanges` gives them) with the group
 * that formed on it: the first of that size after it and before the next
 * change; null while none has.
 */
export function withFormedGroups(
  changes: readonly IAllocationChange[],
  groups: readonly IFormedGroup[]
): (IAllocationChange & { formed: IFormedGroup | null })[] {
  return changes.map((change, i) => {
    const next = i + 1 < changes.length ? changes[i + 1].time : Infinity;
    const formed =
      groups.find(
        g =>
          g.time >= change.time && g.time < next && g.world_size === change.to
      ) ?? null;
    return { ...change, formed };
  });
}

/**
 * "training after 0.26 s (pause 0.04 s)". A restart job's workers all restart,
 * so no survivor pauses: its groups say only when training resumed.
 */
export function describeFormed(
  group: IFormedGroup,
  kind: JobKind = 'elastic'
): string {
  // A number and its unit never part at the end of a line.
  const seconds = (s: number): string =>
    `${s < 10 ? s.toFixed(2) : s.toFixed(0)}\u00a0s`;
  const pause = kind === 'restart' ? '' : ` (pause ${seconds(group.pause_s)})`;
  return group.waited_s === null
    ? `trained on${pause}`
    : `training after ${seconds(group.waited_s)}${pause}`;
}

/** A restart of every worker of a restart job (a `restart` event). */
export interface IRestart {
  /** The event's id; null when it had none. */
  id: number | null;
  /** Seconds since the epoch. */
  time: number;
  /** How many times the workers were restarted, this one included. */
  count: number;
  /** Why: 'resize' or 'failure'. */
  cause: string;
  /** The size every worker restarted at; null when not said. */
  world_size: number | null;
  /** Workers killed after the grace: their steps since the last checkpoint are lost. */
  killed: string[];
  /** What it did and lost, as the server words it. */
  reason: string;
}

/** "restart 1 · resize → 2 GPUs", and "· ⚠ killed w1 (steps lost)" when some were. */
export function describeRestart(restart: IRestart): string {
  const { count, cause, world_size: size, killed } = restart;
  const why = [
    cause,
    size === null ? '' : `→ ${size} GPU${size === 1 ? '' : 's'}`
  ];
  const parts = [`restart ${count}`, why.filter(Boolean).join(' ')];
  if (killed.length > 0) {
    parts.push(`⚠ killed ${killed.join(', ')} (steps lost)`);
  }
  return parts.filter(Boolean).join(' · ');
}

/** "grew 2 → 4", "shrank 4 → 2", "started on 4", "released 2". */
export function describeChange(change: IAllocationChange): string {
  const { from, to } = change;
  if (from === null || from === 0) {
    return to === 0 ? 'no GPUs' : `started on ${to} GPU${to === 1 ? '' : 's'}`;
  }
  if (to === 0) {
    return `released ${from} GPU${from === 1 ? '' : 's'}`;
  }
  return `${to > from ? 'grew' : 'shrank'} ${from} → ${to}`;
}

/** A local clock time, HH:MM:SS. */
export function clockTime(seconds: number): string {
  return formatClock(seconds, 'seconds');
}
