/**
 * "Submit as elastic job…": the dialog (name, kind, min and max GPUs, epochs,
 * priority, arguments) and the submission through POST /jobs. The file's text
 * is read through the Contents API first, so a path relative to the file
 * browser's root works with any server root and base URL, and the dialog
 * starts from what the script's `fit(…)` call says (fitargs.ts).
 */
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import type { Contents } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import {
  JOB_KINDS,
  PRIORITY_MAX,
  PRIORITY_MIN,
  reasonMessage,
  submitJob,
  type IJobSubmission,
  type IJobInfo,
  type JobKind
} from '../api';
import { el } from '../dom';
import { KIND_TEXT } from '../format';
import { readFitArguments, type IFitArguments } from './fitargs';
import {
  MAX_NAME,
  checkForm,
  programOf,
  submission,
  whereInProgram,
  type IProgram,
  type ISubmitForm
} from './script';
import { scriptNote, sizeSummary } from './wording';

/** The line under a kind's choice: what program it takes, what a resize does. */
export function kindChoiceText(kind: JobKind): string {
  const { program, resize } = KIND_TEXT[kind];
  return `${program.charAt(0).toUpperCase()}${program.slice(1)}; ${resize}.`;
}

let formCount = 0;

/**
 * The dialog's body: a line saying where the job runs (kept up to date as the
 * user types), what the script says of its size (`note`), the name, the kind
 * (one radio each, with a line saying what it means) and labelled inputs; a
 * line under them says what is wrong, if anything, as the user types.
 */
export class SubmitForm
  extends Widget
  implements Dialog.IBodyWidget<ISubmitForm>
{
  constructor(
    path: string,
    defaults: Partial<ISubmitForm> = {},
    note: string | null = null
  ) {
    super();
    this.addClass('jp-edt-submit-form');
    const prefix = `jp-edt-submit-${++formCount}`;
    this._file = path.split('/').pop() ?? path;
    this._summary = el('p', 'jp-edt-submit-intro');
    this._summary.setAttribute('aria-live', 'polite');
    this.node.append(this._summary);
    if (note !== null) {
      this.node.append(el('p', 'jp-edt-submit-script', note));
    }

    this._name = this._input('Name', 'text', 'jp-edt-submit-name');
    this._name.maxLength = MAX_NAME;
    this._name.value = defaults.name ?? '';
    this._name.placeholder = this._file.replace(/\.(py|ipynb)$/, '');

    // The kind: a radio group with a legend, each choice described.
    const kinds = el('fieldset', 'jp-edt-submit-kind');
    kinds.append(el('legend', 'jp-edt-field-label', 'Kind'));
    const chosen = defaults.kind ?? 'elastic';
    this._kinds = JOB_KINDS.map(kind => {
      const choice = el('div', 'jp-edt-submit-kind-choice');
      const label = el('label', 'jp-edt-submit-kind-label');
      const input = el('input', `jp-edt-submit-kind-${kind}`);
      input.type = 'radio';
      input.name = `${prefix}-kind`;
      input.value = kind;
      input.checked = kind === chosen;
      const help = el('div', 'jp-edt-submit-kind-help');
      help.id = `${prefix}-kind-${kind}`;
      help.textContent = kindChoiceText(kind);
      input.setAttribute('aria-describedby', help.id);
      label.append(input, document.createTextNode(` ${kind}`));
      choice.append(label, help);
      kinds.append(choice);
      return input;
    });
    this.node.append(kinds);

    // The numbers, two by two.
    const numbers = el('div', 'jp-edt-submit-numbers');
    this.node.append(numbers);

    this._minGpus = this._input(
      'Min GPUs',
      'number',
      'jp-edt-submit-min-gpus',
      numbers
    );
    this._minGpus.min = '1';
    this._minGpus.value = String(defaults.minGpus ?? 1);
    this._maxGpus = this._input(
      'Max GPUs',
      'number',
      'jp-edt-submit-max-gpus',
      numbers
    );
    this._maxGpus.min = '1';
    this._maxGpus.value = String(defaults.maxGpus ?? 1);
    this._epochs = this._input(
      'Epochs',
      'number',
      'jp-edt-submit-epochs',
      numbers
    );
    this._epochs.min = '1';
    this._epochs.placeholder = 'as the script says';
    this._epochs.value =
      defaults.epochs === null || defaults.epochs === undefined
        ? ''
        : String(defaults.epochs);
    this._priority = this._input(
      'Priority',
      'number',
      'jp-edt-submit-priority',
      numbers
    );
    this._priority.min = String(PRIORITY_MIN);
    this._priority.max = String(PRIORITY_MAX);
    this._priority.value = String(defaults.priority ?? 0);
    this._args = this._input('Arguments', 'text', 'jp-edt-submit-args');
    this._args.placeholder = '--lr 0.1';
    this._args.value = defaults.args ?? '';

    this._problem = el('div', 'jp-edt-submit-problem jp-edt-error');
    this._problem.setAttribute('aria-live', 'polite');
    this.node.append(this._problem);
    this.node.addEventListener('input', () => this.check());
    this.check();
  }

  getValue(): ISubmitForm {
    const epochs = this._epochs.value.trim();
    return {
      name: this._name.value.trim(),
      kind: (this._kinds.find(input => input.checked)?.value ??
        'elastic') as JobKind,
      minGpus: Number(this._minGpus.value),
      maxGpus: Number(this._maxGpus.value),
      epochs: epochs === '' ? null : Number(epochs),
      priority: Number(this._priority.value),
      args: this._args.value
    };
  }

  /**
   * Say what is wrong with the values now (nothing: the line is hidden), and
   * keep Min GPUs' range at 1 to Max GPUs.
   *
   * @returns the problem, or null
   */
  check(): string | null {
    const max = Number(this._maxGpus.value);
    if (Number.isInteger(max) && max >= 1) {
      this._minGpus.max = String(max);
    } else {
      this._minGpus.removeAttribute('max');
    }
    const form = this.getValue();
    this._summary.textContent = sizeSummary(this._file, form);
    const problem = checkForm(form);
    this._problem.textContent = problem ?? '';
    this._problem.hidden = problem === null;
    return problem;
  }

  private _input(
    label: string,
    type: string,
    className: string,
    parent: HTMLElement = this.node
  ): HTMLInputElement {
    const field = el('label', 'jp-edt-field');
    const input = el('input', `jp-mod-styled ${className}`);
    input.type = type;
    field.append(el('span', 'jp-edt-field-label', label), input);
    parent.append(field);
    return input;
  }

  private readonly _file: string;
  private readonly _summary: HTMLParagraphElement;
  private readonly _name: HTMLInputElement;
  private readonly _epochs: HTMLInputElement;
  private readonly _kinds: HTMLInputElement[];
  private readonly _minGpus: HTMLInputElement;
  private readonly _maxGpus: HTMLInputElement;
  private readonly _priority: HTMLInputElement;
  private readonly _args: HTMLInputElement;
  private readonly _problem: HTMLDivElement;
}

