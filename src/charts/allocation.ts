/**
 * The allocation timeline: a job's GPU count over wall time, as a step line,
 * with its maximum as a dashed line; once the job has released its GPUs
 * (SUCCEEDED, FAILED, CANCELLED) the line drops to 0 and shows 0 for a while.
 */
import { StreamingChart } from './chart';
import type { AlignedColumns } from './series';

/** Options of an allocation timeline. */
export interface IAllocationTimelineOptions {
  /** Height in pixels (default 130). */
  height?: number;
}

/** A job that released its GPUs: it reached a terminal state. */
export interface IRelease {
  /** When (seconds since the epoch; the job's finish); null: at its last change. */
  time: number | null;
}

/** The shortest stretch at 0 shown after a release, in seconds. */
const MIN_RELEASE_TAIL = 1;

/** The stretch at 0 after a release, as a share of the timeline before it. */
const RELEASE_TAIL_SHARE = 0.04;

/**
 * How long a released job's timeline shows at 0 after `releasedAt`: a step
 * line's last value has no width, so without it the drop would sit on the
 * chart's right edge and the line would look held to the end.
 */
export function releaseTail(start: number, releasedAt: number): number {
  return Math.max(MIN_RELEASE_TAIL, (releasedAt - start) * RELEASE_TAIL_SHARE);
}

/**
 * The timeline's columns: x (times), the GPU count, the maximum. `changes`
 * are the count's changes (`AllocationSeries.columns`); a released job's
 * count drops to 0 at its release (unless already 0) and holds 0 over a
 * `releaseTail`, where the maximum, no longer in force, has no value.
 */
export function timelineColumns(
  changes: AlignedColumns,
  maxGpus: number | null,
  release: IRelease | null = null
): AlignedColumns {
  const x = [...changes[0]];
  const counts: (number | null)[] = [...(changes[1] ?? x.map(() => null))];
  const max: (number | null)[] = x.map(() => maxGpus);
  if (release === null || x.length === 0) {
    return [x, counts, max];
  }
  const last = x[x.length - 1];
  let releasedAt = Math.max(release.time ?? last, last);
  if (counts[counts.length - 1] !== 0) {
    if (releasedAt === last) {
      // Released the moment it last changed: a second later, to show both.
      releasedAt = last + MIN_RELEASE_TAIL;
    }
    x.push(releasedAt);
    counts.push(0);
    max.push(maxGpus);
  }
  x.push(releasedAt + releaseTail(x[0], releasedAt));
  counts.push(0);
  max.push(null);
  return [x, counts, max];
}

/** The GPU count of a job over time. */
export class AllocationTimeline extends StreamingChart {
  constructor(options: IAllocationTimelineOptions = {}) {
    super({
      series: [
        {
          label: 'GPUs',
          color: '--jp-brand-color1',
          stepped: true,
          fill: true
        },
        {
          label: 'max GPUs',
          color: '--jp-ui-font-color3',
          stepped: true,
          dash: [4, 4],
          width: 1
        }
      ],
      xKind: 'time',
      xLabel: 'time',
      yLabel: 'GPUs',
      yInteger: true,
      height: options.height ?? 130,
      yRange: (_min, max) => [0, Math.max(1, Math.ceil(max)) + 0.5],
      ariaLabel: 'GPU allocation over time',
      emptyText: 'no GPU held yet'
    });
    this.node.classList.add('jp-edt-allocation-chart');
  }

  /**
   * Show the counts (columns of `AllocationSeries.columns`) and the job's
   * maximum as a constant line; `release` once the job released its GPUs.
   */
  update(
    columns: AlignedColumns,
    maxGpus: number | null,
    release: IRelease | null = null
  ): void {
    this.setData(timelineColumns(columns, maxGpus, release));
  }
}
