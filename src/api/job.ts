/** What the front end derives from a job record, in one place. */
import type { IJobEvent, IJobInfo } from './types';

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

/** How a job runs, in words for a label and its tooltip. */
export function runtimeMode(job: Pick<IJobInfo, 'elastic' | 'restarts'>): {
  label: string;
  title: string;
} {
  const restarted =
    job.restarts > 0
      ? ` Restarted ${job.restarts} time(s) from its checkpoint after its driver died.`
      : '';
  return job.elastic
    ? {
        label: 'elastic',
        title: `Elastic: its GPUs grow and shrink in place.${restarted}`
      }
    : {
        label: 'rigid',
        title:
          'Rigid: its program does not use the elastic runtime (or has not ' +
          'started it yet), so it keeps the GPUs it started with and cannot ' +
          `checkpoint when preempted.${restarted}`
      };
}

/** Planned epochs when the job's spec says (EDT_EPOCHS). */
export function plannedEpochs(job: Pick<IJobInfo, 'spec'>): number | null {
  const value = Number(job.spec?.env?.EDT_EPOCHS);
  return Number.isInteger(value) && value > 0 ? value : null;
}
