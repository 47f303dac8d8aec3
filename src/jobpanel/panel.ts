/**
 * The job widget's DOM: name, state badge and kind tag, GPUs now/max with the
 * allocation timeline, epoch/step progress, the live loss chart, a log tail,
 * and cancel / priority / max-GPU controls. It renders a `JobController` and
 * calls its actions; it fetches nothing itself.
 */
import { Poll } from '@lumino/polling';

import { AllocationTimeline } from '../charts/allocation';
import { lossChartEmptyText, timelineEmptyText } from '../charts/empty';
import { LossChart } from '../charts/loss';
import { el } from '../dom';
import { ALL_LOGS, FOLDED_LOGS, type JobController } from './controller';
import { confirmCancelDialog } from './dialogs';
import { PRIORITY_MAX, PRIORITY_MIN } from '../api';
import { describeKind } from '../format';
import { describeProgress } from '../jobs/progress';
import { FOLDED_LABEL, FOLDED_TITLE, NO_OUTPUT } from './logtext';

/** Options of a job panel. */
export interface IJobPanelOptions {
  controller: JobController;
  /** Ask before cancelling (default: a JupyterLab dialog). */
  confirmCancel?: (name: string) => Promise<boolean>;
}

/** A series' last value; null when it has none. */
function lastValue(
  buffer: { y: readonly number[] } | undefined
): number | null {
  return buffer && buffer.y.length > 0 ? buffer.y[buffer.y.length - 1] : null;
}

function formatNumber(value: number): string {
  if (value === 0) {
    return '0';
  }
  const abs = Math.abs(value);
  return abs >= 1000 || abs < 0.001
    ? value.toExponential(3)
    : value.toPrecision(4);
}

/** The rendered job. */
export class JobPanel {
  constructor(options: IJobPanelOptions) {
    this.controller = options.controller;
    this._confirmCancel = options.confirmCancel ?? confirmCancelDialog;
    const node = (this.node = el('div', 'jp-edt-job'));
    node.dataset.jobId = this.controller.jobId;

    // Header: name, id, state, kind, connection.
    const header = el('div', 'jp-edt-job-header');
    this._name = el('span', 'jp-edt-job-name', this.controller.jobId);
    this._id = el('span', 'jp-edt-job-id jp-edt-muted', this.controller.jobId);
    this._state = el('span', 'jp-edt-state-badge', '…');
    this._kind = el('span', 'jp-edt-kind-tag');
    this._kind.hidden = true;
    this._connection = el('span', 'jp-edt-connection');
    header.append(
      this._name,
      this._id,
      this._state,
      this._kind,
      this._connection
    );

    this._error = el('div', 'jp-edt-error');
    this._error.setAttribute('role', 'alert');
    this._reason = el('div', 'jp-edt-job-reason jp-edt-muted');

    // Figures: GPUs, progress, last loss.
    const stats = el('div', 'jp-edt-job-stats');
    this._gpus = el('span', 'jp-edt-job-gpus');
    this._progressText = el('span', 'jp-edt-job-progress-text');
    this._bar = el('div', 'jp-edt-job-progress-bar');
    this._barFill = el('div', 'jp-edt-job-progress-fill');
    this._bar.append(this._barFill);
    this._bar.setAttribute('role', 'progressbar');
    this._bar.setAttribute('aria-valuemin', '0');
    this._bar.setAttribute('aria-valuemax', '100');
    this._lossText = el('span', 'jp-edt-job-loss');
    stats.append(
      this._labelled('GPUs', this._gpus),
      this._labelled('Progress', this._progressText, this._bar),
      this._labelled('Loss', this._lossText)
    );

    // Charts.
    const charts = el('div', 'jp-edt-job-charts');
    this.lossChart = new LossChart({ height: 220 });
    this.timeline = new AllocationTimeline({ height: 130 });
    charts.append(this.lossChart.node, this.timeline.node);

    // Controls.
    const controls = el('div', 'jp-edt-job-controls');
    this._priority = this._numberInput(
      'jp-edt-job-priority',
      PRIORITY_MIN,
      PRIORITY_MAX
    );
    this._maxGpus = this._numberInput('jp-edt-job-max-gpus', 1, 4096);
    this._priority.addEventListener('change', () => {
      const value = Number(this._priority.value);
      if (Number.isInteger(value) && value !== this.controller.job?.priority) {
        void this.controller.setPriority(value);
      }
    });
    this._maxGpus.addEventListener('change', () => {
      const value = Number(this._maxGpus.value);
      if (Number.isInteger(value) && value !== this.controller.job?.max_gpus) {
        void this.controller.setMaxGpus(value);
      }
    });
    this._cancel = el('button', 'jp-edt-job-cancel jp-Button', 'Cancel job');
    this._cancel.type = 'button';
    this._cancel.addEventListener('click', () => void this._onCancel());
    controls.append(
      this._labelled('Priority', this._priority),
      this._labelled('Max GPUs', this._maxGpus),
      this._cancel
    );

    // Logs.
    const logs = el('details', 'jp-edt-job-logs');
    logs.open = true;
    const summary = el('summary', 'jp-edt-job-logs-summary', 'Logs');
    this._logSelect = el('select', 'jp-edt-job-log-select');
    this._logSelect.setAttribute('aria-label', 'Log');
    this._logSelect.addEventListener('change', () => {
      void this.controller.selectLog(this._logSelect.value);
    });
    this._logText = el('pre', 'jp-edt-job-log-text');
    logs.append(summary, this._logSelect, this._logText);

    node.append(
      header,
      this._error,
      this._reason,
      stats,
      charts,
      controls,
      logs
    );

    this.controller.changed.connect(this._scheduleRender, this);
    if (typeof IntersectionObserver !== 'undefined') {
      this._visibility = new IntersectionObserver(entries => {
        const entry = entries[entries.length - 1];
        this.controller.setVisible(entry?.isIntersecting ?? true);
      });
      this._visibility.observe(node);
    }
    // A running job's timeline reaches "now": extend it now and then.
    this._clock = new Poll({
      auto: false,
      factory: async () => this._scheduleRender(),
      frequency: { interval: 5000, backoff: false, max: 5000 },
      name: `jupyter-edt:timeline:${this.controller.jobId}`,
      standby: () => this.controller.done || 'when-hidden'
    });
    this.render();
    void this._clock.start();
  }

