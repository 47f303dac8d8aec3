/**
 * The job rows' context menu, as JupyterLab's file browser makes its own:
 * commands that act on the row the menu was opened on (or on `args.jobId`),
 * and context-menu items with the rows' selector.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { copyIcon, editIcon, stopIcon } from '@jupyterlab/ui-components';

import { jobIdUnderContextMenu } from '../shell';
import { CommandIDs } from '../tokens';
import type { IJobActions } from './actions';

/** The commands on one job that the rows add (opening one is `CommandIDs.openJob`). */
export namespace JobCommandIDs {
  export const cancel = 'jupyter-edt:cancel-job';
  export const changeMaxGpus = 'jupyter-edt:change-max-gpus';
  export const copyId = 'jupyter-edt:copy-job-id';
}

/** What the rows' context menu is opened on. */
export const JOB_ROW_SELECTOR = '.jp-edt-jobrow';

/** Add the row commands and the rows' context menu. */
export function addJobRowCommands(
  app: JupyterFrontEnd,
  actions: IJobActions
): void {
  const target = (args: { jobId?: unknown }): string | null =>
    typeof args.jobId === 'string' && args.jobId
      ? args.jobId
      : jobIdUnderContextMenu(app);
  const active = (args: { jobId?: unknown }): boolean => {
    const jobId = target(args);
    return jobId !== null && actions.isActive(jobId);
  };

  app.commands.addCommand(JobCommandIDs.cancel, {
    label: 'Cancel Job…',
    caption: 'Stop the job and free its GPUs (asks first)',
    icon: stopIcon,
    isEnabled: active,
    execute: async args => {
      const jobId = target(args);
      if (jobId !== null) {
        await actions.cancel(jobId);
      }
    }
  });
  app.commands.addCommand(JobCommandIDs.changeMaxGpus, {
    label: 'Change Max GPUs…',
    caption: 'Change the most GPUs the job may hold',
    icon: editIcon,
    isEnabled: active,
    execute: async args => {
      const jobId = target(args);
      if (jobId !== null) {
        await actions.changeMaxGpus(jobId);
      }
    }
  });
  app.commands.addCommand(JobCommandIDs.copyId, {
    label: 'Copy Job ID',
    caption: "Copy the job's id to the clipboard",
    icon: copyIcon,
    execute: args => {
      const jobId = target(args);
      if (jobId !== null) {
        actions.copyId(jobId);
      }
    }
  });

  const items = [
    CommandIDs.openJob,
    JobCommandIDs.cancel,
    JobCommandIDs.changeMaxGpus,
    JobCommandIDs.copyId
  ];
  items.forEach((command, rank) =>
    app.contextMenu.addItem({ command, selector: JOB_ROW_SELECTOR, rank })
  );
}
