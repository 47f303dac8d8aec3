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
import type { IFitArguments } from './fitargs';

/**
 * The variable that sets the epochs of the runtime's `fit()` over its
 * argument (EPOCHS_ENV in jupyter_edt/runtime/submission.py).
 */
export const EPOCHS_ENV = 'EDT_EPOCHS';

/** The longest job name the server takes (MAX_NAME in jupyter_edt/jobs/models.py). */
export const MAX_NAME = 200;

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
  /** The job's name ('' : the file's name). */
  name: string;
  /** What a resize does to the job. */
  kind: JobKind;
  /** The fewest GPUs it runs on (a restart job is resized between min and max). */
  minGpus: number;
  maxGpus: number;
  /** Epochs to train, over the script's own (EDT_EPOCHS); null: as the script says. */
  epochs: number | null;
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
  if (
    form.epochs !== null &&
    (!Number.isInteger(form.epochs) || form.epochs < 1)
  ) {
    return 'Epochs must be a whole number of at least 1, or empty (as the script says).';
  }
  if (form.name.trim().length > MAX_NAME) {
    return `Name must be at most ${MAX_NAME} characters.`;
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

/** A file as a job runs it: its name, its code, and the file started. */
export interface IProgram {
  /** The file's name without its extension: the job's name by default. */
  name: string;
  code: string;
  entrypoint: string;
  /** Whether the code is a notebook's cells, joined. */
  notebook: boolean;
}

/** What a Python file or a notebook (object or JSON text) runs as. */
export function programOf(
  path: string,
  content: string | INotebookLike
): IProgram {
  const file = path.split('/').pop() ?? path;
  const notebook = file.endsWith('.ipynb');
  const code = notebook
    ? notebookToScript(
        typeof content === 'string'
          ? (JSON.parse(content) as INotebookLike)
          : content
      )
    : String(content);
  return {
    name: file.replace(/\.(py|ipynb)$/, ''),
    code,
    entrypoint: notebook ? 'main.py' : file,
    notebook
  };
}

/**
 * Where a line of the program is, as its author finds it: "line 12" of a
 * Python file, "cell 3" of a notebook (its code cells counted from 1).
 */
export function whereInProgram(program: IProgram, line: number): string {
  if (!program.notebook) {
    return `line ${line}`;
  }
  const lines = program.code.split('\n').slice(0, line);
  for (let i = lines.length - 1; i >= 0; i--) {
    const marker = /^# %% cell (\d+)$/.exec(lines[i]);
    if (marker) {
      return `cell ${marker[1]}`;
    }
  }
  return `line ${line}`;
}

/**
 * The job spec for a program and the form. Epochs that differ from what the
 * script says (`fromScript`) are sent as EDT_EPOCHS, which the runtime takes
 * over `fit()`'s argument; the same value sends nothing.
 */
export function submission(
  program: IProgram,
  form: ISubmitForm,
  fromScript: IFitArguments | null = null
): IJobSubmission {
  const spec: IJobSubmission = {
    name: form.name.trim() || program.name,
    code: program.code,
    entrypoint: program.entrypoint,
    args: splitArgs(form.args),
    kind: form.kind,
    min_gpus: form.minGpus,
    max_gpus: form.maxGpus,
    priority: form.priority
  };
  if (form.epochs !== null && form.epochs !== fromScript?.epochs?.value) {
    spec.env = { [EPOCHS_ENV]: String(form.epochs) };
  }
  return spec;
}
