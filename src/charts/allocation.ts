/**
 * The allocation timeline: a job's GPU count over time, as a step line, with
 * its maximum as a dashed line.
 */
import { StreamingChart } from './chart';
import type { AlignedColumns } from './series';

/** Options of an allocation timeline. */
export interface IAllocationTimelineOptions {
  /** Height in pixels (default 110). */
  height?: number;
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
      time: true,
      yLabel: 'GPUs',
      height: options.height ?? 110,
      yRange: (_min, max) => [0, Math.max(1, Math.ceil(max)) + 0.5],
      ariaLabel: 'GPU allocation over time'
    });
    this.node.classList.add('jp-edt-allocation-chart');
  }

  /**
   * Show the counts (columns of `AllocationSeries.columns`) and the job's
   * maximum as a constant line.
   */
  update(columns: AlignedColumns, maxGpus: number | null): void {
    const [x, counts] = columns;
    const max = x.map(() => maxGpus);
    this.setData([x, counts ?? [], max]);
  }
}
