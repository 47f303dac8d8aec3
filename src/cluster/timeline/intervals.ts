/**
 * The allocation timeline's data, as pure functions: the devices and the
 * intervals jobs held them (GET /allocations), a later answer over the
 * newest stretch merged in, a live `allocation` event appended, what left the
 * chosen range dropped. No DOM and no I/O.
 */
import type {
  IAllocationChange,
  IAllocationDevice,
  IAllocationInterval,
  IJobEvent
} from '../../api';

/** An interval's key on its device: whose it is and since when. */
export function intervalKey(interval: IAllocationInterval): string {
  return `${interval.job_id ?? ''}@${interval.start}`;
}

function byStart(a: IAllocationInterval, b: IAllocationInterval): number {
  return a.start - b.start || (a.job_id ?? '').localeCompare(b.job_id ?? '');
}

/** The newest change an interval knows of (its event id; -1: none). */
function newest(interval: IAllocationInterval): number {
  return Math.max(-1, ...interval.changes.map(c => c.event_id));
}

/**
 * `known` with a later answer merged in. The answer is the truth over its
 * range: it holds every interval that overlaps it, so each of its intervals
 * replaces the known one with the same key (one that has ended since, or has
 * changed again), unless the known one has heard of a newer change (a live
 * event that came before the answer); a known interval it does not hold is
 * kept (it ended before the answer's range). Devices: the answer's, in its
 * order (with what it says of them now), then any known device it does not
 * name.
 */
export function mergeAnswer(
  known: readonly IAllocationDevice[],
  answer: readonly IAllocationDevice[]
): IAllocationDevice[] {
  const old = new Map(known.map(d => [d.id, d]));
  const merged = answer.map(device => {
    const before = old.get(device.id);
    if (!before) {
      return device;
    }
    const kept = new Map(before.intervals.map(i => [intervalKey(i), i]));
    const intervals: IAllocationInterval[] = [];
    for (const interval of device.intervals) {
      const key = intervalKey(interval);
      const mine = kept.get(key);
      kept.delete(key);
      intervals.push(
        mine !== undefined && newest(mine) > newest(interval) ? mine : interval
      );
    }
    intervals.push(...kept.values());
    return { ...device, intervals: intervals.sort(byStart) };
  });
  const named = new Set(answer.map(d => d.id));
  return [...merged, ...known.filter(d => !named.has(d.id))];
}

/** The change an `allocation` event records, as the timeline keeps it. */
export function changeOf(event: IJobEvent): IAllocationChange | null {
  if (
    event.kind !== 'allocation' ||
    typeof event.id !== 'number' ||
    typeof event.time !== 'number' ||
    !event.job_id ||
    !Array.isArray(event.devices)
  ) {
    return null;
  }
  return {
    event_id: event.id,
    time: event.time,
    cause: event.cause ?? null,
    trigger: event.trigger ?? null,
    reason: event.reason ?? null,
    gpus: new Set(event.devices).size
  };
}

/**
 * `devices` with a live `allocation` event applied: the job holds the event's
 * devices from its time on. An interval it held on a device it no longer
 * names ends there, one on a device it keeps notes the change, and a device
 * it gains starts an interval (a device not known yet gets a row). Null when
 * the event is not an allocation or was already applied (a replay, or one
 * the answer already held).
 */
export function applyAllocation(
  devices: readonly IAllocationDevice[],
  event: IJobEvent,
  name: string | null = null
): IAllocationDevice[] | null {
  const change = changeOf(event);
  if (change === null) {
    return null;
  }
  const jobId = event.job_id as string;
  const seen = devices.some(d =>
    d.intervals.some(
      i =>
        i.job_id === jobId &&
        i.changes.some(c => c.event_id === change.event_id)
    )
  );
  if (seen) {
    return null;
  }
  const holds = new Set(event.devices);
  const out = devices.map(device => {
    let touched = false;
    const intervals = device.intervals.map(interval => {
      if (interval.job_id !== jobId || interval.end !== null) {
        return interval;
      }
      touched = true;
      return {
        ...interval,
        end: holds.has(device.id) ? null : change.time,
        changes: [...interval.changes, change]
      };
    });
    if (holds.has(device.id) && !touched) {
      intervals.push(opened(jobId, event.user ?? null, name, change));
      touched = true;
    }
    holds.delete(device.id);
    return touched ? { ...device, intervals } : device;
  });
  for (const id of holds) {
    out.push({
      id,
      node: null,
      index: null,
      name: null,
      present: true,
      intervals: [opened(jobId, event.user ?? null, name, change)]
    });
  }
  return out;
}

function opened(
  jobId: string,
  user: string | null,
  name: string | null,
  change: IAllocationChange
): IAllocationInterval {
  return {
    job_id: jobId,
    user,
    name,
    start: change.time,
    end: null,
    changes: [change]
  };
}

/** `devices` without the intervals that ended before `since`. */
export function dropBefore(
  devices: readonly IAllocationDevice[],
  since: number
): IAllocationDevice[] {
  return devices.map(device => {
    const kept = device.intervals.filter(i => i.end === null || i.end > since);
    return kept.length === device.intervals.length
      ? device
      : { ...device, intervals: kept };
  });
}
