/**
 * The sidebar plugin: the Elastic Training panel in the left area (the job
 * list, the devices and the GPU usage), over the jobs of `IEdtJobs`.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import type { ReadonlyJSONObject } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';

import { restJobApi } from '../api';
import { edtIcon } from '../icons';
import { DEFAULT_SETTINGS, PLUGIN_ID, watchSettings } from '../settings';
import { CommandIDs, IEdtJobs } from '../tokens';
import { parseFilter } from '../jobs/state';
import { createJobActions } from './actions';
import { addJobRowCommands } from './commands';
import { EdtSidebar } from './widget';

/** Rank of the sidebar in the left area (after the file browser and friends). */
const SIDEBAR_RANK = 600;

/** Where the sidebar's filter is kept between page loads. */
const FILTER_KEY = 'jupyter-edt:job-filter';

export const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Elastic Training: the job list and devices sidebar.',
  autoStart: true,
  requires: [IEdtJobs],
  optional: [ILayoutRestorer, ICommandPalette, ISettingRegistry, IStateDB],
  activate: (
    app: JupyterFrontEnd,
    edtJobs: IEdtJobs,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    registry: ISettingRegistry | null,
    state: IStateDB | null
  ): void => {
    let settings = { ...DEFAULT_SETTINGS };
    // A row's actions, on hover and in its context menu; a cancel goes
    // through the REST client's cancelJob.
    const actions = createJobActions({
      jobs: edtJobs.model,
      api: restJobApi(ServerConnection.makeSettings()),
      open: jobId => void edtJobs.open(jobId)
    });
    addJobRowCommands(app, actions);
    const sidebar = new EdtSidebar({
      jobs: edtJobs.model,
      openJob: jobId => void edtJobs.open(jobId),
      openCluster: () => void app.commands.execute(CommandIDs.openCluster),
      actions
    });
    app.shell.add(sidebar, 'left', { rank: SIDEBAR_RANK });
    if (restorer) {
      restorer.add(sidebar, sidebar.id);
    }

    // The job list is live while the sidebar is seen.
    let watching: IDisposable | null = null;
    const updateWatch = () => {
      if (sidebar.isVisible && watching === null) {
        watching = edtJobs.watch();
      } else if (!sidebar.isVisible && watching !== null) {
        watching.dispose();
        watching = null;
      }
    };

    // Who I am (for "My jobs" and the usage table), then the saved filter:
    // an administrator sees everyone's jobs unless they chose otherwise.
    let admin = false;
    const ready = edtJobs.user.then(me => {
      if (me) {
        sidebar.me = me;
        admin = me.admin;
      }
    });
    const restoreFilter = async () => {
      const saved = state ? await state.fetch(FILTER_KEY) : undefined;
      sidebar.filter = saved
        ? parseFilter(saved)
        : {
            scope: settings.showAllUsers || admin ? 'all' : 'mine',
            state: 'all'
          };
      sidebar.filterChanged.connect((_, filter) => {
        void state?.save(FILTER_KEY, filter as unknown as ReadonlyJSONObject);
      });
    };
    const loadSettings = watchSettings(registry, loaded => {
      settings = loaded;
    });
    void Promise.all([loadSettings, ready, app.restored])
      .then(restoreFilter)
      .then(() => {
        sidebar.visibilityChanged.connect(updateWatch);
        updateWatch();
      });

    app.commands.addCommand(CommandIDs.openSidebar, {
      label: 'Open Elastic Training',
      caption: 'Show the Elastic Training sidebar',
      icon: edtIcon,
      execute: () => {
        app.shell.activateById(sidebar.id);
      }
    });
    palette?.addItem({
      command: CommandIDs.openSidebar,
      category: 'Elastic Training'
    });
  }
};
