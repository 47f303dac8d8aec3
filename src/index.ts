import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';

import { edtIcon } from './icons';
import { EdtSidebar } from './sidebar';
import { widgetsPlugin } from './widgets/plugin';

/** Command ids of the extension. */
export namespace CommandIDs {
  export const openSidebar = 'jupyter-edt:open-sidebar';
}

/** Rank of the sidebar in the left area (after the file browser and friends). */
const SIDEBAR_RANK = 600;

/** The Elastic Training sidebar and the command that opens it. */
const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:sidebar',
  description: 'The Elastic Training sidebar: devices of the cluster.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const sidebar = new EdtSidebar();
    app.shell.add(sidebar, 'left', { rank: SIDEBAR_RANK });
    if (restorer) {
      restorer.add(sidebar, sidebar.id);
    }

    app.commands.addCommand(CommandIDs.openSidebar, {
      label: 'Open Elastic Training',
      caption: 'Show the Elastic Training sidebar',
      icon: edtIcon,
      execute: () => {
        app.shell.activateById(sidebar.id);
      }
    });
    if (palette) {
      palette.addItem({
        command: CommandIDs.openSidebar,
        category: 'Elastic Training'
      });
    }
  }
};

export * from './api';
export { edtIcon } from './icons';

export default [sidebarPlugin, widgetsPlugin];
