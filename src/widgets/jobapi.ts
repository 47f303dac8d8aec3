/**
 * The parts of the REST and WebSocket API the job widget uses
 * (docs/openapi.yaml), through the page's server connection settings.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_NAMESPACE, requestAPI } from '../api';
import type { IMetricRecord } from '../charts/series';

export type { IMetricRecord } from '../charts/series';

/** A job's state (JobState). */
export type JobState =
  | 'QUEUED'
  | 'STARTING'
  | 'RUNNING'
  | 'SUSPENDED'
  | 'SUCCEEDED'
  | 'FAILED'
  | 'CANCELLED';

/** States a job does not leave. */
export const TERMINAL_STATES: ReadonlySet<string> = new Set([
  'SUCCEEDED',
  'FAILED',
  'CANCELLED'
]);

/** A job as GET jobs/{id} describes it. */
export interface IJobInfo {
  id: string;
  user: string;
  name: string;
  state: JobState;
  reason: string;
  spec: { env?: Record<string, string>; [key: string]: unknown };
  min_gpus: number;
  max_gpus: number;
  priority: number;
  devices: string[];
  rescaled: number | null;
  created: number;
  updated: number;
  finished: number | null;
  /**
   * The job's program announced the elastic runtime, so the scheduler resizes it
   * in place. False: a rigid job (yet), kept on the GPUs it started with.
   */
  elastic: boolean;
  /** Times it went back to the queue after its driver died. */
  restarts: number;
}

/**
 * The job after an event that may change whether it is elastic or how often it
 * restarted: an `elastic` event, or a `state` event (a start makes it rigid
 * until it announces itself again; a requeue after its driver died counts).
 */
export function withRuntimeChange<T extends IJobInfo>(
  job: T,
  event: IJobEvent
): T {
  const elastic =
    event.kind === 'elastic' || event.kind === 'state'
      ? (event.elastic ?? job.elastic)
      : job.elastic;
  const restarts =
    event.kind === 'state' ? (event.restarts ?? job.restarts) : job.restarts;
  return elastic === job.elastic && restarts === job.restarts
    ? job
    : { ...job, elastic, restarts };
}

/** How a job runs, in words for a label and its tooltip. */
export function runtimeMode(job: Pick<IJobInfo, 'elastic' | 'restarts'>): {
  label: string;
  title: string;
} {
  const restarted =
    job.restarts > 0
      ? ` Restarted ${job.restarts} time(s) from its checkpoint after its driver died.`
      : '';
  return job.elastic
    ? {
        label: 'elastic',
        title: `Elastic: its GPUs grow and shrink in place.${restarted}`
      }
    : {
        label: 'rigid',
        title:
          'Rigid: its program does not use the elastic runtime (or has not ' +
          'started it yet), so it keeps the GPUs it started with and cannot ' +
          `checkpoint when preempted.${restarted}`
      };
}

/** Planned epochs when the job's spec says (EDT_EPOCHS). */
export function plannedEpochs(job: Pick<IJobInfo, 'spec'>): number | null {
  const value = Number(job.spec?.env?.EDT_EPOCHS);
  return Number.isInteger(value) && value > 0 ? value : null;
}

/** One page of GET jobs/{id}/metrics. */
export interface IMetricsPage {
  metrics: IMetricRecord[];
  cursor: number;
}

/** A chunk of one log (GET jobs/{id}/logs?name=...). */
export interface ILogChunk {
  name: string;
  text: string;
  offset: number;
  next_offset: number;
  size: number;
}

/** One message of the events WebSocket. */
export interface IJobEvent {
  id?: number;
  kind:
    | 'state'
    | 'allocation'
    | 'limits'
    | 'elastic'
    | 'metrics'
    | 'keepalive'
    | string;
  job_id?: string;
  time?: number;
  user?: string;
  state?: JobState;
  reason?: string;
  devices?: string[];
  priority?: number;
  max_gpus?: number;
  elastic?: boolean;
  restarts?: number;
  records?: IMetricRecord[];
}

/** What the job controller needs from the server (a fake in tests). */
export interface IJobApi {
  getJob(jobId: string): Promise<IJobInfo>;
  getMetrics(jobId: string, after: number): Promise<IMetricsPage>;
  getLogNames(jobId: string): Promise<string[]>;
  getLog(jobId: string, name: string, tail: number): Promise<ILogChunk>;
  patchJob(
    jobId: string,
    change: { priority?: number; max_gpus?: number }
  ): Promise<IJobInfo>;
  cancelJob(jobId: string): Promise<IJobInfo>;
}

/** The minimal WebSocket the event stream uses (a fake in tests). */
export interface ISocketLike {
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: unknown) => void) | null;
  onerror: ((event: unknown) => void) | null;
  close(): void;
}

/** Opens the events WebSocket after an event id, for one job. */
export type SocketFactory = (after: number, jobId: string) => ISocketLike;

function jobPath(jobId: string, ...rest: string[]): string {
  return ['jobs', encodeURIComponent(jobId), ...rest].join('/');
}

function query(params: Record<string, string | number>): string {
  return URLExt.objectToQueryString(params);
}

/** The REST calls, with the page's settings (or the given ones). */
export function restJobApi(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): IJobApi {
  return {
    getJob: jobId =>
      requestAPI<IJobInfo>(jobPath(jobId), { method: 'GET' }, settings),
    getMetrics: (jobId, after) =>
      requestAPI<IMetricsPage>(
        jobPath(jobId, 'metrics') + query({ after }),
        { method: 'GET' },
        settings
      ),
    getLogNames: async jobId =>
      (
        await requestAPI<{ logs: string[] }>(
          jobPath(jobId, 'logs'),
          { method: 'GET' },
          settings
        )
      ).logs,
    getLog: (jobId, name, tail) =>
      requestAPI<ILogChunk>(
        jobPath(jobId, 'logs') + query({ name, tail }),
        { method: 'GET' },
        settings
      ),
    patchJob: (jobId, change) =>
      requestAPI<IJobInfo>(
        jobPath(jobId),
        { method: 'PATCH', body: JSON.stringify(change) },
        settings
      ),
    cancelJob: jobId =>
      requestAPI<IJobInfo>(jobPath(jobId), { method: 'DELETE' }, settings)
  };
}

/**
 * The events WebSocket URL below the server's base URL: `after` resumes the
 * feed; `job_id` names the job so a server that filters by it sends less (the
 * client filters anyway); the token is appended when the settings say so, as
 * JupyterLab does for kernel sockets.
 */
export function eventsUrl(
  settings: ServerConnection.ISettings,
  after: number,
  jobId?: string
): string {
  const params: Record<string, string | number> = { after };
  if (jobId) {
    params.job_id = jobId;
  }
  if (settings.token && settings.appendToken) {
    params.token = settings.token;
  }
  return URLExt.join(settings.wsUrl, API_NAMESPACE, 'events') + query(params);
}

/** Opens real WebSockets with the page's settings. */
export function webSocketFactory(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): SocketFactory {
  return (after, jobId) =>
    new settings.WebSocket(eventsUrl(settings, after, jobId)) as ISocketLike;
}
