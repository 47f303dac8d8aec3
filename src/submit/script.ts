/**
 * What "Submit as elastic job…" sends: a Python file as it is, or a
 * notebook's code cells joined into one script. IPython-only lines (magics,
 * `!shell`) cannot run in a plain Python worker, so they are kept as comments
 * and the job's line numbers still point at the cell's code. Pure functions.
 */
import {
  JOB_KINDS,
  PRIORITY_MAX,
  PRIORITY_MIN,
  type IJobSubmission,
  type JobKind
} from '../api/types';

/** The notebook shape read here (nbformat 4). */
export interface INotebookLike {
  cells?: { cell_type?: string; source?: string | string[] }[];
}

/** Whether the file can be submitted (a Python file or a notebook). */
export function isSubmittable(path: string): boolean {
  return /\.(py|ipynb)$/i.test(path);
}

/** The form's values. */
export interface ISubmitForm {
  /** What a resize does to the job. */
  kind: JobKind;
  /** The fewest GPUs it runs on (a restart job is resized between min and max). */
  minGpus: number;
  maxGpus: number;
  priority: number;
  /** Command-line arguments, split like a shell would (quotes kept together). */
  args: string;
}

function sourceText(source: string | string[] | undefined): string {
  return Array.isArray(source) ? source.join('') : (source ?? '');
}

/** Whether a line only runs in IPython (a magic, a shell escape, `x?`). */
export function isIPythonLine(line: string): boolean {
  const trimmed = line.trimStart();
  return /^(%|!|\?)/.test(trimmed) || /^\w[\w.]*\?\??\s*$/.test(trimmed);
}

/** A notebook's code cells as one Python script. */
export function notebookToScript(notebook: INotebookLike): string {
  const cells = (notebook.cells ?? []).filter(
    cell => cell.cell_type === 'code'
  );
  const parts = cells.map((cell, index) => {
    const lines = sourceText(cell.source)
      .split('\n')
      .map(line => (isIPythonLine(line) ? `# (IPython) ${line}` : line));
    return `# %% cell ${index + 1}\n${lines.join('\n').trimEnd()}\n`;
  });
  return parts.join('\n');
}

/** Split arguments as a POSIX shell would for simple quoting. */
export function splitArgs(text: string): string[] {
  const out: string[] = [];
  const pattern = /"((?:\\.|[^"\\])*)"|'([^']*)'|(\S+)/g;
  let match: RegExpExecArray | null;
  while ((match = pattern.exec(text)) !== null) {
    if (match[1] !== undefined) {
      out.push(match[1].replace(/\\(.)/g, '$1'));
    } else if (match[2] !== undefined) {
      out.push(match[2]);
    } else {
      out.push(match[3]);
    }
  }
  return out;
}

/** The form checked: a ValueError-like message naming the bad field, or null. */
export function checkForm(form: ISubmitForm): string | null {
  if (!Number.isInteger(form.maxGpus) || form.maxGpus < 1) {
    return 'Max GPUs must be a whole number of at least 1.';
  }
  if (!Number.isInteger(form.minGpus) || form.minGpus < 1) {
    return 'Min GPUs must be a whole number of at least 1.';
  }
  if (form.minGpus > form.maxGpus) {
    return `Min GPUs (${form.minGpus}) must not exceed Max GPUs (${form.maxGpus}).`;
  }
  if (!JOB_KINDS.includes(form.kind)) {
    return `Kind must be one of ${JOB_KINDS.join(', ')}.`;
  }
  if (
    !Number.isInteger(form.priority) ||
    form.priority < PRIORITY_MIN ||
    form.priority > PRIORITY_MAX
  ) {
    return `Priority must be a whole number from ${PRIORITY_MIN} to ${PRIORITY_MAX}.`;
  }
  return null;
}

/** The job spec for a file and the form. */
export function submission(
  path: string,
  content: string | INotebookLike,
  form: ISubmitForm
): IJobSubmission {
  const name = path.split('/').pop() ?? path;
  const notebook = name.endsWith('.ipynb');
  const code = notebook
    ? notebookToScript(
        typeof content === 'string'
          ? (JSON.parse(content) as INotebookLike)
          : content
      )
    : String(content);
  return {
    name: name.replace(/\.(py|ipynb)$/, ''),
    code,
    entrypoint: notebook ? 'main.py' : name,
    args: splitArgs(form.args),
    kind: form.kind,
    min_gpus: form.minGpus,
    max_gpus: form.maxGpus,
    priority: form.priority
  };
}
