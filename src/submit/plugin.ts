/** The submit plugin: "Submit as Elastic Job…" on .py files and notebooks. */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';

import { CommandIDs, IEdtJobs } from '../tokens';
import { edtIcon } from '../icons';
import { submitFile } from './dialog';
import { isSubmittable } from './script';

/**
 * The path of the file the context menu was opened on: the file browser's
 * selection (a right click selects the item), else the item under the click.
 */
function contextPath(
  app: JupyterFrontEnd,
  browser: IDefaultFileBrowser | null
): string | null {
  if (!browser) {
    return null;
  }
  for (const item of browser.selectedItems()) {
    if (isSubmittable(item.path)) {
      return item.path;
    }
  }
  const node = app.contextMenuHitTest(n =>
    n.classList.contains('jp-DirListing-item')
  );
  const name = node?.querySelector('.jp-DirListing-itemText')?.textContent;
  return name ? PathExt.join(browser.model.path, name) : null;
}

export const submitPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:submit',
  description: 'Submit a Python file or a notebook as an elastic training job.',
  autoStart: true,
  requires: [IEdtJobs],
  optional: [IDefaultFileBrowser],
  activate: (
    app: JupyterFrontEnd,
    edtJobs: IEdtJobs,
    browser: IDefaultFileBrowser | null
  ): void => {
    app.commands.addCommand(CommandIDs.submitFile, {
      label: 'Submit as Elastic Job…',
      caption: 'Run this file as an elastic training job',
      icon: edtIcon,
      isVisible: () => {
        const path = contextPath(app, browser);
        return path !== null && isSubmittable(path);
      },
      execute: async args => {
        const path =
          (args.path as string | undefined) ?? contextPath(app, browser);
        if (!path || !isSubmittable(path)) {
          throw new Error('Choose a .py file or a notebook to submit.');
        }
        const job = await submitFile(path, app.serviceManager.contents, spec =>
          edtJobs.submit(spec)
        );
        if (job) {
          Notification.success(`Submitted ${job.name} [${job.id}].`, {
            autoClose: 5000,
            actions: [
              { label: 'Open', callback: () => void edtJobs.open(job.id) }
            ]
          });
        }
        return job;
      }
    });
    for (const type of ['python', 'notebook']) {
      app.contextMenu.addItem({
        command: CommandIDs.submitFile,
        selector: `.jp-DirListing-item[data-file-type="${type}"]`,
        rank: 60
      });
    }
  }
};
