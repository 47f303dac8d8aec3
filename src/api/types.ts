/**
 * The records of the jupyter-edt REST and WebSocket API (docs/openapi.yaml),
 * as the sidebar, the job tab, the cluster view and the notebook widgets read them.
 */

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

/**
 * The priority range a job takes, higher served first: the server's
 * PRIORITY_MIN and PRIORITY_MAX (jupyter_edt/jobs/models.py), written once here
 * for the submit dialog, the job panel and the job tab.
 */
export const PRIORITY_MIN = -1000;
export const PRIORITY_MAX = 1000;

/**
 * What a resize does to a job, chosen at submission (JOB_KINDS in
 * jupyter_edt/jobs/models.py): `elastic` is resized in place by the runtime's
 * Trainer, `restart` (a torchrun-compatible program) by a graceful restart of
 * all its workers, `rigid` (torchrun-compatible too) runs at a fixed size.
 */
export type JobKind = 'elastic' | 'restart' | 'rigid';

/** The kinds, in the order the submit dialog offers them. */
export const JOB_KINDS: readonly JobKind[] = ['elastic', 'restart', 'rigid'];

/** A job's stored spec (JobSpec), as GET jobs/{id} returns it. */
export interface IJobSpec {
  /**
   * What a resize does to it. Absent from records stored before jobs had
   * kinds: those are elastic (read it with `jobKind`).
   */
  kind?: JobKind;
  /** The surface that submitted it: "job" (the API) or an add-on's, e.g. "wmla-exec". */
  surface?: string;
  env?: Record<string, string>;
  [key: string]: unknown;
}

/** A job as GET jobs/{id} describes it. */
export interface IJobInfo {
  id: string;
  user: string;
  name: string;
  state: JobState;
  reason: string;
  spec: IJobSpec;
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
   * in place. False for an elastic job (its `spec.kind`) whose program has not
   * (yet): it is kept on the GPUs it started with.
   */
  elastic: boolean;
  /** Times it went back to the queue after its driver died. */
  restarts: number;
}

/**
 * Where the device list comes from: real NVIDIA GPUs, virtual (CPU) devices,
 * or the nodes of a Ray cluster (each device's `node` says which).
 */
export type DeviceSource = 'nvml' | 'virtual' | 'ray';

