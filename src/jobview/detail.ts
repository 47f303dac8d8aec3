/**
 * A job's detail tab in the main area. The notebook job widget's panel
 * (JobPanel over a JobController: header, GPUs, progress, loss chart and
 * allocation timeline) is reused as is; this tab adds what a full page has
 * room for: the allocation changes (and a restart job's restarts), logs with
 * per-process tabs and follow, the spec, the artifacts, and actions that each
 * ask for confirmation first.
 */
import { ServerConnection } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';
import { Widget } from '@lumino/widgets';
import type { Message } from '@lumino/messaging';

import {
  downloadUrl,
  listArtifacts,
  type IArtifact,
  jobKind,
  restJobApi,
  webSocketFactory,
  reasonMessage,
  type IJobInfo
} from '../api';
import { el } from '../dom';
import { formatBytes } from '../format';
import { ALL_LOGS, FOLDED_LOGS, JobController } from '../jobpanel/controller';
import {
  askMaxGpusDialog,
  askPriorityDialog,
  confirmCancelDialog
} from '../jobpanel/dialogs';
import { FOLDED_LABEL, FOLDED_TITLE, NO_OUTPUT } from '../jobpanel/logtext';
import { JobPanel } from '../jobpanel/panel';
import { plainCodeViewer, type CodeViewer } from './codeviewer';
import { specCode, specRows } from './spec';
import {
  allocationChanges,
  clockTime,
  describeChange,
  describeFormed,
  describeRestart,
  withFormedGroups
} from './timeline';

/** Lines of log shown (and followed) in the tab. */
const LOG_TAIL = 400;

/** How the tab asks the user; dialogs by default, answers in tests. */
export interface IConfirm {
  cancel(name: string): Promise<boolean>;
  priority(current: number): Promise<number | null>;
  maxGpus(current: number): Promise<number | null>;
}

/** JupyterLab dialogs: each change is typed and confirmed, or dropped. */
export const dialogConfirm: IConfirm = {
  cancel: confirmCancelDialog,
  priority: askPriorityDialog,
  maxGpus: askMaxGpusDialog
};

/** Options of a detail tab. */
export interface IJobDetailOptions {
  /** The job's controller; a REST/WebSocket one for `jobId` by default. */
  controller?: JobController;
  jobId: string;
  settings?: ServerConnection.ISettings;
  confirm?: IConfirm;
  /** Told each answer of an action, so the job list reflects it at once. */
  onJobChanged?: (job: IJobInfo) => void;
  /** Lists the artifacts (REST by default). */
  listArtifacts?: (jobId: string) => Promise<IArtifact[]>;
  /** Cap on points per chart series. */
  maxPoints?: number;
  /** Shows the job's code (read-only); plain text by default. */
  codeViewer?: CodeViewer;
}

function section(title: string, className: string): HTMLElement {
  const node = el('section', `jp-edt-detail-section ${className}`);
  node.append(el('h3', 'jp-edt-section-title', title));
  return node;
}

/** One line of the allocation changes: its clock time, what changed, and how training went on. */
function changeLine(
  time: number,
  what: string,
  after: string | null
): HTMLLIElement {
  // Columns of one grid (style/jobs.css); the spaces between them are for
  // copying and for screen readers.
  const item = el('li', 'jp-edt-change-line');
  item.append(
    el('span', 'jp-edt-change-time jp-edt-muted', clockTime(time)),
    ' ',
    el('span', 'jp-edt-change-what', what)
  );
  if (after !== null) {
    item.append(' ', el('span', 'jp-edt-change-after jp-edt-muted', after));
  }
  return item;
}

