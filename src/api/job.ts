/** What the front end derives from a job record, in one place. */
import {
  JOB_KINDS,
  type IJobEvent,
  type IJobInfo,
  type JobKind
} from './types';

/**
 * The job after an event that may change whether it is elastic or how often it
 * restarted: an `elastic` event, or a `state` event (a start makes it rigid
 * until it announces itself again; a requeue after its driver died counts).
 */
export function withRuntimeChange<T extends IJobInfo>(
  job: T,
  event: IJobEvent
): T {
  const elastic =
    event.kind === 'elastic' || event.kind === 'state'
      ? (event.elastic ?? job.elastic)
      : job.elastic;
  const restarts =
    event.kind === 'state' ? (event.restarts ?? job.restarts) : job.restarts;
  return elastic === job.elastic && restarts === job.restarts
    ? job
    : { ...job, elastic, restarts };
}

/** What a resize does to the job; a record stored before jobs had kinds is elastic. */
export function jobKind(job: Pick<IJobInfo, 'spec'>): JobKind {
  const kind = job.spec?.kind;
  return kind && (JOB_KINDS as readonly string[]).includes(kind)
    ? kind
    : 'elastic';
}

/** Planned epochs when the job's spec says (EDT_EPOCHS). */
export function plannedEpochs(job: Pick<IJobInfo, 'spec'>): number | null {
  const value = Number(job.spec?.env?.EDT_EPOCHS);
  return Number.isInteger(value) && value > 0 ? value : null;
}
