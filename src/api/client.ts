/**
 * The one REST client of the front end: every call of the jupyter-edt REST API
 * (docs/openapi.yaml), below the server's base URL.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type {
  ClusterInfo,
  IAllocations,
  IAllocationsQuery,
  IArtifact,
  IEdtUser,
  IJobInfo,
  IJobList,
  IJobSubmission,
  IFoldedLogs,
  ILogChunk,
  IMetricsPage,
  IUsageQuery,
  IUsageReport,
  JobState
} from './types';

/** The URL namespace of the jupyter-edt REST API, below the server's base URL. */
export const API_NAMESPACE = 'edt/api/v1';

/**
 * Call the jupyter-edt REST API.
 *
 * The URL is built below `settings.baseUrl`, so the call works when the server
 * is not at the root (JupyterHub), and `ServerConnection.makeRequest` carries
 * the token and XSRF authentication.
 *
 * @param endPoint - path below /edt/api/v1, e.g. "cluster"
 * @param init - fetch options (method, body, ...)
 * @param settings - server settings; the page's settings by default
 * @returns the decoded JSON body (undefined for an empty body)
 * @throws ServerConnection.NetworkError when the server cannot be reached
 * @throws ServerConnection.ResponseError on a non-2xx answer, with the server's message
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  const data = parseBody(text);

  if (!response.ok) {
    throw new ServerConnection.ResponseError(
      response,
      errorMessage(response, data)
    );
  }
  return data as T;
}

/** Fetch the devices the scheduler can give to jobs. */
export function fetchCluster(
  settings?: ServerConnection.ISettings
): Promise<ClusterInfo> {
  return requestAPI<ClusterInfo>('cluster', { method: 'GET' }, settings);
}

/** The caller's job-owner name and whether they are an administrator. */
export function fetchUser(
  settings?: ServerConnection.ISettings
): Promise<IEdtUser> {
  return requestAPI<IEdtUser>('user', { method: 'GET' }, settings);
}

/**
 * GPU-seconds held and used over a range, by user, group or job: everyone's
 * for an administrator, the caller's own for anyone else.
 */
export function fetchUsage(
  query: IUsageQuery = {},
  settings?: ServerConnection.ISettings
): Promise<IUsageReport> {
  const params: Record<string, string | number> = {};
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined) {
      params[name] = value;
    }
  }
  return requestAPI<IUsageReport>(
    'usage' + URLExt.objectToQueryString(params),
    { method: 'GET' },
    settings
  );
}

/**
 * Which job held each device over a range, and why each change happened:
 * every job for an administrator; for anyone else their own, and the others'
 * without a job, user or name.
 */
export function fetchAllocations(
  query: IAllocationsQuery = {},
  settings?: ServerConnection.ISettings
): Promise<IAllocations> {
  const params: Record<string, number> = {};
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined) {
      params[name] = value;
    }
  }
  return requestAPI<IAllocations>(
    'allocations' + URLExt.objectToQueryString(params),
    { method: 'GET' },
    settings
  );
}

/** A job's path below the API namespace, e.g. jobs/{id}/logs. */
export function jobPath(jobId: string, ...rest: string[]): string {
  return ['jobs', encodeURIComponent(jobId), ...rest].join('/');
}

/**
 * The jobs the user may see, newest first (optionally only these states), and
 * the id of the newest event the list includes: the events feed after it keeps
 * the list live.
 */
export function readJobList(
  states: readonly JobState[] = [],
  settings?: ServerConnection.ISettings
): Promise<IJobList> {
  const query = states.map(s => `state=${encodeURIComponent(s)}`).join('&');
  return requestAPI<IJobList>(
    query ? `jobs?${query}` : 'jobs',
    { method: 'GET' },
    settings
  );
}

/** Submit a job. */
export function submitJob(
  spec: IJobSubmission,
  settings?: ServerConnection.ISettings
): Promise<IJobInfo> {
  return requestAPI<IJobInfo>(
    'jobs',
    { method: 'POST', body: JSON.stringify(spec) },
    settings
  );
}

/** The files a job left in its result directory. */
export async function listArtifacts(
  jobId: string,
  settings?: ServerConnection.ISettings
): Promise<IArtifact[]> {
  const answer = await requestAPI<{ artifacts: IArtifact[] }>(
    jobPath(jobId, 'artifacts'),
    { method: 'GET' },
    settings
  );
  return answer.artifacts;
}

/**
 * A download link below the base URL: an artifact (`path` given) or the whole
 * result zip. The browser's login cookie authenticates it; a token is added
 * when the settings carry one to append (as for WebSockets).
 */
export function downloadUrl(
  jobId: string,
  path: string | null,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const rest =
    path === null
      ? ['result.zip']
      : ['artifacts', ...path.split('/').map(encodeURIComponent)];
  const url = URLExt.join(
    settings.baseUrl,
    API_NAMESPACE,
    jobPath(jobId, ...rest)
  );
  return settings.token && settings.appendToken
    ? url + URLExt.objectToQueryString({ token: settings.token })
    : url;
}

/** What the job controller needs from the server (a fake in tests). */
export interface IJobApi {
  getJob(jobId: string): Promise<IJobInfo>;
  getMetrics(jobId: string, after: number): Promise<IMetricsPage>;
  getLogNames(jobId: string): Promise<string[]>;
  getLog(jobId: string, name: string, tail: number): Promise<ILogChunk>;
  /** Every log's tail folded by the server, as a failure is read (fold=true). */
  getFoldedLogs(jobId: string): Promise<IFoldedLogs>;
  patchJob(
    jobId: string,
    change: { priority?: number; max_gpus?: number }
  ): Promise<IJobInfo>;
  /** Stop the job; it stays, CANCELLED, with its logs and results. */
  cancelJob(jobId: string): Promise<IJobInfo>;
  /** Remove the job (stopped first); its GPU-seconds stay in the usage report. */
  deleteJob(jobId: string): Promise<IJobInfo>;
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
        jobPath(jobId, 'metrics') + URLExt.objectToQueryString({ after }),
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
        jobPath(jobId, 'logs') + URLExt.objectToQueryString({ name, tail }),
        { method: 'GET' },
        settings
      ),
    getFoldedLogs: jobId =>
      requestAPI<IFoldedLogs>(
        jobPath(jobId, 'logs') + URLExt.objectToQueryString({ fold: 'true' }),
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
      requestAPI<IJobInfo>(
        jobPath(jobId, 'cancel'),
        { method: 'POST' },
        settings
      ),
    deleteJob: jobId =>
      requestAPI<IJobInfo>(jobPath(jobId), { method: 'DELETE' }, settings)
  };
}

/** The message of a failed call's reason (an Error's message, or its text). */
export function reasonMessage(reason: unknown): string {
  return reason instanceof Error ? reason.message : String(reason);
}

/** Decode a JSON body; keep a non-JSON body as its text. */
function parseBody(text: string): unknown {
  if (text.length === 0) {
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The most helpful message of a failed answer: the server's own words first. */
function errorMessage(response: Response, data: unknown): string {
  const status = `${response.status} ${response.statusText}`.trim();
  if (data !== null && typeof data === 'object') {
    const body = data as { message?: unknown; reason?: unknown };
    for (const candidate of [body.message, body.reason]) {
      if (typeof candidate === 'string' && candidate.length > 0) {
        return candidate;
      }
    }
  }
  if (typeof data === 'string' && data.length > 0 && data.length < 200) {
    return `${status}: ${data}`;
  }
  return `Request to ${response.url || 'the jupyter-edt API'} failed: ${status}`;
}
