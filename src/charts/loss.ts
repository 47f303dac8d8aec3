/**
 * The loss chart: train loss per step, validation loss and metrics per epoch,
 * and a WMLA program's emetrics (`train/<name>`, `test/<name>`) by iteration,
 * on the same step axis (metrics other than losses on a right-hand axis).
 * Used by the job widget and by the standalone `LossChart` widget.
 */
import { StreamingChart, type ISeriesSpec } from './chart';
import { alignSeries, type INamedSeries } from './series';

/**
 * Colours of the non-loss metric series, in turn (the themes' accent is the
 * success green: it comes last, so that two metrics, e.g. train and test
 * accuracy, differ).
 */
const METRIC_COLORS = [
  '--jp-success-color1',
  '--jp-error-color1',
  '--jp-info-color1',
  '--jp-accent-color1'
];

/** Colours of train and of validation loss series, in turn. */
const LOSS_COLORS = ['--jp-brand-color1', '--jp-info-color0'];
const VALIDATION_LOSS_COLORS = ['--jp-warn-color1', '--jp-error-color0'];

/** Whether a series is a loss (left axis) rather than a metric (right axis). */
export function isLossName(name: string): boolean {
  return /loss/i.test(name);
}

/**
 * Whether a series is a validation series (drawn with dots: one per epoch or
 * test run): `val_<name>`, or an emetrics `test/<name>`.
 */
export function isValidationName(name: string): boolean {
  return (
    name.startsWith('val_') ||
    name.startsWith('val ') ||
    name.startsWith('test/')
  );
}

/** How each named series is drawn, in the given order. */
export function lossSeriesSpecs(names: readonly string[]): ISeriesSpec[] {
  let metric = 0;
  let trainLoss = 0;
  let validationLoss = 0;
  return names.map(name => {
    const validation = isValidationName(name);
    if (isLossName(name)) {
      return {
        label: name,
        color: validation
          ? VALIDATION_LOSS_COLORS[
              validationLoss++ % VALIDATION_LOSS_COLORS.length
            ]
          : LOSS_COLORS[trainLoss++ % LOSS_COLORS.length],
        scale: 'y',
        width: validation ? 2 : 1.5,
        points: validation,
        dash: validation ? [6, 3] : undefined
      };
    }
    const color = METRIC_COLORS[metric++ % METRIC_COLORS.length];
    return {
      label: name,
      color,
      scale: 'y2',
      width: 1.5,
      points: validation,
      dash: validation ? [2, 3] : undefined
    };
  });
}

/** Options of a loss chart. */
export interface ILossChartOptions {
  /** Height in pixels (default 220). */
  height?: number;
  /** Label of the x axis (default "step"). */
  xLabel?: string;
}

/** A chart of named loss and metric series over steps. */
export class LossChart extends StreamingChart {
  constructor(options: ILossChartOptions = {}) {
    super({
      series: [],
      xLabel: options.xLabel ?? 'step',
      yLabel: 'loss',
      y2Label: 'metric',
      height: options.height ?? 220,
      ariaLabel: 'Loss chart'
    });
    this.node.classList.add('jp-edt-loss-chart');
  }

  /** Show these series (their names give their style). */
  update(series: readonly INamedSeries[]): void {
    this.setSeries(lossSeriesSpecs(series.map(s => s.name)));
    this.setData(alignSeries(series));
  }
}
