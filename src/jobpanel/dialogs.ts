/**
 * The questions an action on a job asks first, as JupyterLab dialogs: the job
 * widget, the job tab and the sidebar's row actions ask the same way.
 */
import { Dialog, InputDialog, showDialog } from '@jupyterlab/apputils';

import { PRIORITY_MAX, PRIORITY_MIN } from '../api';

/** Ask whether to cancel the job (`name`: its name and id). */
export async function confirmCancelDialog(name: string): Promise<boolean> {
  const result = await showDialog({
    title: 'Cancel training job',
    body: `Cancel ${name}? Its processes stop and its GPUs are freed; checkpoints stay.`,
    buttons: [
      Dialog.cancelButton({ label: 'Keep running' }),
      Dialog.warnButton({ label: 'Cancel job' })
    ]
  });
  return result.button.accept;
}

/** Ask for a new priority; null when the user gave up or typed no whole number. */
export async function askPriorityDialog(
  current: number
): Promise<number | null> {
  const result = await InputDialog.getNumber({
    title: `Change priority (${PRIORITY_MIN} to ${PRIORITY_MAX}; higher is served first)`,
    value: current,
    okLabel: 'Change priority'
  });
  return result.button.accept && Number.isInteger(result.value)
    ? result.value
    : null;
}

/** Ask for the most GPUs the job may hold; null when the user gave up. */
export async function askMaxGpusDialog(
  current: number
): Promise<number | null> {
  const result = await InputDialog.getNumber({
    title: 'Change the most GPUs the job may hold',
    value: current,
    okLabel: 'Change max GPUs'
  });
  const value = result.value;
  return result.button.accept &&
    value !== null &&
    Number.isInteger(value) &&
    value >= 1
    ? value
    : null;
}