/** The detail tab's content. */
export class JobDetail extends Widget {
  constructor(options: IJobDetailOptions) {
    super();
    this.jobId = options.jobId;
    this.id = `jupyter-edt-job-${options.jobId}`;
    this.addClass('jp-edt-jobdetail');
    this.node.dataset.jobId = options.jobId;
    this.title.label = `Job ${options.jobId}`;
    this.title.caption = `Job ${options.jobId}`;
    this.title.closable = true;
    const settings = options.settings ?? ServerConnection.makeSettings();
    this._settings = settings;
    this._confirm = options.confirm ?? dialogConfirm;
    this._onJobChanged = options.onJobChanged ?? null;
    this._codeViewer = options.codeViewer ?? plainCodeViewer;
    this._listArtifacts =
      options.listArtifacts ?? (jobId => listArtifacts(jobId, settings));
    this.controller =
      options.controller ??
      new JobController({
        jobId: options.jobId,
        api: restJobApi(settings),
        connect: webSocketFactory(settings),
        logTail: LOG_TAIL,
        maxPoints: options.maxPoints
      });
    this.panel = new JobPanel({
      controller: this.controller,
      confirmCancel: name => this._confirm.cancel(name)
    });

    // Actions, each confirmed.
    const actions = el('div', 'jp-edt-detail-actions');
    this._cancel = this._button('Cancel job…', 'jp-edt-action-cancel', () =>
      this.cancel()
    );
    this._priority = this._button(
      'Change priority…',
      'jp-edt-action-priority',
      () => this.changePriority()
    );
    this._maxGpus = this._button(
      'Change max GPUs…',
      'jp-edt-action-max-gpus',
      () => this.changeMaxGpus()
    );
    actions.append(this._cancel, this._priority, this._maxGpus);

    // Allocation changes, under the panel's timeline.
    const changes = section('Allocation changes', 'jp-edt-detail-allocation');
    this._changes = el('ul', 'jp-edt-allocation-changes');
    changes.append(this._changes);

    // Logs: one tab per process, and follow.
    const logs = section('Logs', 'jp-edt-detail-logs');
    const bar = el('div', 'jp-edt-log-bar');
    this._logTabs = el('div', 'jp-edt-log-tabs');
    this._logTabs.setAttribute('role', 'tablist');
    const follow = el('label', 'jp-edt-log-follow');
    this._follow = el('input', 'jp-edt-log-follow-input');
    this._follow.type = 'checkbox';
    this._follow.checked = true;
    follow.append(this._follow, document.createTextNode(' Follow'));
    bar.append(this._logTabs, follow);
    this._logText = el('pre', 'jp-edt-detail-log-text');
    this._logText.setAttribute('role', 'log');
    logs.append(bar, this._logText);

    // Spec (a table, and the code read-only) and artifacts.
    const spec = section('Spec', 'jp-edt-detail-spec');
    this._spec = el('table', 'jp-edt-spec-table');
    this._code = el('div', 'jp-edt-spec-code');
    this._code.hidden = true;
    spec.append(this._spec, this._code);
    const artifacts = section('Artifacts', 'jp-edt-detail-artifacts');
    this._artifacts = el('ul', 'jp-edt-artifact-list');
    this._zip = el('a', 'jp-edt-result-zip', 'Download everything (zip)');
    this._zip.href = downloadUrl(this.jobId, null, settings);
    this._zip.setAttribute('download', '');
    artifacts.append(this._artifacts, this._zip);

    const extra = el('div', 'jp-edt-detail-extra');
    extra.append(changes, logs, spec, artifacts);
    this.node.append(actions, this.panel.node, extra);

    this.controller.changed.connect(this._render, this);
    void this.controller.start();
    this._render();
  }

  readonly jobId: string;
  readonly controller: JobController;
  readonly panel: JobPanel;

  /** Cancel the job once the user confirms. */
  async cancel(): Promise<void> {
    const job = this.controller.job;
    if (
      job &&
      (await this._confirm.cancel(`${job.name || 'job'} [${job.id}]`))
    ) {
      await this.controller.cancel();
      this._reflect();
    }
  }

  /** Ask for a new priority, then set it. */
  async changePriority(): Promise<void> {
    const job = this.controller.job;
    const value = job ? await this._confirm.priority(job.priority) : null;
    if (value !== null && value !== job?.priority) {
      await this.controller.setPriority(value);
      this._reflect();
    }
  }

  /** Ask for a new maximum GPU count, then set it. */
  async changeMaxGpus(): Promise<void> {
    const job = this.controller.job;
    const value = job ? await this._confirm.maxGpus(job.max_gpus) : null;
    if (value !== null && value !== job?.max_gpus) {
      await this.controller.setMaxGpus(value);
      this._reflect();
    }
  }

