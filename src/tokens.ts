/**
 * What the Elastic Training extension offers other extensions, and the ids
 * its plugins share.
 */
import { Token } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';

import type { IEdtUser, IJobInfo, IJobSubmission } from './api';
import type { JobsModel } from './jobs/model';

/** Command ids of the extension. */
export namespace CommandIDs {
  export const openSidebar = 'jupyter-edt:open-sidebar';
  export const openJob = 'jupyter-edt:open-job';
  export const submitFile = 'jupyter-edt:submit-file';
  export const openCluster = 'jupyter-edt:open-cluster';
  export const openTimeline = 'jupyter-edt:open-allocation-timeline';
}

/**
 * The training jobs: what jobs exist, open one, submit one. The sidebar, the
 * cluster view, the notifications and the file browser's "Submit as Elastic
 * Job…" use it; so may other extensions.
 */
export interface IEdtJobs {
  /**
   * The jobs the user may see (`model.state.jobs`), with `changed` after every
   * change and `finished` when a watched job ends. It is live (its events
   * connection open) while someone watches it and the page is visible.
   */
  readonly model: JobsModel;

  /** Who the caller is to the job service; null when it could not be read. */
  readonly user: Promise<IEdtUser | null>;

  /** Keep the job list live until the returned disposable is disposed. */
  watch(): IDisposable;

  /** Open a job in its main-area tab (or bring that tab to the front). */
  open(jobId: string): Promise<void>;

  /** Submit a job (POST /jobs) and answer it as the service recorded it. */
  submit(spec: IJobSubmission): Promise<IJobInfo>;
}

/** The token of the training jobs, for other extensions to require. */
export const IEdtJobs = new Token<IEdtJobs>(
  'jupyter-edt:IEdtJobs',
  'The Elastic Training jobs: what jobs exist, open a job, submit a job.'
);
