/**
 * Registers the jupyter-edt ipywidgets (JobWidget, LossChart) with the
 * widget manager of `@jupyter-widgets/jupyterlab-manager`, when it is there.
 * The models and views (and uPlot) load only when a notebook shows one.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { IJupyterWidgetRegistry } from '@jupyter-widgets/base';

import { MODULE_NAME, MODULE_VERSION } from './version';

export const widgetsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:widgets',
  description: 'The job and loss chart widgets of %%edt_submit and LossChart.',
  autoStart: true,
  optional: [IJupyterWidgetRegistry],
  activate: (
    app: JupyterFrontEnd,
    registry: IJupyterWidgetRegistry | null
  ): void => {
    if (!registry) {
      return; // no ipywidgets manager: notebooks show the jobs' text and HTML
    }
    registry.registerWidget({
      name: MODULE_NAME,
      version: MODULE_VERSION,
      exports: async () => {
        const models = await import('./models');
        return {
          JobModel: models.JobModel,
          JobView: models.JobView,
          LossChartModel: models.LossChartModel,
          LossChartView: models.LossChartView
        };
      }
    });
  }
};
