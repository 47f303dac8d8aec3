/**
 * What a job row offers, from its hover buttons and its context menu alike:
 * open the job, cancel it (confirmed first), change its max GPUs, copy its id.
 * Each change goes through the REST client and its answer is put in the job
 * list at once. Dialogs and the clipboard are passed in, so tests answer them.
 */
import { Clipboard, showErrorMessage } from '@jupyterlab/apputils';

import {
  TERMINAL_STATES,
  reasonMessage,
  type IJobApi,
  type IJobInfo
} from '../api';
import { askMaxGpusDialog, confirmCancelDialog } from '../jobpanel/dialogs';
import type { JobsModel } from '../jobs/model';

/** The actions on one job, by its id. */
export interface IJobActions {
  /** Whether the job can still be cancelled or resized (it has not ended). */
  isActive(jobId: string): boolean;
  open(jobId: string): void;
  /** Ask first; cancel only when the user confirms. */
  cancel(jobId: string): Promise<void>;
  /** Ask for the new most GPUs the job may hold, then set it. */
  changeMaxGpus(jobId: string): Promise<void>;
  copyId(jobId: string): void;
}

/** What the actions need. */
export interface IJobActionsOptions {
  /** The job list: where the jobs are read, and each answer is put. */
  jobs: JobsModel;
  /** The REST calls: `cancelJob` cancels, `patchJob` changes max GPUs. */
  api: Pick<IJobApi, 'cancelJob' | 'patchJob'>;
  open: (jobId: string) => void;
  /** Ask whether to cancel the job (`name`: its name and id). */
  confirmCancel?: (name: string) => Promise<boolean>;
  /** Ask for the job's new max GPUs; null: the user gave up. */
  askMaxGpus?: (current: number) => Promise<number | null>;
  copy?: (text: string) => void;
  /** Tell the user why an action failed. */
  alert?: (title: string, message: string) => Promise<unknown>;
}

/** A job as its dialogs name it: "digits [a1b2c3]". */
export function jobLabel(job: Pick<IJobInfo, 'name' | 'id'>): string {
  return `${job.name || 'job'} [${job.id}]`;
}

/** The row actions over the job list and the REST client. */
export function createJobActions(options: IJobActionsOptions): IJobActions {
  const {
    jobs,
    api,
    open,
    confirmCancel = confirmCancelDialog,
    askMaxGpus = askMaxGpusDialog,
    copy = text => Clipboard.copyToSystem(text),
    alert = showErrorMessage
  } = options;
  const jobOf = (jobId: string): IJobInfo | null =>
    jobs.state.jobs.get(jobId)?.job ?? null;
  const activeJob = (jobId: string): IJobInfo | null => {
    const job = jobOf(jobId);
    return job && !TERMINAL_STATES.has(job.state) ? job : null;
  };
  /** Make the change, and show its answer in the list (or why it failed). */
  const change = async (
    title: string,
    call: () => Promise<IJobInfo>
  ): Promise<void> => {
    try {
      jobs.update(await call());
    } catch (reason) {
      await alert(title, reasonMessage(reason));
    }
  };
  return {
    isActive: jobId => activeJob(jobId) !== null,
    open,
    async cancel(jobId) {
      const job = activeJob(jobId);
      if (job && (await confirmCancel(jobLabel(job)))) {
        await change('The job was not cancelled', () => api.cancelJob(jobId));
      }
    },
    async changeMaxGpus(jobId) {
      const job = activeJob(jobId);
      const value = job ? await askMaxGpus(job.max_gpus) : null;
      if (job && value !== null && value !== job.max_gpus) {
        await change('Max GPUs was not changed', () =>
          api.patchJob(jobId, { max_gpus: value })
        );
      }
    },
    copyId: jobId => copy(jobId)
  };
}
