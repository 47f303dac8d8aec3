/**
 * What an empty chart says instead of a blank area: why it has nothing to
 * show yet, or never will. Pure, tested on its own.
 */
import type { JobState } from '../api';

/** What the loss chart of a job in `state` (null: not loaded yet) says before any point. */
export function lossChartEmptyText(state: JobState | null): string {
  switch (state) {
    case 'FAILED':
      return 'failed before its first step';
    case 'CANCELLED':
      return 'cancelled before its first step';
    case 'SUCCEEDED':
      return 'finished without reporting a loss';
    case 'QUEUED':
      return 'no step yet: waiting for GPUs';
    case 'STARTING':
      return 'no step yet: starting';
    default:
      return 'no step yet';
  }
}

/** What the GPU timeline of a job in `state` says before any allocation. */
export function timelineEmptyText(state: JobState | null): string {
  switch (state) {
    case 'SUCCEEDED':
    case 'FAILED':
    case 'CANCELLED':
      return 'held no GPU';
    case 'QUEUED':
      return 'no GPU yet: waiting for GPUs';
    default:
      return 'no GPU held yet';
  }
}
