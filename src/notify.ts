/**
 * Which finished jobs deserve a notification, and what it says. Pure, so the
 * rule (my jobs only, a transition seen live, not a replay) is tested alone.
 */
import type { IJobFinished } from './sidebar/jobstate';

/** A notification to show: its kind and message. */
export interface IJobNotice {
  type: 'success' | 'error' | 'info';
  message: string;
}

/**
 * The notice for a finished job, or null: only the user's own jobs (an admin
 * watching everyone's is not told of other people's), only when enabled.
 */
export function jobNotice(
  finished: IJobFinished,
  user: string | null,
  enabled: boolean
): IJobNotice | null {
  const { job } = finished;
  if (!enabled || user === null || job.user !== user) {
    return null;
  }
  const name = `${job.name || 'Job'} [${job.id}]`;
  switch (job.state) {
    case 'SUCCEEDED':
      return { type: 'success', message: `${name} finished.` };
    case 'FAILED': {
      const reason = (job.reason || '').split('\n')[0].slice(0, 100);
      return {
        type: 'error',
        message: reason ? `${name} failed: ${reason}` : `${name} failed.`
      };
    }
    case 'CANCELLED':
      return { type: 'info', message: `${name} was cancelled.` };
    default:
      return null;
  }
}
