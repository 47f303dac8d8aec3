/**
 * The allocation timeline's list of changes: each allocation event that
 * changed the job's GPU count, as "when, from, to". Pure, tested on its own.
 */

/** One change of a job's GPU count. */
export interface IAllocationChange {
  /** Seconds since the epoch. */
  time: number;
  /** GPUs before (null for the first allocation). */
  from: number | null;
  to: number;
}

/** The changes in a count series (x: times, y: counts), newest first. */
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
  return out.reverse();
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
  const date = new Date(seconds * 1000);
  return [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map(v => String(v).padStart(2, '0'))
    .join(':');
}
