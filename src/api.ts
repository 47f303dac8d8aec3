import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IJobInfo, JobState } from './widgets/jobapi';

/** The URL namespace of the jupyter-edt REST API, below the server's base URL. */
export const API_NAMESPACE = 'edt/api/v1';

/** Where the device list comes from: real NVIDIA GPUs, or virtual (CPU) devices. */
export type DeviceSource = 'nvml' | 'virtual';

/** One device (GPU or virtual GPU) as GET /edt/api/v1/cluster reports it. */
export interface Device {
  /** Stable identifier, e.g. "gpu0". */
  id: string;
  /** Index of the device on its machine. */
  index: number;
  /** NVML UUID ("GPU-...") or "virtual-N". */
  uuid: string;
  /** Human name, e.g. "NVIDIA H200" or "Virtual GPU 0". */
  name: string;
  /** Total memory in bytes; null when unknown (virtual devices). */
  memory_total: number | null;
  /** Used memory in bytes; null when unknown. */
  memory_used: number | null;
  /** Utilisation in percent (0-100); null when unknown. */
  utilization: number | null;
  /** Whether the device is a virtual one (a CPU worker slot). */
  virtual: boolean;
  /** Whether a job holds the device now. */
  held: boolean;
  /** The holding job's id when it is the user's own; null otherwise. */
  job_id: string | null;
  /** Recent readings, oldest first (absent from older servers). */
  history?: IDeviceReading[];
}

/** One past reading of a device. */
export interface IDeviceReading {
  /** Seconds since the epoch. */
  time: number;
  utilization: number | null;
  memory_used: number | null;
}

/** The answer of GET /edt/api/v1/cluster. */
export interface ClusterInfo {
  source: DeviceSource;
  devices: Device[];
}

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

/** Who the caller is to the job service (GET /user). */
export interface IEdtUser {
  /** The name the caller's jobs are recorded under (a job's `user`). */
  name: string;
  /** Administrators see and change everyone's jobs. */
  admin: boolean;
}

/** The caller's job-owner name and whether they are an administrator. */
export function fetchUser(
  settings?: ServerConnection.ISettings
): Promise<IEdtUser> {
  return requestAPI<IEdtUser>('user', { method: 'GET' }, settings);
}

/** What POST /jobs takes (JobSpec in docs/openapi.yaml). */
export interface IJobSubmission {
  name?: string;
  code?: string;
  script?: string;
  entrypoint?: string;
  args?: string[];
  env?: Record<string, string>;
  min_gpus?: number;
  max_gpus: number;
  priority?: number;
}

/** One file a job left in its result directory. */
export interface IArtifact {
  /** Relative to the result directory, '/'-separated. */
  path: string;
  size: number;
  modified: number;
}

function jobPath(jobId: string, ...rest: string[]): string {
  return ['jobs', encodeURIComponent(jobId), ...rest].join('/');
}

/** The jobs the user may see, newest first (optionally only these states). */
export async function listJobs(
  states: readonly JobState[] = [],
  settings?: ServerConnection.ISettings
): Promise<IJobInfo[]> {
  const query = states.map(s => `state=${encodeURIComponent(s)}`).join('&');
  const answer = await requestAPI<{ jobs: IJobInfo[] }>(
    query ? `jobs?${query}` : 'jobs',
    { method: 'GET' },
    settings
  );
  return answer.jobs;
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
    'jobs',
    encodeURIComponent(jobId),
    ...rest
  );
  return settings.token && settings.appendToken
    ? url + URLExt.objectToQueryString({ token: settings.token })
    : url;
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