/** How submitFile asks the user and tells them; dialogs by default, answers in tests. */
export interface ISubmitUi {
  /**
   * The form's values, or null when the user gave up; `note` says what the
   * script says of its size.
   */
  ask(
    path: string,
    defaults: Partial<ISubmitForm>,
    note: string | null
  ): Promise<ISubmitForm | null>;
  /** Tell the user why the job was not submitted. */
  alert(title: string, message: string): Promise<void>;
}

/** JupyterLab dialogs. */
export const dialogUi: ISubmitUi = {
  async ask(path, defaults, note) {
    const result = await showDialog({
      title: 'Submit as elastic job',
      body: new SubmitForm(path, defaults, note),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })],
      focusNodeSelector: '.jp-edt-submit-max-gpus'
    });
    return result.button.accept ? result.value : null;
  },
  async alert(title, message) {
    await showErrorMessage(title, message);
  }
};

/** The dialog's first values: the file's name, and the script's own size where it says. */
export function scriptDefaults(
  program: IProgram,
  fit: IFitArguments
): Partial<ISubmitForm> {
  return {
    name: program.name,
    maxGpus: fit.maxGpus?.value ?? 1,
    epochs: fit.epochs?.value ?? null
  };
}

/**
 * Read the file, ask for the job's settings (starting from what the script
 * says) and submit it; the dialog comes back with its values (and the reason)
 * when they are wrong.
 *
 * @returns the job, or null when the user gave up
 */
export async function submitFile(
  path: string,
  contents: Contents.IManager,
  submit: (spec: IJobSubmission) => Promise<IJobInfo> = spec => submitJob(spec),
  ui: ISubmitUi = dialogUi
): Promise<IJobInfo | null> {
  let program: IProgram;
  try {
    const model = await contents.get(path, { content: true });
    program = programOf(path, model.content);
  } catch (reason) {
    await ui.alert('The file could not be read', reasonMessage(reason));
    return null;
  }
  const fit = readFitArguments(program.code);
  const file = path.split('/').pop() ?? path;
  const note = scriptNote(file, fit, line => whereInProgram(program, line));
  let defaults = scriptDefaults(program, fit);
  for (;;) {
    const form = await ui.ask(path, defaults, note);
    if (form === null) {
      return null;
    }
    defaults = form;
    const problem = checkForm(form);
    if (problem !== null) {
      await ui.alert('Cannot submit the job', problem);
      continue;
    }
    try {
      return await submit(submission(program, form, fit));
    } catch (reason) {
      await ui.alert('The job was not submitted', reasonMessage(reason));
      return null;
    }
  }
}
