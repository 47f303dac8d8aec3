/**
 * Chart data built from the job's records: pure functions and small classes,
 * no DOM and no uPlot, so that they are tested on their own.
 */
import type { IMetricRecord } from '../api/types';
import { DEFAULT_MAX_POINTS, SeriesBuffer } from './downsample';

/** Fields of an `emetrics` record that are not values of the line. */
const EMETRICS_FIELDS = new Set([
  'type',
  'id',
  'time',
  'group',
  'iteration',
  'rindex',
  'subid'
]);

/**
 * The chart series of an `emetrics` record: `<group>/<name>` for each numeric
 * value (`train/loss`, `test/accuracy`, ...), at x = its iteration; none when
 * it has no group or iteration. String values are not plotted.
 */
export function emetricsPoints(
  record: IMetricRecord
): { name: string; x: number; y: number }[] {
  const { group, iteration } = record;
  if (typeof group !== 'string' || !group || !finite(iteration)) {
    return [];
  }
  const points: { name: string; x: number; y: number }[] = [];
  for (const [key, value] of Object.entries(record)) {
    if (!EMETRICS_FIELDS.has(key) && finite(value)) {
      points.push({ name: `${group}/${key}`, x: iteration, y: value });
    }
  }
  return points;
}

/** Where training is, from the last step record. */
export interface IProgress {
  epoch: number;
  /** Step within the epoch (0-based). */
  step: number;
  globalStep: number;
  /** Steps of a finished epoch, when one has finished. */
  stepsPerEpoch: number | null;
  /** Epochs finished (epoch records seen). */
  epochsDone: number;
  worldSize: number | null;
  samplesPerS: number | null;
  lastLoss: number | null;
}

/** Uplot's aligned data: x values first, then each series' y (null: no point). */
export type AlignedColumns = [number[], ...(number | null)[][]];

/** A named series of points (x increasing). */
export interface INamedSeries {
  name: string;
  x: readonly number[];
  y: readonly number[];
}

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * Join series with different x values on one sorted x axis (their union), for
 * uPlot's aligned data: each series has its y where it has a point and null
 * elsewhere. Each input's x must be increasing.
 */
export function alignSeries(series: readonly INamedSeries[]): AlignedColumns {
  const index = series.map(() => 0);
  const xs: number[] = [];
  const ys: (number | null)[][] = series.map(() => []);
  for (;;) {
    let next = Infinity;
    for (let s = 0; s < series.length; s++) {
      const i = index[s];
      if (i < series[s].x.length && series[s].x[i] < next) {
        next = series[s].x[i];
      }
    }
    if (next === Infinity) {
      break;
    }
    xs.push(next);
    for (let s = 0; s < series.length; s++) {
      const i = index[s];
      if (i < series[s].x.length && series[s].x[i] === next) {
        ys[s].push(series[s].y[i]);
        index[s] = i + 1;
      } else {
        ys[s].push(null);
      }
    }
  }
  return [xs, ...ys];
}

/** The train loss series' name. */
export const TRAIN_LOSS = 'loss';

/**
 * A job's loss curves: train loss per global step, per-epoch validation
 * values (`val_loss`, `val_<metric>`) placed at the epoch's last step, and a
 * WMLA program's emetrics (`train/<name>`, `test/<name>`) by iteration (its
 * count of completed batches), on the same x axis.
 *
 * Records may arrive twice (the metrics history, then the events feed replaying
 * the same records) and, after a recovery, again for steps already seen; they
 * are kept once: a step record only when its global step is beyond the last
 * one, an epoch record only when its epoch is beyond the last one, an emetrics
 * value only when its iteration is beyond its series' last one (which also
 * keeps one copy when several processes log the same iteration). (Training is
 * deterministic whatever the allocation, so a repeated step has the same loss.)
 */
export class LossSeries {
  constructor(maxPoints: number = DEFAULT_MAX_POINTS) {
    this.maxPoints = maxPoints;
    this.train = new SeriesBuffer(maxPoints);
  }

  readonly maxPoints: number;

  /** Train loss by global step. */
  readonly train: SeriesBuffer;

  /** Validation series by name (`val_loss`, `val_acc`, ...), by epoch end step. */
  readonly validation = new Map<string, SeriesBuffer>();

  /** Emetrics series by name (`train/loss`, `test/accuracy`, ...), by iteration. */
  readonly emetrics = new Map<string, SeriesBuffer>();

  /** Where training is; null before the first step record. */
  get progress(): IProgress | null {
    return this._progress;
  }

  /** Points held over all series. */
  get pointCount(): number {
    let count = this.train.length;
    for (const buffer of [
      ...this.validation.values(),
      ...this.emetrics.values()
    ]) {
      count += buffer.length;
    }
    return count;
  }

  /**
   * Add records, oldest first; other types (checkpoint, ...) are skipped.
   * True when something changed.
   */
  addRecords(records: readonly IMetricRecord[]): boolean {
    let changed = false;
    for (const record of records) {
      if (record.type === 'epoch') {
        changed = this._addEpoch(record) || changed;
      } else if (record.type === 'step') {
        changed = this._addStep(record) || changed;
      } else if (record.type === 'emetrics') {
        changed = this._addEmetrics(record) || changed;
      }
    }
    return changed;
  }

  /** The last emetrics iteration seen; null when none. */
  get lastIteration(): number | null {
    let last = -Infinity;
    for (const buffer of this.emetrics.values()) {
      last = Math.max(last, buffer.lastX);
    }
    return Number.isFinite(last) ? last : null;
  }

  /** The validation series' names, in the order first seen. */
  get validationNames(): string[] {
    return [...this.validation.keys()];
  }

