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

/** Drop the zeros that end a decimal fraction: "1.600" -> "1.6", "2.000" -> "2". */
function trimFraction(text: string): string {
  return text.includes('.') ? text.replace(/\.?0+$/, '') : text;
}

/**
 * A value to `digits` significant digits, as a chart's legend, axis and the
 * job's figures show it: 1.6e-4, 0.1667, 12.5, 3, 12346, 2.5e6. A value that
 * is not 0 never reads "0": below 0.001 and from a million on it is written
 * with an exponent; trailing zeros are dropped, so ticks such as 0.1 + 0.2 read
 * "0.3".
 */
export function formatSignificant(value: number, digits = 4): string {
  if (Number.isNaN(value)) {
    return 'NaN';
  }
  if (!Number.isFinite(value)) {
    return value > 0 ? '∞' : '-∞';
  }
  if (value === 0) {
    return '0';
  }
  const abs = Math.abs(value);
  if (abs < 1e-3 || abs >= 1e6) {
    const [mantissa, exponent] = value.toExponential(digits - 1).split('e');
    return `${trimFraction(mantissa)}e${Number(exponent)}`;
  }
  if (abs >= 10 ** digits) {
    return String(Math.round(value));
  }
  return trimFraction(value.toPrecision(digits));
}

/**
 * The labels of evenly spaced ticks: to as many significant digits as tell
 * neighbours apart (2.301, 2.3011, 2.3012 rather than 2.301 three times),
 * each as `formatSignificant` writes it.
 */
export function formatTicks(ticks: readonly number[]): string[] {
  let step = Infinity;
  for (let i = 1; i < ticks.length; i++) {
    step = Math.min(step, Math.abs(ticks[i] - ticks[i - 1]));
  }
  const largest = Math.max(...ticks.map(Math.abs));
  let digits = 4;
  if (step > 0 && Number.isFinite(step) && largest > 0) {
    const needed =
      Math.floor(Math.log10(largest)) - Math.floor(Math.log10(step)) + 1;
    digits = Math.min(15, Math.max(1, needed));
  }
  return ticks.map(value => formatSignificant(value, digits));
}

/** A count such as a step, whole, without exponent: 12345. */
export function formatCount(value: number): string {
  return Number.isFinite(value) ? String(Math.round(value)) : '–';
}

const MONTHS = [
  'Jan',
  'Feb',
  'Mar',
  'Apr',
  'May',
  'Jun',
  'Jul',
  'Aug',
  'Sep',
  'Oct',
  'Nov',
  'Dec'
];

/** How much of a wall time a label shows. */
export type ClockPrecision = 'seconds' | 'minutes' | 'days';

/**
 * A wall time (seconds since the epoch) in the browser's time zone:
 * "14:05:09", "14:05" or, for a whole day, "Mar 3".
 */
export function formatClock(
  seconds: number,
  precision: ClockPrecision = 'seconds'
): string {
  const date = new Date(seconds * 1000);
  if (precision === 'days') {
    return `${MONTHS[date.getMonth()]} ${date.getDate()}`;
  }
  const parts = [date.getHours(), date.getMinutes()];
  if (precision === 'seconds') {
    parts.push(date.getSeconds());
  }
  return parts.map(v => String(v).padStart(2, '0')).join(':');
}