  readonly node: HTMLDivElement;
  readonly controller: JobController;
  readonly lossChart: LossChart;
  readonly timeline: AllocationTimeline;

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Draw the controller's state now. */
  render(): void {
    if (this._disposed) {
      return;
    }
    const c = this.controller;
    const job = c.job;
    this.node.dataset.state = job?.state ?? 'LOADING';
    this.node.dataset.connection = c.connection;

    this._name.textContent = job?.name || 'job';
    this._id.textContent = `[${c.jobId}]`;
    this._state.textContent = job?.state ?? 'LOADING';
    this._state.dataset.state = job?.state ?? 'LOADING';
    this._connection.dataset.status = c.connection;
    this._connection.title = `Live updates: ${c.connection}`;

    this._error.textContent = c.error ?? '';
    this._error.hidden = c.error === null;
    const reason = job && job.state !== 'RUNNING' ? job.reason : '';
    this._reason.textContent = reason ? reason.split('\n')[0] : '';
    this._reason.hidden = !reason;

    const held = job?.devices.length ?? 0;
    this._gpus.textContent = job ? `${held} / ${job.max_gpus}` : '–';
    const kind = job ? describeKind(job) : null;
    this._kind.hidden = kind === null;
    this._kind.textContent = kind?.label ?? '';
    this._kind.title = kind?.title ?? '';
    this._kind.dataset.kind = kind?.kind ?? '';
    this._kind.dataset.fixed = String(kind?.fixed ?? false);
    // One wording everywhere: `epoch e/E · step s/S` (jobs/progress.ts).
    const { text, fraction } = job
      ? describeProgress(c.progress, job)
      : { text: '', fraction: null };
    this._progressText.textContent = text || '–';
    this._bar.hidden = fraction === null;
    const percent = Math.round((fraction ?? 0) * 100);
    this._barFill.style.width = `${percent}%`;
    this._bar.setAttribute('aria-valuenow', String(percent));
    const progress = c.loss.progress;
    const lossParts: string[] = [];
    // A WMLA program's own loop reports its losses only as emetrics.
    const trainLoss =
      progress?.lastLoss ?? lastValue(c.loss.emetrics.get('train/loss'));
    if (trainLoss !== null) {
      lossParts.push(`train ${formatNumber(trainLoss)}`);
    }
    const val = lastValue(c.loss.validation.get('val_loss'));
    if (val !== null) {
      lossParts.push(`val ${formatNumber(val)}`);
    }
    const test = lastValue(c.loss.emetrics.get('test/loss'));
    if (test !== null && val === null) {
      lossParts.push(`test ${formatNumber(test)}`);
    }
    if (progress?.samplesPerS) {
      lossParts.push(`${Math.round(progress.samplesPerS)} samples/s`);
    }
    this._lossText.textContent = lossParts.join(' · ') || '–';

    const series = c.loss.series();
    this.lossChart.update(series);
    const state = job?.state ?? null;
    this.lossChart.setEmptyText(lossChartEmptyText(state));
    this.timeline.setEmptyText(timelineEmptyText(state));
    // A running job holds its GPUs until now; a finished one released them.
    const done = job !== null && c.done;
    const until = job && !done ? Date.now() / 1000 : null;
    this.timeline.update(
      c.allocation.columns(until),
      job?.max_gpus ?? null,
      done ? { time: job.finished ?? null } : null
    );
    this.node.dataset.points = String(c.loss.train.length);
    this.node.dataset.series = series
      .filter(s => s.x.length > 0)
      .map(s => s.name)
      .join(' ');

    const frozen = !job || c.done || c.busy;
    this._priority.disabled = frozen;
    this._maxGpus.disabled = frozen;
    this._cancel.disabled = frozen;
    if (job) {
      this._setValue(this._priority, job.priority);
      this._setValue(this._maxGpus, job.max_gpus);
    }

    this._renderLogs();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._clock.dispose();
    if (this._frame !== null && typeof cancelAnimationFrame === 'function') {
      cancelAnimationFrame(this._frame);
    }
    this._visibility?.disconnect();
    this.controller.changed.disconnect(this._scheduleRender, this);
    this.lossChart.dispose();
    this.timeline.dispose();
    this.node.remove();
  }

