/**
 * Where a job's training is, and how every surface (sidebar row, job tab,
 * notebook widget) says it: `epoch e/E · step s/S`, where "step" is the step
 * within the epoch and the totals are those the runtime reported when training
 * began (its `train_begin` record: `fit()`'s arguments after any submission
 * override), so one wording and one bar everywhere. Pure functions.
 */
import {
  plannedEpochs,
  type IJobInfo,
  type IMetricRecord,
  type JobState
} from '../api';

/** Where a job's training is, from its metric records. */
export interface IJobProgress {
  /** The epoch under way (0-based). */
  epoch: number;
  /** Steps done in that epoch. */
  stepsInEpoch: number;
  /** Steps done in all (the next global step). */
  steps: number;
  /** Epochs finished (epoch records seen). */
  epochsDone: number;
  /** The epochs it trains for, as the runtime said (`train_begin`); null when not said. */
  epochs: number | null;
  /**
   * Steps an epoch has: as the runtime said (`train_begin`), else counted when
   * the first epoch ended; null until then.
   */
  stepsPerEpoch: number | null;
  /**
   * The last iteration of a program that reports only WMLA emetrics records
   * (no runtime step or epoch records): its progress is this iteration.
   */
  iteration?: number;
}

/** What a progress line says, and the fraction done when it can be told. */
export interface IProgressText {
  text: string;
  /** 0-1; null when the totals are unknown (no bar). */
  fraction: number | null;
}

function whole(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

function positive(value: unknown): value is number {
  return whole(value) && value > 0;
}

const START: IJobProgress = {
  epoch: 0,
  stepsInEpoch: 0,
  steps: 0,
  epochsDone: 0,
  epochs: null,
  stepsPerEpoch: null
};

/** Progress after a `train_begin` record: the totals, and where a resumed run starts. */
function afterTrainBegin(
  progress: IJobProgress | null,
  record: IMetricRecord
): IJobProgress {
  const base = progress ?? START;
  const epochs = positive(record.epochs) ? record.epochs : base.epochs;
  const perEpoch = positive(record.steps_per_epoch)
    ? record.steps_per_epoch
    : base.stepsPerEpoch;
  const out = { ...base, epochs, stepsPerEpoch: perEpoch };
  const from = record.global_step;
  if (!whole(from) || from < base.steps) {
    return out; // an older run's start, or a worker's that joined late
  }
  const epoch = whole(record.epoch) ? record.epoch : base.epoch;
  return {
    ...out,
    iteration: undefined,
    epoch,
    steps: from,
    stepsInEpoch: perEpoch !== null ? Math.max(0, from - epoch * perEpoch) : 0
  };
}

/**
 * Progress after these metric records: the runtime's `train_begin` (totals),
 * `step` and `epoch` records, else the iterations of `emetrics` records (a WMLA
 * program's own metrics). A step behind the one known is a replay: ignored.
 */
export function advanceProgress(
  progress: IJobProgress | null,
  records: readonly IMetricRecord[]
): IJobProgress | null {
  let out = progress;
  for (const record of records) {
    if (record.type === 'train_begin') {
      out = afterTrainBegin(out, record);
    } else if (record.type === 'step' && whole(record.global_step)) {
      const steps = record.global_step + 1;
      if (out !== null && steps < out.steps) {
        continue;
      }
      const base = out ?? START;
      out = {
        ...base,
        iteration: undefined,
        epoch: whole(record.epoch) ? record.epoch : base.epoch,
        stepsInEpoch: whole(record.step) ? record.step + 1 : base.stepsInEpoch,
        steps
      };
    } else if (record.type === 'epoch' && whole(record.epoch)) {
      const base = out ?? { ...START, epoch: record.epoch };
      out = {
        ...base,
        iteration: undefined,
        epochsDone: Math.max(base.epochsDone, record.epoch + 1),
        stepsPerEpoch:
          base.stepsPerEpoch ??
          (base.epoch === record.epoch && base.stepsInEpoch > 0
            ? base.stepsInEpoch
            : null)
      };
    } else if (record.type === 'emetrics' && whole(record.iteration)) {
      if (out === null) {
        out = { ...START, iteration: record.iteration };
      } else if (out.iteration !== undefined) {
        out = { ...out, iteration: Math.max(out.iteration, record.iteration) };
      }
    }
  }
  return out;
}

/** What a job that has made no step yet is doing, by its state. */
const BEFORE_FIRST_STEP: Record<JobState, string> = {
  QUEUED: 'waiting for GPUs',
  STARTING: 'waiting for the first step',
  RUNNING: 'waiting for the first step',
  SUSPENDED: 'suspended before its first step',
  SUCCEEDED: 'done',
  FAILED: 'failed before its first step',
  CANCELLED: 'cancelled before its first step'
};

/**
 * The progress line of a job: `epoch e/E · step s/S` (s counts the steps done
 * in epoch e), with the bar's fraction when the totals are known. The totals
 * are the runtime's (`train_begin`); before it speaks, the epochs a submission
 * set (EDT_EPOCHS). A job with no step yet says what it is doing instead, by
 * its state: a job that failed before its first step says so.
 */
export function describeProgress(
  progress: IJobProgress | null,
  job: Pick<IJobInfo, 'state' | 'spec'>
): IProgressText {
  const succeeded = job.state === 'SUCCEEDED';
  if (progress?.iteration !== undefined) {
    return {
      text: `iteration ${progress.iteration}`,
      fraction: succeeded ? 1 : null
    };
  }
  const epochs = progress?.epochs ?? plannedEpochs(job);
  const perEpoch = progress?.stepsPerEpoch ?? null;
  if (progress === null || progress.steps === 0) {
    const known = epochs !== null && perEpoch !== null;
    return {
      text: BEFORE_FIRST_STEP[job.state] ?? '',
      fraction: succeeded ? 1 : known && !isEnded(job.state) ? 0 : null
    };
  }
  const epochText = `epoch ${progress.epoch + 1}${epochs !== null ? `/${epochs}` : ''}`;
  const stepText = `step ${progress.stepsInEpoch}${perEpoch !== null ? `/${perEpoch}` : ''}`;
  let fraction: number | null = null;
  if (succeeded) {
    fraction = 1;
  } else if (epochs !== null && perEpoch !== null) {
    fraction = Math.min(1, progress.steps / (epochs * perEpoch));
  } else if (epochs !== null) {
    fraction = Math.min(1, progress.epochsDone / epochs);
  }
  return { text: `${epochText} · ${stepText}`, fraction };
}

function isEnded(state: JobState): boolean {
  return state === 'FAILED' || state === 'CANCELLED';
}