  /**
   * Every series: train loss first (when the job has step records, or no
   * emetrics), then validation, then emetrics series in the order first seen.
   */
  series(): INamedSeries[] {
    const named = (entries: Map<string, SeriesBuffer>) =>
      [...entries].map(([name, buffer]) => ({
        name,
        x: buffer.x,
        y: buffer.y
      }));
    // A WMLA program's own loop reports only emetrics: no empty "loss" series.
    const train =
      this.train.length > 0 || this.emetrics.size === 0
        ? [{ name: TRAIN_LOSS, x: this.train.x, y: this.train.y }]
        : [];
    return [...train, ...named(this.validation), ...named(this.emetrics)];
  }

  /** Aligned data for the chart. */
  columns(): AlignedColumns {
    return alignSeries(this.series());
  }

  private _addStep(record: IMetricRecord): boolean {
    const globalStep = record.global_step;
    if (!finite(globalStep) || globalStep <= this.train.lastX) {
      return false;
    }
    const epoch = finite(record.epoch) ? record.epoch : 0;
    const step = finite(record.step) ? record.step : 0;
    this._epochLastStep.set(epoch, globalStep);
    if (finite(record.loss)) {
      this.train.push(globalStep, record.loss);
    } else {
      // Keep the step known (progress, de-duplication) without a point.
      this._lastStepWithoutLoss = globalStep;
    }
    const previous = this._progress;
    this._progress = {
      epoch,
      step,
      globalStep,
      stepsPerEpoch: previous?.stepsPerEpoch ?? null,
      epochsDone: previous?.epochsDone ?? 0,
      worldSize: finite(record.world_size)
        ? record.world_size
        : (previous?.worldSize ?? null),
      samplesPerS: finite(record.samples_per_s) ? record.samples_per_s : null,
      lastLoss: finite(record.loss) ? record.loss : (previous?.lastLoss ?? null)
    };
    return true;
  }

  private _addEpoch(record: IMetricRecord): boolean {
    const epoch = record.epoch;
    if (!finite(epoch) || epoch <= this._lastEpoch) {
      return false;
    }
    this._lastEpoch = epoch;
    const x = this._epochX(epoch);
    for (const [key, value] of Object.entries(record)) {
      if (!key.startsWith('val_') || !finite(value)) {
        continue;
      }
      let buffer = this.validation.get(key);
      if (!buffer) {
        buffer = new SeriesBuffer(this.maxPoints);
        this.validation.set(key, buffer);
      }
      if (x > buffer.lastX) {
        buffer.push(x, value);
      }
    }
    const lastStep = this._epochLastStep.get(epoch);
    const progress = this._progress;
    if (progress) {
      this._progress = {
        ...progress,
        epochsDone: epoch + 1,
        stepsPerEpoch:
          lastStep !== undefined && epoch === 0
            ? lastStep + 1
            : progress.stepsPerEpoch
      };
    } else {
      this._progress = {
        epoch,
        step: 0,
        globalStep: Math.max(0, x),
        stepsPerEpoch: null,
        epochsDone: epoch + 1,
        worldSize: finite(record.world_size) ? record.world_size : null,
        samplesPerS: null,
        lastLoss: null
      };
    }
    return true;
  }

  private _addEmetrics(record: IMetricRecord): boolean {
    let changed = false;
    for (const { name, x, y } of emetricsPoints(record)) {
      let buffer = this.emetrics.get(name);
      if (!buffer) {
        buffer = new SeriesBuffer(this.maxPoints);
        this.emetrics.set(name, buffer);
      }
      if (x > buffer.lastX) {
        buffer.push(x, y);
        changed = true;
      }
    }
    return changed;
  }

  /** The x of an epoch's validation: its last step, else the last step known. */
  private _epochX(epoch: number): number {
    const known = this._epochLastStep.get(epoch);
    if (known !== undefined) {
      return known;
    }
    const last = Math.max(this.train.lastX, this._lastStepWithoutLoss);
    return Number.isFinite(last) ? last : epoch;
  }

  private _epochLastStep = new Map<number, number>();
  private _lastEpoch = -Infinity;
  private _lastStepWithoutLoss = -Infinity;
  private _progress: IProgress | null = null;
}

/**
 * The GPU count of a job over time, as a step line: each change is a point
 * (time in seconds, count).
 */
export class AllocationSeries {
  constructor(maxPoints: number = DEFAULT_MAX_POINTS) {
    this.points = new SeriesBuffer(maxPoints);
  }

  readonly points: SeriesBuffer;

  /** Number of changes held. */
  get length(): number {
    return this.points.length;
  }

  /** The count now (last point), or null when none. */
  get current(): number | null {
    const { y } = this.points;
    return y.length > 0 ? y[y.length - 1] : null;
  }

  /**
   * Record the count at `time`; a point earlier than the last is ignored
   * (replayed), one with the same count as the last adds nothing.
   */
  add(time: number, count: number): boolean {
    if (!finite(time) || !finite(count) || time < this.points.lastX) {
      return false;
    }
    if (this.current === count) {
      return false;
    }
    this.points.push(time, count);
    return true;
  }

  /**
   * Aligned data: the changes, and when `until` is given (a running job: now),
   * the last count held until then, so the line reaches the present.
   */
  columns(until?: number | null): AlignedColumns {
    const x = [...this.points.x];
    const y: (number | null)[] = [...this.points.y];
    if (
      until !== undefined &&
      until !== null &&
      x.length > 0 &&
      until > x[x.length - 1]
    ) {
      x.push(until);
      y.push(y[y.length - 1]);
    }
    return [x, y];
  }
}
