/**
 * The jobs plugin: the live job list and the job tabs, offered to every other
 * part (and to other extensions) as `IEdtJobs`.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { DisposableDelegate } from '@lumino/disposable';

import {
  fetchUser,
  readJobList,
  restJobApi,
  submitJob,
  webSocketFactory
} from '../api';
import { edtIcon } from '../icons';
import { addMainTab, jobIdUnderContextMenu } from '../shell';
import { DEFAULT_SETTINGS, keepLossScale, watchSettings } from '../settings';
import { JobsModel } from '../jobs/model';
import { CommandIDs, IEdtJobs } from '../tokens';
import { editorCodeViewer } from './codeviewer';
import { JobDetail } from './detail';

/** Whether the browser tab is visible (always, outside a browser). */
function pageShown(): boolean {
  return (
    typeof document === 'undefined' || document.visibilityState !== 'hidden'
  );
}

export const jobsPlugin: JupyterFrontEndPlugin<IEdtJobs> = {
  id: 'jupyter-edt:jobs',
  description:
    'Elastic Training jobs: the live job list and the job tabs (IEdtJobs).',
  autoStart: true,
  provides: IEdtJobs,
  optional: [ILayoutRestorer, ISettingRegistry, IEditorServices],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    registry: ISettingRegistry | null,
    editorServices: IEditorServices | null
  ): IEdtJobs => {
    const serverSettings = ServerConnection.makeSettings();
    const api = restJobApi(serverSettings);
    let maxChartPoints = DEFAULT_SETTINGS.maxChartPoints;
    void watchSettings(registry, settings => {
      maxChartPoints = settings.maxChartPoints;
    });
    // Every loss chart's log toggle (job tabs and notebook widgets alike) is
    // kept in the settings, once for the page.
    void keepLossScale(registry);

    // A job's code shows read-only, highlighted, in JupyterLab's editor.
    const codeViewer = editorServices
      ? editorCodeViewer(editorServices)
      : undefined;

    const model = new JobsModel({
      listJobs: () => readJobList([], serverSettings),
      getJob: jobId => api.getJob(jobId),
      connect: webSocketFactory(serverSettings)
    });

    // The events connection: while someone watches the list (the sidebar
    // shown, notifications wanted), and only while the browser tab is visible.
    const watchers = new Set<DisposableDelegate>();
    const updateActivity = () =>
      model.setActive(pageShown() && watchers.size > 0);
    document.addEventListener('visibilitychange', updateActivity);

    // Job detail tabs, restored with the layout.
    const tracker = new WidgetTracker<MainAreaWidget<JobDetail>>({
      namespace: 'jupyter-edt-job'
    });
    app.commands.addCommand(CommandIDs.openJob, {
      label: args => (args.jobId ? `Open Job ${args.jobId}` : 'Open Job'),
      caption: 'Show a training job in a tab',
      icon: edtIcon,
      execute: async args => {
        // From a context menu, the job it was opened on.
        const jobId = String(args.jobId ?? jobIdUnderContextMenu(app) ?? '');
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
          maxPoints: maxChartPoints,
          onJobChanged: job => model.update(job),
          codeViewer
        });
        const widget = new MainAreaWidget({ content });
        widget.id = content.id;
        widget.title.icon = edtIcon;
        // Its tab is as wide as the job's whole name (style/jobs.css).
        widget.title.className = 'jp-edt-job-tab';
        widget.addClass('jp-edt-jobdetail-tab');
        const copyTitle = () => {
          widget.title.label = content.title.label;
          widget.title.caption = content.title.caption;
        };
        content.title.changed.connect(copyTitle);
        copyTitle();
        return addMainTab(app, tracker, widget);
      }
    });
    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openJob,
        args: widget => ({ jobId: widget.content.jobId }),
        name: widget => widget.content.jobId
      });
    }

    return {
      model,
      user: fetchUser(serverSettings).catch(reason => {
        console.warn('jupyter-edt: the user could not be read', reason);
        return null;
      }),
      watch: () => {
        const watcher = new DisposableDelegate(() => {
          watchers.delete(watcher);
          updateActivity();
        });
        watchers.add(watcher);
        updateActivity();
        return watcher;
      },
      open: async jobId => {
        await app.commands.execute(CommandIDs.openJob, { jobId });
      },
      submit: spec => submitJob(spec, serverSettings)
    };
  }
};
