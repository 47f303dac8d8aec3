import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  Notification,
  WidgetTracker
} from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import type { ReadonlyJSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import { fetchUser, listJobs } from './api';
import { CLUSTER_ID, ClusterPanel } from './cluster';
import { DEFAULT_MAX_POINTS } from './charts/downsample';
import { edtIcon } from './icons';
import { JobDetail } from './jobview';
import { jobNotice } from './notify';
import { EdtSidebar, JobsModel, parseFilter } from './sidebar';
import { isSubmittable, submitFile } from './submit';
import { restJobApi, webSocketFactory } from './api';
import { widgetsPlugin } from './widgets/plugin';

/** Command ids of the extension. */
export namespace CommandIDs {
  export const openSidebar = 'jupyter-edt:open-sidebar';
  export const openJob = 'jupyter-edt:open-job';
  export const submitFile = 'jupyter-edt:submit-file';
  export const openCluster = 'jupyter-edt:open-cluster';
}

/** The plugin whose settings (schema/plugin.json) every part reads. */
export const PLUGIN_ID = 'jupyter-edt:plugin';

/** Rank of the sidebar in the left area (after the file browser and friends). */
const SIDEBAR_RANK = 600;

/** Where the sidebar's filter is kept between page loads. */
const FILTER_KEY = 'jupyter-edt:job-filter';

/** The settings of schema/plugin.json. */
interface ISettings {
  showAllUsers: boolean;
  maxChartPoints: number;
  notifications: boolean;
}

const DEFAULT_SETTINGS: ISettings = {
  showAllUsers: false,
  maxChartPoints: DEFAULT_MAX_POINTS,
  notifications: true
};

function readSettings(settings: ISettingRegistry.ISettings): ISettings {
  const value = settings.composite as Partial<ISettings>;
  return {
    showAllUsers: value.showAllUsers ?? DEFAULT_SETTINGS.showAllUsers,
    maxChartPoints: value.maxChartPoints ?? DEFAULT_SETTINGS.maxChartPoints,
    notifications: value.notifications ?? DEFAULT_SETTINGS.notifications
  };
}

/**
 * The Elastic Training sidebar (jobs and devices), the job detail tabs, and
 * the notifications of my finished jobs, over one live job list.
 */
const mainPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Elastic Training: the job list and devices sidebar, job tabs and notifications.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ISettingRegistry, IStateDB],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    registry: ISettingRegistry | null,
    state: IStateDB | null
  ): void => {
    const serverSettings = ServerConnection.makeSettings();
    const api = restJobApi(serverSettings);
    let settings: ISettings = { ...DEFAULT_SETTINGS };
    let user: string | null = null;

    const jobs = new JobsModel({
      listJobs: () => listJobs([], serverSettings),
      getJob: jobId => api.getJob(jobId),
      connect: webSocketFactory(serverSettings)
    });

    // Job detail tabs, restored with the layout.
    const tracker = new WidgetTracker<MainAreaWidget<JobDetail>>({
      namespace: 'jupyter-edt-job'
    });
    app.commands.addCommand(CommandIDs.openJob, {
      label: args => (args.jobId ? `Open Job ${args.jobId}` : 'Open Job'),
      caption: 'Show a training job in a tab',
      icon: edtIcon,
      execute: async args => {
        const jobId = String(args.jobId ?? '');
        if (!jobId) {
          throw new Error('jupyter-edt:open-job needs a jobId argument.');
        }
        const open = tracker.find(w => w.content.jobId === jobId);
        if (open) {
          app.shell.activateById(open.id);
          return open;
        }
        const content = new JobDetail({
          jobId,
          settings: serverSettings,
          maxPoints: settings.maxChartPoints,
          onJobChanged: job => jobs.update(job)
        });
        const widget = new MainAreaWidget({ content });
        widget.id = content.id;
        widget.title.icon = edtIcon;
        widget.addClass('jp-edt-jobdetail-tab');
        content.title.changed.connect(() => {
          widget.title.label = content.title.label;
          widget.title.caption = content.title.caption;
        });
        widget.title.label = content.title.label;
        await tracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
        return widget;
      }
    });
    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openJob,
        args: widget => ({ jobId: widget.content.jobId }),
        name: widget => widget.content.jobId
      });
    }
    const openJob = (jobId: string) =>
      void app.commands.execute(CommandIDs.openJob, { jobId });

    const jobName = (jobId: string) =>
      jobs.state.jobs.get(jobId)?.job.name ?? null;

    // The cluster view, one tab, restored with the layout.
    const clusterTracker = new WidgetTracker<MainAreaWidget<ClusterPanel>>({
      namespace: 'jupyter-edt-cluster'
    });
    app.commands.addCommand(CommandIDs.openCluster, {
      label: 'Open GPU Cluster View',
      caption: 'Show every device, its holder and its utilisation',
      icon: edtIcon,
      execute: async () => {
        const open = clusterTracker.currentWidget;
        if (open && !open.isDisposed) {
          app.shell.activateById(open.id);
          return open;
        }
        const content = new ClusterPanel({ openJob, jobName });
        const widget = new MainAreaWidget({ content });
        widget.id = `${CLUSTER_ID}-tab`;
        widget.title.label = content.title.label;
        widget.title.icon = edtIcon;
        await clusterTracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
        return widget;
      }
    });
    if (restorer) {
      void restorer.restore(clusterTracker, {
        command: CommandIDs.openCluster,
        name: () => 'cluster'
      });
    }
    const openCluster = () => void app.commands.execute(CommandIDs.openCluster);

    // The sidebar.
    const sidebar = new EdtSidebar({ jobs, openJob, openCluster });
    app.shell.add(sidebar, 'left', { rank: SIDEBAR_RANK });
    if (restorer) {
      restorer.add(sidebar, sidebar.id);
    }

    // The events connection: while the sidebar is seen, or notifications are
    // wanted, and only while the browser tab is visible.
    const updateActivity = () => {
      const pageShown =
        typeof document === 'undefined' ||
        document.visibilityState !== 'hidden';
      jobs.setActive(
        pageShown && (sidebar.isVisible || settings.notifications)
      );
    };
    sidebar.visibilityChanged.connect(updateActivity);
    document.addEventListener('visibilitychange', updateActivity);

    // Notifications of my jobs' ends, with a button to open them.
    jobs.finished.connect((_, finished) => {
      const notice = jobNotice(finished, user, settings.notifications);
      if (notice === null) {
        return;
      }
      Notification.emit(notice.message, notice.type, {
        autoClose: notice.type === 'error' ? false : 8000,
        actions: [
          {
            label: 'Open',
            caption: 'Open the job in a tab',
            callback: () => openJob(finished.job.id)
          }
        ]
      });
    });

    // Who I am (for "My jobs" and notifications), then the saved filter.
    const ready = fetchUser(serverSettings)
      .then(me => {
        user = me.name;
        sidebar.user = me.name;
      })
      .catch(reason => {
        console.warn('jupyter-edt: the user could not be read', reason);
      });
    const restoreFilter = async () => {
      const saved = state ? await state.fetch(FILTER_KEY) : undefined;
      sidebar.filter = saved
        ? parseFilter(saved)
        : { scope: settings.showAllUsers ? 'all' : 'mine', state: 'all' };
      sidebar.filterChanged.connect((_, filter) => {
        void state?.save(FILTER_KEY, filter as unknown as ReadonlyJSONObject);
      });
    };

    const loadSettings = registry
      ? registry
          .load(PLUGIN_ID)
          .then(loaded => {
            settings = readSettings(loaded);
            loaded.changed.connect(() => {
              settings = readSettings(loaded);
              updateActivity();
            });
          })
          .catch(reason => {
            console.warn('jupyter-edt: settings not loaded', reason);
          })
      : Promise.resolve();
    void Promise.all([loadSettings, ready, app.restored])
      .then(restoreFilter)
      .then(updateActivity);

    app.commands.addCommand(CommandIDs.openSidebar, {
      label: 'Open Elastic Training',
      caption: 'Show the Elastic Training sidebar',
      icon: edtIcon,
      execute: () => {
        app.shell.activateById(sidebar.id);
      }
    });
    if (palette) {
      for (const command of [CommandIDs.openSidebar, CommandIDs.openCluster]) {
        palette.addItem({ command, category: 'Elastic Training' });
      }
    }
  }
};

