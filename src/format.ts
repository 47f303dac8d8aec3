import {
  jobKind,
  type ClusterInfo,
  type Device,
  type IJobInfo,
  type JobKind
} from './api';

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/**
 * Format a byte count in binary units with at most one decimal,
 * e.g. 1288490188 -> "1.2 GiB", 85899345920 -> "80 GiB".
 */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) {
    return '?';
  }
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const rounded = unit === 0 ? Math.round(value) : Math.round(value * 10) / 10;
  return `${rounded} ${BYTE_UNITS[unit]}`;
}

/** "used / total" memory of a device, or null when the device does not report it. */
export function formatMemory(device: Device): string | null {
  if (device.memory_total === null || device.memory_total === undefined) {
    return null;
  }
  const used =
    device.memory_used === null || device.memory_used === undefined
      ? '?'
      : formatBytes(device.memory_used);
  return `${used} / ${formatBytes(device.memory_total)}`;
}

/** Clamp a utilisation in percent to 0-100; null when unknown. */
export function clampPercent(value: number | null | undefined): number | null {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return null;
  }
  return Math.min(100, Math.max(0, value));
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

/**
 * One line saying what devices there are and where they come from,
 * e.g. "2 NVIDIA GPUs", "4 virtual GPUs (no NVIDIA GPU found)" or "4 GPUs on 2
 * Ray nodes".
 */
export function describeCluster(cluster: ClusterInfo): string {
  const count = cluster.devices.length;
  const draining = new Set(
    cluster.devices.filter(d => d.draining).map(d => d.node)
  ).size;
  const leaving = draining ? `, ${plural(draining, 'node')} draining` : '';
  if (cluster.source === 'virtual') {
    return `${plural(count, 'virtual GPU')} (no NVIDIA GPU found)${leaving}`;
  }
  if (count === 0) {
    return 'No GPUs found';
  }
  if (cluster.source === 'ray') {
    const nodes = new Set(cluster.devices.map(d => d.node)).size;
    return `${plural(count, 'GPU')} on ${plural(nodes, 'Ray node')}${leaving}`;
  }
  return `${plural(count, 'NVIDIA GPU')}${leaving}`;
}

/**
 * What a draining device's badge says on hover: its node leaves (when, if a
 * deadline was said), and it is offered to no job meanwhile. `now` is in
 * seconds since the epoch.
 */
export function describeDrain(device: Device, now: number): string {
  const deadline = device.drain_deadline;
  let when = 'Its node is leaving';
  if (deadline !== null && deadline !== undefined) {
    const left = Math.round(deadline - now);
    when =
      left > 0
        ? `Its node leaves in ${formatSeconds(left)}`
        : 'Its node was due to leave';
  }
  return `${when}; its jobs move off it and no new job gets it.`;
}

function formatSeconds(seconds: number): string {
  if (seconds < 60) {
    return plural(seconds, 'second');
  }
  const minutes = Math.round(seconds / 60);
  return plural(minutes, 'minute');
}

/**
 * Each kind in words, written once for the tags and the submit dialog: what a
 * resize does to such a job, and what program it takes.
 */
export const KIND_TEXT: Readonly<
  Record<JobKind, { resize: string; program: string }>
> = {
  elastic: {
    resize: 'resized in place at a step boundary',
    program: "a program that trains with the elastic runtime's Trainer"
  },
  restart: {
    resize: 'resized by a graceful restart from a checkpoint',
    program: 'a torchrun-compatible program (e.g. Hugging Face, Lightning)'
  },
  rigid: {
    resize: 'runs at a fixed size',
    program: 'a torchrun-compatible program'
  }
};

/** A job's kind tag: its label, its tooltip, and whether it runs at a fixed size. */
export interface IKindTag {
  kind: JobKind;
  /** The kind, and "↻N" when its driver died N times and it was requeued. */
  label: string;
  title: string;
  /** An elastic job running at a fixed size: its program does not use the runtime. */
  fixed: boolean;
}

/**
 * What a job's kind tag says, on every surface (sidebar row, job tab, notebook
 * widget): the kind, what a resize does to it and, for an elastic job RUNNING
 * without the elastic runtime, that it runs at a fixed size.
 */
export function describeKind(
  job: Pick<IJobInfo, 'spec' | 'state' | 'elastic' | 'restarts'>
): IKindTag {
  const kind = jobKind(job);
  const fixed = kind === 'elastic' && job.state === 'RUNNING' && !job.elastic;
  const name = kind.charAt(0).toUpperCase() + kind.slice(1);
  let title = `${name}: ${KIND_TEXT[kind].resize}.`;
  if (fixed) {
    title +=
      ' Its program does not use the elastic runtime (or has not started it ' +
      'yet): it runs at a fixed size.';
  }
  if (job.restarts > 0) {
    title += ` Restarted ${plural(job.restarts, 'time')} from its checkpoint after its driver died.`;
  }
  const label = job.restarts > 0 ? `${kind} ↻${job.restarts}` : kind;
  return { kind, label, title, fixed };
}
