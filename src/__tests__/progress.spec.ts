import type { IJobInfo, IMetricRecord, JobState } from '../api';
import {
  advanceProgress,
  describeProgress,
  type IJobProgress
} from '../jobs/progress';

type Job = Pick<IJobInfo, 'state' | 'spec'>;
const running: Job = { state: 'RUNNING', spec: {} };
const as = (state: JobState, spec: IJobInfo['spec'] = {}): Job => ({
  state,
  spec
});

/** The runtime's records: train_begin, then steps of an epoch of `perEpoch`. */
function trainBegin(change: Partial<IMetricRecord> = {}): IMetricRecord {
  return {
    type: 'train_begin',
    epoch: 0,
    global_step: 0,
    epochs: 200,
    steps_per_epoch: 8,
    ...change
  };
}
const step = (globalStep: number, perEpoch = 8): IMetricRecord => ({
  type: 'step',
  global_step: globalStep,
  epoch: Math.floor(globalStep / perEpoch),
  step: globalStep % perEpoch
});

describe('advanceProgress', () => {
  it("keeps the runtime's totals from train_begin", () => {
    const begun = advanceProgress(null, [trainBegin()]);
    expect(begun).toEqual({
      epoch: 0,
      stepsInEpoch: 0,
      steps: 0,
      epochsDone: 0,
      epochs: 200,
      stepsPerEpoch: 8,
      iteration: undefined
    });
    const stepped = advanceProgress(begun, [step(0), step(1), step(2)]);
    expect(stepped).toMatchObject({
      epoch: 0,
      stepsInEpoch: 3,
      steps: 3,
      epochs: 200,
      stepsPerEpoch: 8
    });
  });

  it('starts a resumed run where it resumes, and ignores an older start', () => {
    const resumed = advanceProgress(null, [
      trainBegin({ epoch: 5, global_step: 43 })
    ]);
    expect(resumed).toMatchObject({ epoch: 5, stepsInEpoch: 3, steps: 43 });
    const later = advanceProgress(resumed, [step(50)]);
    expect(advanceProgress(later, [trainBegin({ global_step: 8 })])).toEqual(
      later
    );
  });

  it('never goes back to an older step', () => {
    const later = advanceProgress(null, [step(13)]);
    expect(advanceProgress(later, [step(11)])).toBe(later);
  });

  it('learns the steps of an epoch when the first ends, without a train_begin', () => {
    const seen = advanceProgress(null, [
      step(0, 2),
      step(1, 2),
      { type: 'epoch', epoch: 0, val_loss: 0.8 },
      step(2, 2)
    ]);
    expect(seen).toMatchObject({
      epoch: 1,
      stepsInEpoch: 1,
      steps: 3,
      epochsDone: 1,
      epochs: null,
      stepsPerEpoch: 2
    });
  });

  it('counts the iterations of a program that reports only emetrics', () => {
    const emetrics = (iteration: number, group = 'train') => ({
      type: 'emetrics',
      group,
      iteration
    });
    const seen = advanceProgress(null, [emetrics(4), emetrics(2, 'test')]);
    expect(describeProgress(seen, running)).toEqual({
      text: 'iteration 4',
      fraction: null
    });
    const more = advanceProgress(seen, [emetrics(9)]);
    expect(describeProgress(more, running).text).toBe('iteration 9');
    // once the runtime's own step records arrive, they tell the progress
    const stepped = advanceProgress(seen, [step(7), emetrics(12)]);
    expect(describeProgress(stepped, running).text).toBe('epoch 1 · step 8');
  });
});

describe('describeProgress', () => {
  const at = (globalStep: number): IJobProgress | null =>
    advanceProgress(null, [trainBegin(), step(globalStep)]);

  it("reads epoch e/E · step s/S, with the runtime's totals and a bar", () => {
    expect(describeProgress(at(0), running)).toEqual({
      text: 'epoch 1/200 · step 1/8',
      fraction: 1 / 1600
    });
    // the step within the epoch, never the global step
    expect(describeProgress(at(53), running)).toEqual({
      text: 'epoch 7/200 · step 6/8',
      fraction: 54 / 1600
    });
    expect(describeProgress(at(1599), running)).toEqual({
      text: 'epoch 200/200 · step 8/8',
      fraction: 1
    });
  });

  it("takes the runtime's epochs over the submission's EDT_EPOCHS", () => {
    const job = as('RUNNING', { env: { EDT_EPOCHS: '3' } });
    expect(describeProgress(at(9), job).text).toBe('epoch 2/200 · step 2/8');
    // before the runtime said, the submission's
    const noTotals = advanceProgress(null, [step(9)]);
    expect(describeProgress(noTotals, job)).toEqual({
      text: 'epoch 2/3 · step 2',
      fraction: 0
    });
    expect(describeProgress(noTotals, running)).toEqual({
      text: 'epoch 2 · step 2',
      fraction: null
    });
  });

  it('says what a job with no step yet is doing, by its state', () => {
    expect(describeProgress(null, as('QUEUED'))).toEqual({
      text: 'waiting for GPUs',
      fraction: null
    });
    expect(describeProgress(null, running)).toEqual({
      text: 'waiting for the first step',
      fraction: null
    });
    const begun = advanceProgress(null, [trainBegin()]);
    expect(describeProgress(begun, running)).toEqual({
      text: 'waiting for the first step',
      fraction: 0
    });
    // a job that failed before its first step is not waiting
    expect(describeProgress(begun, as('FAILED'))).toEqual({
      text: 'failed before its first step',
      fraction: null
    });
    expect(describeProgress(null, as('FAILED')).text).toBe(
      'failed before its first step'
    );
    expect(describeProgress(null, as('CANCELLED')).text).toBe(
      'cancelled before its first step'
    );
    expect(describeProgress(null, as('SUCCEEDED'))).toEqual({
      text: 'done',
      fraction: 1
    });
  });

  it('keeps the last position of a finished job, full bar when it succeeded', () => {
    expect(describeProgress(at(1599), as('SUCCEEDED'))).toEqual({
      text: 'epoch 200/200 · step 8/8',
      fraction: 1
    });
    expect(describeProgress(at(53), as('CANCELLED'))).toEqual({
      text: 'epoch 7/200 · step 6/8',
      fraction: 54 / 1600
    });
  });
});
