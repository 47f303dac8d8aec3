/**
 * The job list's client-side state, as pure functions: a snapshot from
 * GET /jobs, then each event of the events WebSocket applied in order. No DOM
 * and no I/O, so that replays, races and filters are tested on their own.
 */
import {
  TERMINAL_STATES,
  withRuntimeChange,
  type IJobEvent,
  type IJobInfo,
  type JobState
} from '../api';
import { advanceProgress, type IJobProgress } from './progress';

/** One row of the job list. */
export interface IJobRow {
  job: IJobInfo;
  progress: IJobProgress | null;
}

/** The jobs by id. */
export type JobMap = ReadonlyMap<string, IJobRow>;

/** A job that reached a final state while it was watched. */
export interface IJobFinished {
  job: IJobInfo;
  previous: JobState;
}

/** What applying one event did. */
export interface IApplyResult {
  jobs: JobMap;
  /** Whether the list changed. */
  changed: boolean;
  /** The event names a job the list does not hold (fetch it). */
  unknownJob: string | null;
  /** The job finished with this event (a transition, not a replay). */
  finished: IJobFinished | null;
}

/** The list from a snapshot, keeping the progress already known. */
export function fromSnapshot(jobs: readonly IJobInfo[], old?: JobMap): JobMap {
  const out = new Map<string, IJobRow>();
  for (const job of jobs) {
    out.set(job.id, { job, progress: old?.get(job.id)?.progress ?? null });
  }
  return out;
}

/** Add or replace one job (a GET answer, an action's answer). */
export function upsertJob(jobs: JobMap, job: IJobInfo): JobMap {
  const out = new Map(jobs);
  out.set(job.id, { job, progress: jobs.get(job.id)?.progress ?? null });
  return out;
}

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * Apply one event. The feed replays history from the cursor: an event older
 * than the job's snapshot (`time < job.updated`) changes nothing but progress,
 * so a replay never rolls a job back nor counts as it finishing.
 */
export function applyEvent(jobs: JobMap, event: IJobEvent): IApplyResult {
  const unchanged = {
    jobs,
    changed: false,
    unknownJob: null,
    finished: null
  };
  const id = event.job_id;
  if (!id || event.kind === 'keepalive') {
    return unchanged;
  }
  const row = jobs.get(id);
  if (!row) {
    const known = ['state', 'allocation', 'limits', 'elastic'].includes(
      event.kind
    );
    return { ...unchanged, unknownJob: known ? id : null };
  }
  const { job } = row;
  const time = finite(event.time) ? event.time : Infinity;
  const current = time >= job.updated;
  let next: IJobRow = row;
  let finished: IJobFinished | null = null;
  switch (event.kind) {
    case 'metrics':
      next = {
        ...row,
        progress: advanceProgress(row.progress, event.records ?? [])
      };
      break;
    case 'elastic':
      if (current) {
        next = { ...row, job: withRuntimeChange(job, event) };
      }
      break;
    case 'state':
      if (current && event.state && event.state !== job.state) {
        const terminal = TERMINAL_STATES.has(event.state);
        const updated: IJobInfo = {
          ...withRuntimeChange(job, event),
          state: event.state,
          reason: event.reason ?? job.reason,
          updated: finite(event.time) ? event.time : job.updated,
          finished: terminal ? (event.time ?? job.finished) : job.finished,
          devices: terminal ? [] : job.devices
        };
        next = { ...row, job: updated };
        if (terminal && !TERMINAL_STATES.has(job.state)) {
          finished = { job: updated, previous: job.state };
        }
      }
      break;
    case 'allocation':
      if (current && Array.isArray(event.devices)) {
        next = {
          ...row,
          job: {
            ...job,
            devices: event.devices,
            rescaled: event.time ?? job.rescaled,
            updated: finite(event.time) ? event.time : job.updated
          }
        };
      }
      break;
    case 'limits':
      if (current) {
        next = {
          ...row,
          job: {
            ...job,
            max_gpus: event.max_gpus ?? job.max_gpus,
            priority: event.priority ?? job.priority,
            updated: finite(event.time) ? event.time : job.updated
          }
        };
      }
      break;
    default:
      return unchanged;
  }
  if (next === row) {
    return unchanged;
  }
  const out = new Map(jobs);
  out.set(id, next);
  return { jobs: out, changed: true, unknownJob: null, finished };
}

/** Which jobs the list shows. */
export interface IJobFilter {
  /** Only the user's own jobs, or everyone's the user may see (admins). */
  scope: 'mine' | 'all';
  /** 'active' (not finished), 'finished', 'all', or one state. */
  state: 'all' | 'active' | 'finished' | JobState;
}

/** The default filter: my jobs, every state. */
export const DEFAULT_FILTER: IJobFilter = { scope: 'mine', state: 'all' };

/** The filter's state choices, in menu order. */
export const STATE_CHOICES: readonly IJobFilter['state'][] = [
  'all',
  'active',
  'finished',
  'QUEUED',
  'STARTING',
  'RUNNING',
  'SUSPENDED',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED'
];

/** A filter from stored JSON, falling back to the default for what is wrong. */
export function parseFilter(value: unknown): IJobFilter {
  const raw = (value ?? {}) as Partial<Record<keyof IJobFilter, unknown>>;
  const scope = raw.scope === 'all' ? 'all' : 'mine';
  const state = STATE_CHOICES.includes(raw.state as IJobFilter['state'])
    ? (raw.state as IJobFilter['state'])
    : 'all';
  return { scope, state };
}

/** The rows to show for `user`, newest first. */
export function visibleJobs(
  jobs: JobMap,
  filter: IJobFilter,
  user: string | null
): IJobRow[] {
  const rows = [...jobs.values()].filter(({ job }) => {
    if (filter.scope === 'mine' && user !== null && job.user !== user) {
      return false;
    }
    const terminal = TERMINAL_STATES.has(job.state);
    switch (filter.state) {
      case 'all':
        return true;
      case 'active':
        return !terminal;
      case 'finished':
        return terminal;
      default:
        return job.state === filter.state;
    }
  });
  return rows.sort(
    (a, b) => b.job.created - a.job.created || (a.job.id < b.job.id ? 1 : -1)
  );
}

/** Seconds a job has run (or ran): from creation to its end, or to `now`. */
export function elapsedSeconds(job: IJobInfo, now: number): number {
  const end = job.finished ?? now;
  return Math.max(0, end - job.created);
}

/** "42 s", "3 min 05 s", "2 h 07 min", "3 d 4 h". */
export function formatDuration(seconds: number): string {
  const s = Math.floor(Math.max(0, seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  }
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}
