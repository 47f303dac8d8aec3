/**
 * "Submit as elastic job…": the dialog (max GPUs, priority, arguments) and
 * the submission through POST /jobs. The file's text is read through the
 * Contents API, so a path relative to the file browser's root works with any
 * server root and base URL.
 */
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import type { Contents } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import {
  PRIORITY_MAX,
  PRIORITY_MIN,
  reasonMessage,
  submitJob,
  type IJobSubmission,
  type IJobInfo
} from '../api';
import { checkForm, submission, type ISubmitForm } from './script';

/** The dialog's body: three labelled inputs. */
export class SubmitForm
  extends Widget
  implements Dialog.IBodyWidget<ISubmitForm>
{
  constructor(path: string, defaults: Partial<ISubmitForm> = {}) {
    super();
    this.addClass('jp-edt-submit-form');
    const intro = document.createElement('p');
    intro.textContent = `Run ${path} as an elastic training job. It gets between 1 and "max GPUs" GPUs, as the scheduler shares them.`;
    this._maxGpus = this._input('Max GPUs', 'number', 'jp-edt-submit-max-gpus');
    this._maxGpus.min = '1';
    this._maxGpus.value = String(defaults.maxGpus ?? 2);
    this._priority = this._input(
      'Priority',
      'number',
      'jp-edt-submit-priority'
    );
    this._priority.min = String(PRIORITY_MIN);
    this._priority.max = String(PRIORITY_MAX);
    this._priority.value = String(defaults.priority ?? 0);
    this._args = this._input('Arguments', 'text', 'jp-edt-submit-args');
    this._args.placeholder = '--epochs 3 --lr 0.1';
    this._args.value = defaults.args ?? '';
    this.node.prepend(intro);
  }

  getValue(): ISubmitForm {
    return {
      maxGpus: Number(this._maxGpus.value),
      priority: Number(this._priority.value),
      args: this._args.value
    };
  }

  private _input(
    label: string,
    type: string,
    className: string
  ): HTMLInputElement {
    const field = document.createElement('label');
    field.className = 'jp-edt-field';
    const text = document.createElement('span');
    text.className = 'jp-edt-field-label';
    text.textContent = label;
    const input = document.createElement('input');
    input.type = type;
    input.className = `jp-mod-styled ${className}`;
    field.append(text, input);
    this.node.append(field);
    return input;
  }

  private readonly _maxGpus: HTMLInputElement;
  private readonly _priority: HTMLInputElement;
  private readonly _args: HTMLInputElement;
}

/**
 * Ask for the job's settings, read the file and submit it; the dialog comes
 * back with its values (and the reason) when the server refuses them.
 *
 * @returns the job, or null when the user gave up
 */
export async function submitFile(
  path: string,
  contents: Contents.IManager,
  submit: (spec: IJobSubmission) => Promise<IJobInfo> = spec => submitJob(spec)
): Promise<IJobInfo | null> {
  let defaults: Partial<ISubmitForm> = {};
  for (;;) {
    const result = await showDialog({
      title: 'Submit as elastic job',
      body: new SubmitForm(path, defaults),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })],
      focusNodeSelector: 'input'
    });
    if (!result.button.accept || result.value === null) {
      return null;
    }
    const form = result.value;
    defaults = form;
    const problem = checkForm(form);
    if (problem !== null) {
      await showErrorMessage('Cannot submit the job', problem);
      continue;
    }
    try {
      const model = await contents.get(path, { content: true });
      return await submit(submission(path, model.content, form));
    } catch (reason) {
      await showErrorMessage(
        'The job was not submitted',
        reasonMessage(reason)
      );
      return null;
    }
  }
}
