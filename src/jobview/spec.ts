/**
 * A job's spec as the tab shows it: a small table of what was submitted (name,
 * kind, program, arguments, GPUs, priority, environment), its code apart, in
 * an editor. Pure, tested on its own.
 */
import { jobKind, type IJobInfo } from '../api';

/** One row of the spec table. */
export interface ISpecRow {
  label: string;
  value: string;
  /** Shown in a fixed-width font (paths, arguments, variables). */
  code?: boolean;
}

/** Spec fields the table shows in rows of its own (or leaves out: the code). */
const SHOWN = new Set([
  'name',
  'kind',
  'code',
  'script',
  'archive',
  'entrypoint',
  'args',
  'env',
  'min_gpus',
  'max_gpus',
  'priority',
  'surface',
  'annotations'
]);

/** An argument as a shell would need it written, quoted when it has to be (as shlex.quote). */
function shellWord(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'"'"'`)}'`;
}

/** What runs: the file started (and where its code came from, when not sent inline). */
function programRows(spec: IJobInfo['spec']): ISpecRow[] {
  const rows: ISpecRow[] = [];
  if (typeof spec.entrypoint === 'string' && spec.entrypoint) {
    rows.push({ label: 'Entrypoint', value: spec.entrypoint, code: true });
  }
  if (typeof spec.script === 'string' && spec.script) {
    rows.push({ label: 'Script', value: spec.script, code: true });
  }
  if (typeof spec.archive === 'string' && spec.archive) {
    rows.push({ label: 'Archive', value: spec.archive, code: true });
  }
  return rows;
}

/**
 * The spec table's rows. GPUs and priority are the job's now (they change);
 * any field the table does not know is listed too, as JSON, so nothing is
 * hidden.
 */
export function specRows(job: IJobInfo): ISpecRow[] {
  const spec = job.spec ?? {};
  const args = Array.isArray(spec.args) ? (spec.args as string[]) : [];
  const env = Object.entries(spec.env ?? {});
  const gpus =
    job.min_gpus === job.max_gpus
      ? `${job.max_gpus}`
      : `${job.min_gpus} to ${job.max_gpus}`;
  const rows: ISpecRow[] = [
    { label: 'Name', value: job.name || '(none)' },
    { label: 'User', value: job.user },
    { label: 'Kind', value: jobKind(job) },
    ...programRows(spec),
    {
      label: 'Arguments',
      value: args.length > 0 ? args.map(shellWord).join(' ') : '(none)',
      code: args.length > 0
    },
    { label: 'GPUs', value: gpus },
    { label: 'Priority', value: String(job.priority) },
    {
      label: 'Environment',
      value:
        env.length > 0
          ? env.map(([name, value]) => `${name}=${value}`).join('\n')
          : '(none)',
      code: env.length > 0
    }
  ];
  if (typeof spec.surface === 'string' && spec.surface !== 'job') {
    rows.push({ label: 'Submitted through', value: spec.surface });
  }
  for (const [key, value] of Object.entries(spec)) {
    if (!SHOWN.has(key) && value !== undefined && value !== null) {
      rows.push({ label: key, value: JSON.stringify(value), code: true });
    }
  }
  return rows;
}

/** The code sent with the job (inline), or null when it came as a file or archive. */
export function specCode(job: IJobInfo): { code: string; path: string } | null {
  const code = job.spec?.code;
  if (typeof code !== 'string') {
    return null;
  }
  const entrypoint = job.spec.entrypoint;
  return {
    code,
    path: typeof entrypoint === 'string' && entrypoint ? entrypoint : 'main.py'
  };
}
