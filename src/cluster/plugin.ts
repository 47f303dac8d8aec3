/**
 * The cluster plugin: the GPU cluster view, one main-area tab, and the
 * allocation timeline, in that view and in a tab of its own.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import type { Widget } from '@lumino/widgets';

import { edtIcon } from '../icons';
import { addMainTab } from '../shell';
import { CommandIDs, IEdtJobs } from '../tokens';
import { CLUSTER_ID, ClusterPanel } from './panel';
import { TIMELINE_ID, TimelinePanel } from './timeline';

/** The tab of `tracker` if it is open: brought to the front. */
function reopen<T extends Widget>(
  app: JupyterFrontEnd,
  tracker: WidgetTracker<T>
): T | null {
  const open = tracker.currentWidget;
  if (open && !open.isDisposed) {
    app.shell.activateById(open.id);
    return open;
  }
  return null;
}

export const clusterPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:cluster',
  description:
    'Elastic Training: every device, its holder and its utilisation, and who held which GPU when.',
  autoStart: true,
  requires: [IEdtJobs],
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    edtJobs: IEdtJobs,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const jobName = (jobId: string) =>
      edtJobs.model.state.jobs.get(jobId)?.job.name ?? null;
    const openJob = (jobId: string) => void edtJobs.open(jobId);

    const tracker = new WidgetTracker<MainAreaWidget<ClusterPanel>>({
      namespace: 'jupyter-edt-cluster'
    });
    app.commands.addCommand(CommandIDs.openCluster, {
      label: 'Open GPU Cluster View',
      caption: 'Show every device, its holder and its utilisation',
      icon: edtIcon,
      execute: async () => {
        const open = reopen(app, tracker);
        if (open) {
          return open;
        }
        const content = new ClusterPanel({
          openJob,
          jobName,
          openTimeline: () => void app.commands.execute(CommandIDs.openTimeline)
        });
        const widget = new MainAreaWidget({ content });
        widget.id = `${CLUSTER_ID}-tab`;
        widget.title.label = content.title.label;
        widget.title.icon = edtIcon;
        return addMainTab(app, tracker, widget);
      }
    });

    const timelines = new WidgetTracker<MainAreaWidget<TimelinePanel>>({
      namespace: 'jupyter-edt-allocation-timeline'
    });
    app.commands.addCommand(CommandIDs.openTimeline, {
      label: 'Open Allocation Timeline',
      caption:
        'Show which job held each GPU over time, and why each change happened',
      icon: edtIcon,
      execute: async () => {
        const open = reopen(app, timelines);
        if (open) {
          return open;
        }
        const content = new TimelinePanel({ openJob, jobName });
        const widget = new MainAreaWidget({ content });
        widget.id = `${TIMELINE_ID}-tab`;
        widget.title.label = content.title.label;
        widget.title.caption = content.title.caption;
        widget.title.icon = edtIcon;
        return addMainTab(app, timelines, widget);
      }
    });

    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openCluster,
        name: () => 'cluster'
      });
      void restorer.restore(timelines, {
        command: CommandIDs.openTimeline,
        name: () => 'allocation-timeline'
      });
    }
    for (const command of [CommandIDs.openCluster, CommandIDs.openTimeline]) {
      palette?.addItem({ command, category: 'Elastic Training' });
    }
  }
};