/** The part of the file browser the submit command reads (no hard dependency). */
interface IFileBrowserLike {
  model: { path: string };
  selectedItems(): IterableIterator<{ path: string; type: string }>;
}

/** The default file browser, found in the left area by its id. */
function defaultFileBrowser(app: JupyterFrontEnd): IFileBrowserLike | null {
  for (const widget of app.shell.widgets('left')) {
    const candidate = widget as Widget & Partial<IFileBrowserLike>;
    if (
      widget.id === 'filebrowser' &&
      typeof candidate.selectedItems === 'function'
    ) {
      return candidate as unknown as IFileBrowserLike;
    }
  }
  return null;
}

/** The path of the file the context menu was opened on. */
function contextPath(app: JupyterFrontEnd): string | null {
  const browser = defaultFileBrowser(app);
  if (browser) {
    for (const item of browser.selectedItems()) {
      if (isSubmittable(item.path)) {
        return item.path;
      }
    }
  }
  const node = app.contextMenuHitTest(n =>
    n.classList.contains('jp-DirListing-item')
  );
  const name = node?.querySelector('.jp-DirListing-itemText')?.textContent;
  if (name && browser) {
    return PathExt.join(browser.model.path, name);
  }
  return null;
}

/** "Submit as elastic job…" on .py files and notebooks in the file browser. */
const submitPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:submit',
  description: 'Submit a Python file or a notebook as an elastic training job.',
  autoStart: true,
  activate: (app: JupyterFrontEnd): void => {
    app.commands.addCommand(CommandIDs.submitFile, {
      label: 'Submit as Elastic Job…',
      caption: 'Run this file as an elastic training job',
      icon: edtIcon,
      isVisible: () => {
        const path = contextPath(app);
        return path !== null && isSubmittable(path);
      },
      execute: async args => {
        const path = (args.path as string | undefined) ?? contextPath(app);
        if (!path || !isSubmittable(path)) {
          throw new Error('Choose a .py file or a notebook to submit.');
        }
        const job = await submitFile(path, app.serviceManager.contents);
        if (job) {
          Notification.success(`Submitted ${job.name} [${job.id}].`, {
            autoClose: 5000,
            actions: [
              {
                label: 'Open',
                callback: () =>
                  void app.commands.execute(CommandIDs.openJob, {
                    jobId: job.id
                  })
              }
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

export * from './api';
export { edtIcon } from './icons';

export default [mainPlugin, submitPlugin, widgetsPlugin];
