/**
 * The ipywidgets models and views, kept thin: the job view renders a
 * `JobPanel` over a `JobController` that fetches from the REST and WebSocket
 * API itself; the loss chart model keeps the kernel's data in a `ChartData`.
 */
import {
  DOMWidgetModel,
  DOMWidgetView,
  type IBackboneModelOptions
} from '@jupyter-widgets/base';
import { ServerConnection } from '@jupyterlab/services';

import { LossChart } from '../charts/loss';
import { DEFAULT_MAX_POINTS } from '../charts/downsample';
import { ChartData, REQUEST_DATA } from './chartdata';
import { JobController } from '../jobpanel/controller';
import { restJobApi, webSocketFactory } from '../api';
import { JobPanel } from '../jobpanel/panel';
import { MODULE_NAME, MODULE_VERSION } from './version';

const MODULE = {
  _model_module: MODULE_NAME,
  _model_module_version: MODULE_VERSION,
  _view_module: MODULE_NAME,
  _view_module_version: MODULE_VERSION
};

/** `JobWidget`'s model: only the job's identity and display settings. */
export class JobModel extends DOMWidgetModel {
  defaults(): any {
    return {
      ...super.defaults(),
      ...MODULE,
      _model_name: 'JobModel',
      _view_name: 'JobView',
      job_id: '',
      log_tail: 30
    };
  }
}

/** Renders one job; its controller talks to the server, not to the kernel. */
export class JobView extends DOMWidgetView {
  render(): void {
    this.el.classList.add('jp-edt-job-widget');
    this._build();
    this.listenTo(this.model, 'change:job_id change:log_tail', () =>
      this._build()
    );
  }

  remove(): any {
    this._teardown();
    return super.remove();
  }

  private _build(): void {
    this._teardown();
    const jobId = String(this.model.get('job_id') ?? '');
    if (!jobId) {
      this.el.textContent = 'No job.';
      return;
    }
    this.el.textContent = '';
    const settings = ServerConnection.makeSettings();
    const controller = new JobController({
      jobId,
      api: restJobApi(settings),
      connect: webSocketFactory(settings),
      logTail: Number(this.model.get('log_tail')) || 30
    });
    this._panel = new JobPanel({ controller });
    this.el.appendChild(this._panel.node);
    void controller.start();
  }

  private _teardown(): void {
    if (this._panel) {
      const controller = this._panel.controller;
      this._panel.dispose();
      controller.dispose();
      this._panel = null;
    }
  }

  private _panel: JobPanel | null = null;
}

/** `LossChart`'s model: the points live here, sent by the kernel in buffers. */
export class LossChartModel extends DOMWidgetModel {
  defaults(): any {
    return {
      ...super.defaults(),
      ...MODULE,
      _model_name: 'LossChartModel',
      _view_name: 'LossChartView',
      title: '',
      height: 240,
      max_points: DEFAULT_MAX_POINTS
    };
  }

  initialize(attributes: any, options: IBackboneModelOptions): void {
    super.initialize(attributes, options);
    this.data = new ChartData(
      Number(this.get('max_points')) || DEFAULT_MAX_POINTS
    );
    this.on('msg:custom', (content: unknown, buffers: DataView[]) => {
      if (this.data.apply(content, buffers ?? [])) {
        this.trigger('data:changed');
      }
    });
    // A new model (first display, or a page reload restoring it from the
    // kernel) asks for everything the kernel holds.
    if (this.comm_live) {
      this.send(REQUEST_DATA);
    }
  }

  // `declare`: set in initialize(), which Backbone's constructor calls; a class
  // field would be reset to undefined after it.
  declare data: ChartData;
}

/** Renders the loss chart of its model's data. */
export class LossChartView extends DOMWidgetView {
  render(): void {
    this.el.classList.add('jp-edt-loss-chart-widget');
    this._title = document.createElement('div');
    this._title.className = 'jp-edt-loss-chart-title';
    this._chart = new LossChart({
      height: Number(this.model.get('height')) || 240
    });
    this.el.append(this._title, this._chart.node);
    this.listenTo(this.model, 'data:changed', () => this._scheduleDraw());
    this.listenTo(this.model, 'change:title', () => this._drawTitle());
    this._drawTitle();
    this._draw();
  }

  remove(): any {
    if (this._frame !== null) {
      cancelAnimationFrame(this._frame);
    }
    this._chart?.dispose();
    this._chart = null;
    return super.remove();
  }

  private _drawTitle(): void {
    const title = String(this.model.get('title') ?? '');
    this._title.textContent = title;
    this._title.hidden = !title;
  }

  private _scheduleDraw(): void {
    if (this._frame === null) {
      this._frame = requestAnimationFrame(() => {
        this._frame = null;
        this._draw();
      });
    }
  }

  private _draw(): void {
    const data = (this.model as LossChartModel).data;
    if (this._chart && data) {
      this._chart.update(data.named());
      this.el.dataset.points = String(data.pointCount);
    }
  }

  private _title!: HTMLDivElement;
  private _chart: LossChart | null = null;
  private _frame: number | null = null;
}