  /** Read the artifact list again. */
  async refreshArtifacts(): Promise<void> {
    try {
      const artifacts = await this._listArtifacts(this.jobId);
      this._renderArtifacts(artifacts);
    } catch (reason) {
      this._artifacts.replaceChildren(
        el(
          'li',
          'jp-edt-error',
          `The artifacts could not be listed: ${reasonMessage(reason)}`
        )
      );
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.controller.changed.disconnect(this._render, this);
    this._codeView?.dispose();
    this.panel.dispose();
    this.controller.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.controller.setVisible(true);
    this.panel.lossChart.fit();
    this.panel.timeline.fit();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.controller.setVisible(false);
  }

  private _reflect(): void {
    const job = this.controller.job;
    if (job && this._onJobChanged) {
      this._onJobChanged(job);
    }
  }

  private _render(): void {
    if (this.isDisposed) {
      return;
    }
    const c = this.controller;
    const job = c.job;
    if (job) {
      // The whole name on the tab; the id (and state) in its tooltip.
      const name = job.name || `Job ${job.id}`;
      this.title.label = name;
      this.title.caption = `${name} [${job.id}] · ${job.state}`;
      this.node.dataset.state = job.state;
      this._renderSpec(job);
    }
    const frozen = !job || c.done || c.busy;
    this._cancel.disabled = frozen;
    this._priority.disabled = frozen;
    this._maxGpus.disabled = frozen;

    // Allocation changes and restarts, oldest first.
    const { x, y } = c.allocation.points;
    const kind = job ? jobKind(job) : 'elastic';
    const seen = `${x.length}/${c.formed.length}/${c.restarts.length}/${kind}`;
    if (seen !== this._changesSeen) {
      this._changesSeen = seen;
      const changes = withFormedGroups(allocationChanges(x, y), c.formed).map(
        change => {
          const formed = change.formed
            ? describeFormed(change.formed, kind)
            : null;
          const item = changeLine(change.time, describeChange(change), formed);
          item.classList.add('jp-edt-allocation-change');
          item.dataset.gpus = String(change.to);
          return { time: change.time, item };
        }
      );
      const restarts = c.restarts.map(restart => {
        const item = changeLine(restart.time, describeRestart(restart), null);
        item.classList.add('jp-edt-restart');
        item.title = restart.reason;
        item.dataset.gpus = String(restart.world_size ?? '');
        item.dataset.cause = restart.cause;
        // Workers killed after the grace lost the steps since their checkpoint.
        item.classList.toggle('jp-mod-warn', restart.killed.length > 0);
        return { time: restart.time, item };
      });
      // A restart follows the change that caused it (at the same time, below it).
      const lines = [...changes, ...restarts].sort((a, b) => a.time - b.time);
      this._changes.replaceChildren(...lines.map(line => line.item));
      if (lines.length === 0) {
        this._changes.append(
          el('li', 'jp-edt-muted jp-edt-allocation-none', 'no GPUs yet')
        );
      }
    }

    this._renderLogTabs();

    // Artifacts: once loaded, and again when the job finishes.
    if (job && !this._artifactsLoaded) {
      this._artifactsLoaded = true;
      void this.refreshArtifacts();
    }
    if (c.done && !this._artifactsFinal) {
      this._artifactsFinal = true;
      void this.refreshArtifacts();
    }
  }

  private _renderLogTabs(): void {
    const { choices, selected, text } = this.controller.logs;
    if (choices.join('\n') !== this._tabNames.join('\n')) {
      this._tabNames = choices;
      this._logTabs.replaceChildren(
        ...choices.map(name => {
          const tab = el(
            'button',
            'jp-edt-log-tab jp-Button jp-mod-minimal',
            name === ALL_LOGS
              ? 'all'
              : name === FOLDED_LOGS
                ? FOLDED_LABEL
                : name
          );
          tab.type = 'button';
          tab.dataset.log = name;
          tab.setAttribute('role', 'tab');
          if (name === FOLDED_LOGS) {
            tab.title = FOLDED_TITLE;
          }
          tab.addEventListener(
            'click',
            () => void this.controller.selectLog(name)
          );
          return tab;
        })
      );
    }
    for (const tab of Array.from(this._logTabs.children)) {
      const active = (tab as HTMLElement).dataset.log === selected;
      tab.classList.toggle('jp-mod-active', active);
      tab.setAttribute('aria-selected', String(active));
    }
    const shown = text || NO_OUTPUT;
    const folded = selected === FOLDED_LOGS;
    this._logText.classList.toggle('jp-mod-empty', !text);
    this._logText.dataset.log = selected;
    if (this._logText.textContent !== shown) {
      this._logText.textContent = shown;
      // A folded failure reads from its top (the traceback); a log from its end.
      if (folded) {
        this._logText.scrollTop = 0;
      } else if (this._follow.checked) {
        this._logText.scrollTop = this._logText.scrollHeight;
      }
    }
  }

  /** The spec table and the code, drawn again only when the spec or GPUs change. */
  private _renderSpec(job: IJobInfo): void {
    const rows = specRows(job);
    const seen = JSON.stringify(rows);
    if (seen !== this._specSeen) {
      this._specSeen = seen;
      this._spec.replaceChildren(
        ...rows.map(row => {
          const tr = el('tr', 'jp-edt-spec-row');
          const value = el('td', 'jp-edt-spec-value', row.value);
          value.classList.toggle('jp-mod-code', row.code === true);
          tr.append(el('th', 'jp-edt-spec-label', row.label), value);
          tr.firstElementChild?.setAttribute('scope', 'row');
          return tr;
        })
      );
    }
    const code = specCode(job);
    if (code !== null && this._codeView === null) {
      this._code.hidden = false;
      this._code.dataset.path = code.path;
      this._codeView = this._codeViewer(this._code, code.code, code.path);
    }
  }

  private _renderArtifacts(artifacts: IArtifact[]): void {
    if (artifacts.length === 0) {
      this._artifacts.replaceChildren(
        el(
          'li',
          'jp-edt-muted',
          'No artifacts yet (files the job writes to RESULT_DIR).'
        )
      );
      return;
    }
    this._artifacts.replaceChildren(
      ...artifacts.map(artifact => {
        const item = el('li', 'jp-edt-artifact');
        const link = el('a', 'jp-edt-artifact-link', artifact.path);
        link.href = downloadUrl(this.jobId, artifact.path, this._settings);
        link.setAttribute('download', artifact.path.split('/').pop() ?? '');
        item.append(
          link,
          el('span', 'jp-edt-muted', ` ${formatBytes(artifact.size)}`)
        );
        return item;
      })
    );
  }

  private _button(
    label: string,
    className: string,
    action: () => Promise<void>
  ): HTMLButtonElement {
    const button = el('button', `jp-Button jp-mod-styled ${className}`, label);
    button.type = 'button';
    button.addEventListener('click', () => void action());
    return button;
  }

  private readonly _settings: ServerConnection.ISettings;
  private readonly _confirm: IConfirm;
  private readonly _onJobChanged: ((job: IJobInfo) => void) | null;
  private readonly _listArtifacts: (jobId: string) => Promise<IArtifact[]>;
  private readonly _cancel: HTMLButtonElement;
  private readonly _priority: HTMLButtonElement;
  private readonly _maxGpus: HTMLButtonElement;
  private readonly _changes: HTMLUListElement;
  private readonly _logTabs: HTMLDivElement;
  private readonly _follow: HTMLInputElement;
  private readonly _logText: HTMLPreElement;
  private readonly _spec: HTMLTableElement;
  private readonly _code: HTMLDivElement;
  private readonly _codeViewer: CodeViewer;
  private _codeView: IDisposable | null = null;
  private _specSeen = '';
  private readonly _artifacts: HTMLUListElement;
  private readonly _zip: HTMLAnchorElement;
  private _tabNames: string[] = [];
  private _changesSeen = '';
  private _artifactsLoaded = false;
  private _artifactsFinal = false;
}
