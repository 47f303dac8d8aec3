/**
 * The loss chart: train loss per step, validation loss and metrics per epoch,
 * and a WMLA program's emetrics (`train/<name>`, `test/<name>`) by iteration,
 * on the same step axis (metrics other than losses on a right-hand axis).
 * Used by the job widget and by the standalone `LossChart` widget. The loss
 * axis may be log: every loss chart follows one shared choice (preference.ts).
 */
import { el } from '../dom';
import { StreamingChart, type ISeriesSpec } from './chart';
import { lossChartEmptyText } from './empty';
import { lossScale, type ScalePreference } from './preference';
import type { ScaleKind } from './scale';
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
  /**
   * The scale the chart follows and its toggle sets; by default the one every
   * loss chart shares (`lossScale`, kept in the settings).
   */
  scale?: ScalePreference;
}

/**
 * A chart of named loss and metric series over steps, with a "log scale"
 * toggle for the loss axis (the metrics' axis stays linear).
 */
export class LossChart extends StreamingChart {
  constructor(options: ILossChartOptions = {}) {
    const scale = options.scale ?? lossScale;
    super({
      series: [],
      xKind: 'step',
      xLabel: options.xLabel ?? 'step',
      yLabel: 'loss',
      y2Label: 'metric',
      yScale: scale.value,
      height: options.height ?? 220,
      ariaLabel: 'Loss chart',
      emptyText: lossChartEmptyText(null)
    });
    this.node.classList.add('jp-edt-loss-chart');
    this._scale = scale;

    const toolbar = el('div', 'jp-edt-chart-toolbar');
    const toggle = el('label', 'jp-edt-chart-scale-toggle');
    toggle.title =
      'Draw the loss on a log axis (every loss chart follows, and it is remembered)';
    this._logToggle = el('input', 'jp-edt-chart-log-toggle');
    this._logToggle.type = 'checkbox';
    this._logToggle.checked = scale.value === 'log';
    this._logToggle.addEventListener('change', () => {
      this._scale.value = this._logToggle.checked ? 'log' : 'linear';
    });
    toggle.append(this._logToggle, document.createTextNode(' log scale'));
    this._note = el('span', 'jp-edt-chart-note');
    toolbar.append(this._note, toggle);
    this.node.prepend(toolbar);
    this._showNote();
    scale.changed.connect(this._onScaleChanged, this);
  }

  /** Show these series (their names give their style). */
  update(series: readonly INamedSeries[]): void {
    this.setSeries(lossSeriesSpecs(series.map(s => s.name)));
    this.setData(alignSeries(series));
    this._showNote();
  }

  dispose(): void {
    this._scale.changed.disconnect(this._onScaleChanged, this);
    super.dispose();
  }

  private _onScaleChanged(_: ScalePreference, value: ScaleKind): void {
    this._logToggle.checked = value === 'log';
    this.setYScale(value);
    this._showNote();
  }

  private _showNote(): void {
    const note = this.scaleNote;
    this._note.textContent = note ?? '';
    this._note.hidden = note === null;
  }

  private readonly _scale: ScalePreference;
  private readonly _logToggle: HTMLInputElement;
  private readonly _note: HTMLSpanElement;
}
