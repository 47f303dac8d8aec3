/** The cluster plugin: the GPU cluster view, one main-area tab. */
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

import { edtIcon } from '../icons';
import { addMainTab } from '../shell';
import { CommandIDs, IEdtJobs } from '../tokens';
import { CLUSTER_ID, ClusterPanel } from './panel';

export const clusterPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:cluster',
  description:
    'Elastic Training: every device, its holder and its utilisation.',
  autoStart: true,
  requires: [IEdtJobs],
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    edtJobs: IEdtJobs,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const tracker = new WidgetTracker<MainAreaWidget<ClusterPanel>>({
      namespace: 'jupyter-edt-cluster'
    });
    app.commands.addCommand(CommandIDs.openCluster, {
      label: 'Open GPU Cluster View',
      caption: 'Show every device, its holder and its utilisation',
      icon: edtIcon,
      execute: async () => {
        const open = tracker.currentWidget;
        if (open && !open.isDisposed) {
          app.shell.activateById(open.id);
          return open;
        }
        const content = new ClusterPanel({
          openJob: jobId => void edtJobs.open(jobId),
          jobName: jobId =>
            edtJobs.model.state.jobs.get(jobId)?.job.name ?? null
        });
        const widget = new MainAreaWidget({ content });
        widget.id = `${CLUSTER_ID}-tab`;
        widget.title.label = content.title.label;
        widget.title.icon = edtIcon;
        return addMainTab(app, tracker, widget);
      }
    });
    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openCluster,
        name: () => 'cluster'
      });
    }
    palette?.addItem({
      command: CommandIDs.openCluster,
      category: 'Elastic Training'
    });
  }
};