  private _renderLogs(): void {
    const { choices, selected, text } = this.controller.logs;
    const current = Array.from(this._logSelect.options).map(o => o.value);
    if (current.join('\n') !== choices.join('\n')) {
      this._logSelect.replaceChildren(
        ...choices.map(name => {
          const option = document.createElement('option');
          option.value = name;
          option.textContent =
            name === ALL_LOGS
              ? 'all logs'
              : name === FOLDED_LOGS
                ? `${FOLDED_LABEL} (folded)`
                : name;
          if (name === FOLDED_LOGS) {
            option.title = FOLDED_TITLE;
          }
          return option;
        })
      );
    }
    this._logSelect.value = selected;
    this._logSelect.hidden = choices.length <= 1;
    const shown = text || NO_OUTPUT;
    const folded = selected === FOLDED_LOGS;
    this._logText.classList.toggle('jp-mod-empty', !text);
    this._logText.dataset.log = selected;
    if (this._logText.textContent !== shown) {
      const atEnd =
        this._logText.scrollTop + this._logText.clientHeight >=
        this._logText.scrollHeight - 4;
      this._logText.textContent = shown;
      // A folded failure reads from its top (the traceback); a log from its end.
      if (folded) {
        this._logText.scrollTop = 0;
      } else if (atEnd) {
        this._logText.scrollTop = this._logText.scrollHeight;
      }
    }
  }

  private async _onCancel(): Promise<void> {
    const job = this.controller.job;
    if (!job) {
      return;
    }
    const name = `${job.name || 'job'} [${job.id}]`;
    if (await this._confirmCancel(name)) {
      await this.controller.cancel();
    }
  }

  private _scheduleRender(): void {
    if (this._frame !== null || this._disposed) {
      return;
    }
    if (typeof requestAnimationFrame !== 'function') {
      this.render();
      return;
    }
    this._frame = requestAnimationFrame(() => {
      this._frame = null;
      this.render();
    });
  }

  private _setValue(input: HTMLInputElement, value: number): void {
    // Leave a value the user is typing alone.
    if (document.activeElement !== input && input.value !== String(value)) {
      input.value = String(value);
    }
  }

  private _numberInput(
    className: string,
    min: number,
    max: number
  ): HTMLInputElement {
    const input = el('input', `${className} jp-edt-number`);
    input.type = 'number';
    input.min = String(min);
    input.max = String(max);
    input.step = '1';
    return input;
  }

  private _labelled(label: string, ...content: HTMLElement[]): HTMLElement {
    const field = el('label', 'jp-edt-field');
    field.append(el('span', 'jp-edt-field-label', label), ...content);
    return field;
  }

  private readonly _confirmCancel: (name: string) => Promise<boolean>;
  private readonly _name: HTMLSpanElement;
  private readonly _id: HTMLSpanElement;
  private readonly _state: HTMLSpanElement;
  private readonly _connection: HTMLSpanElement;
  private readonly _error: HTMLDivElement;
  private readonly _reason: HTMLDivElement;
  private readonly _gpus: HTMLSpanElement;
  private readonly _kind: HTMLSpanElement;
  private readonly _progressText: HTMLSpanElement;
  private readonly _bar: HTMLDivElement;
  private readonly _barFill: HTMLDivElement;
  private readonly _lossText: HTMLSpanElement;
  private readonly _priority: HTMLInputElement;
  private readonly _maxGpus: HTMLInputElement;
  private readonly _cancel: HTMLButtonElement;
  private readonly _logSelect: HTMLSelectElement;
  private readonly _logText: HTMLPreElement;
  private readonly _visibility: IntersectionObserver | null = null;
  private readonly _clock: Poll;
  private _frame: number | null = null;
  private _disposed = false;
}