/** One device (GPU or virtual GPU) as GET /edt/api/v1/cluster reports it. */
export interface Device {
  /** Stable identifier, e.g. "gpu0". */
  id: string;
  /** Index of the device on its machine. */
  index: number;
  /** Its machine: the host name, or the Ray node id. */
  node: string;
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
  /** Whether its node is announced to leave (a drain): offered to no job. */
  draining?: boolean;
  /** When the draining node goes, in seconds since the epoch; null when not said. */
  drain_deadline?: number | null;
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

/** Who the caller is to the job service (GET /user). */
export interface IEdtUser {
  /** The name the caller's jobs are recorded under (a job's `user`). */
  name: string;
  /** Administrators see and change everyone's jobs. */
  admin: boolean;
  /** The caller's groups (absent from older servers). */
  groups?: string[];
  /** The quotas that cap what the caller's jobs hold (absent from older servers). */
  quota?: IQuota;
}

/** The quotas that cap the GPUs a user's jobs hold at once (Quota). */
export interface IQuota {
  /** The least of the quotas below; null when none applies. */
  gpus: number | null;
  /** The user's own quota. */
  user: number | null;
  /** The quota of each of the user's groups that has one. */
  groups: Record<string, number>;
}

/** What a usage report's rows are (GET /usage?by=). */
export type UsageBy = 'user' | 'group' | 'job';

/**
 * GPU-seconds over a range: held (devices allocated times the time allocated)
 * and used (the part while the job was RUNNING).
 */
export interface IUsageSums {
  held_gpu_seconds: number;
  used_gpu_seconds: number;
  /** The jobs that held a GPU in the range. */
  jobs: number;
}

/** One row of a usage report (UsageRow). */
export interface IUsageRow extends IUsageSums {
  /** The user, the group (null: users in no group) or the job id. */
  key: string | null;
  /** The user's or group's quota; null when none applies, and for a job. */
  quota: number | null;
  /** A job row's owner and name. */
  user?: string;
  name?: string;
}

/** The answer of GET /edt/api/v1/usage. */
export interface IUsageReport {
  /** The range, in seconds since the epoch. */
  since: number;
  until: number;
  by: UsageBy;
  /** Most GPU-seconds held first. */
  rows: IUsageRow[];
  /** Every job counted once. */
  total: IUsageSums;
}

/** The parameters of GET /usage; the server's defaults for what is absent. */
export interface IUsageQuery {
  /** Seconds since the epoch (default 0: all history). */
  since?: number;
  /** Seconds since the epoch (default now). */
  until?: number;
  /** Default 'user'. */
  by?: UsageBy;
}

/**
 * What an allocation change did to its job (an `allocation` event's `cause`):
 * its first devices, a rescale by the policy, a device lost or its node
 * draining, a suspension's release, its processes lost, its end.
 */
export type ChangeCause =
  | 'start'
  | 'grow'
  | 'shrink'
  | 'move'
  | 'device_lost'
  | 'node_drain'
  | 'suspend'
  | 'lost'
  | 'end';

/**
 * What in the cluster prompted an allocation change (an `allocation` event's
 * `trigger`): a job arrived, a job left (its devices came free), a priority or
 * a job's max GPUs changed, the quotas changed, the devices changed.
 */
export type ChangeTrigger =
  'arrival' | 'departure' | 'priority' | 'limits' | 'quota' | 'devices';

/** One allocation change of a job (AllocationChange). */
export interface IAllocationChange {
  /** Its `allocation` event's id. */
  event_id: number;
  /** Seconds since the epoch. */
  time: number;
  /** Null for events stored before causes were. */
  cause: ChangeCause | string | null;
  /** Null when nothing is known to have prompted it. */
  trigger: ChangeTrigger | string | null;
  /** The job's sentence; null where the job is not the caller's to see. */
  reason: string | null;
  /** The GPUs the job holds after it. */
  gpus: number;
}

/**
 * A job's hold on one device (AllocationInterval). The job's id, owner and
 * name are null where the caller may not see the job.
 */
export interface IAllocationInterval {
  job_id: string | null;
  user: string | null;
  name: string | null;
  /** Seconds since the epoch. */
  start: number;
  /** Null while still held at the range's end. */
  end: number | null;
  /** Every allocation change of the job while it held the device, oldest first. */
  changes: IAllocationChange[];
}

/** One device of the allocation timeline (AllocationDevice). */
export interface IAllocationDevice {
  id: string;
  /** Null for a device that is gone (its node left). */
  node: string | null;
  index: number | null;
  name: string | null;
  /** The device is in the inventory now. */
  present: boolean;
  /** Oldest first. */
  intervals: IAllocationInterval[];
}

/** The answer of GET /edt/api/v1/jobs. */
export interface IJobList {
  jobs: IJobInfo[];
  /** The newest event the list includes: the events feed goes on after it. */
  last_event_id: number;
}

/** The answer of GET /edt/api/v1/allocations. */
export interface IAllocations {
  /** The range, in seconds since the epoch. */
  since: number;
  until: number;
  /** The newest event the answer includes: the events feed goes on after it. */
  last_event_id: number;
  devices: IAllocationDevice[];
}

/** The parameters of GET /allocations; the server's defaults for what is absent. */
export interface IAllocationsQuery {
  /** Seconds since the epoch (default: an hour before `until`). */
  since?: number;
  /** Seconds since the epoch (default now). */
  until?: number;
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
  /** Default 'elastic'. */
  kind?: JobKind;
}

/** One file a job left in its result directory. */
export interface IArtifact {
  /** Relative to the result directory, '/'-separated. */
  path: string;
  size: number;
  modified: number;
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

/**
 * A job's logs folded as a user reads a failure (GET jobs/{id}/logs?fold=true):
 * each distinct traceback once, headed by the processes that printed it, the
 * user's frames first and the framework's folded, then what each log printed
 * besides; and the logs it was read from.
 */
export interface IFoldedLogs {
  text: string;
  logs: string[];
}

/** One message of the events WebSocket. */
export interface IJobEvent {
  id?: number;
  kind:
    | 'state'
    | 'allocation'
    | 'limits'
    | 'elastic'
    | 'formed'
    | 'restart'
    | 'metrics'
    | 'keepalive'
    | string;
  job_id?: string;
  time?: number;
  user?: string;
  state?: JobState;
  /** `state`: why; `restart`: what the restart did and lost, for the user */
  reason?: string;
  devices?: string[];
  /** `formed`: the group's generation and size, the survivors' pause, how long
   * its allocation waited for it (null: none did); `restart`: `world_size` is
   * the size every worker restarted at */
  generation?: number;
  world_size?: number;
  pause_s?: number;
  waited_s?: number | null;
  /** `restart`: how many times the job's workers were restarted (1-based) */
  count?: number;
  /** `restart`: why every worker was started again; `allocation`: what the
   * change did to the job (`ChangeCause`) */
  cause?: 'resize' | 'failure' | ChangeCause | string;
  /** `allocation`: what in the cluster prompted it */
  trigger?: ChangeTrigger | string;
  /**
   * `restart`: the workers killed because they did not exit within the grace
   * after SIGTERM (the steps since their last checkpoint are lost); empty when
   * all exited in time
   */
  killed?: string[];
  priority?: number;
  max_gpus?: number;
  elastic?: boolean;
  restarts?: number;
  records?: IMetricRecord[];
}

/**
 * One metric record of a job (GET jobs/{id}/metrics, or a `metrics` event's
 * `records`): one `step` record per step (global_step, epoch, step, loss, train
 * metrics, world_size, samples_per_s, run, ...), `epoch` records (epoch, val_loss
 * and val_<metric>), and `emetrics` records, one per line of a WMLA program's
 * evaluation-metrics.txt (group `train` or `test`, iteration, rindex, subid
 * and each of the line's values by name).
 */
export interface IMetricRecord {
  type?: string;
  id?: number;
  time?: number;
  epoch?: number;
  step?: number;
  global_step?: number;
  loss?: number;
  world_size?: number;
  samples_per_s?: number | null;
  group?: string;
  iteration?: number;
  [key: string]: unknown;
}
