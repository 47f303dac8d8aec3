/**
 * Everything the job widget knows about its job, fetched by the browser itself
 * (not through the kernel): the job (GET jobs/{id}), its metrics history
 * (GET jobs/{id}/metrics), then the live events WebSocket, and log tails on an
 * interval while the widget is visible and the job runs. Both periodic fetches
 * (log tails, and retries of a job that could not be loaded) are Lumino
 * `Poll`s that back off on errors and stand by while the page is hidden. No
 * DOM: the view renders `JobController`'s state and calls its actions.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import type { IDisposable } from '@lumino/disposable';

import { DEFAULT_MAX_POINTS } from '../charts/downsample';
import { AllocationSeries, LossSeries } from '../charts/series';
import type { IFormedGroup, IRestart } from '../jobview/timeline';
import { advanceProgress, type IJobProgress } from '../jobs/progress';
import {
  EventStream,
  type ConnectionStatus,
  TERMINAL_STATES,
  withRuntimeChange,
  type IJobApi,
  type IJobEvent,
  type IJobInfo,
  type IMetricRecord,
  type SocketFactory,
  reasonMessage
} from '../api';

/** The "log" choice that shows the tail of every non-empty log. */
export const ALL_LOGS = '';

/**
 * The "log" choice of a failed job that shows its logs folded by the server
 * (GET jobs/{id}/logs?fold=true): each traceback once with the workers that
 * printed it, the user's frames first, the framework's folded. No log is
 * named so (a log's name ends in .out, .log, ...). A failed job shows it
 * first; the raw logs stay a choice away.
 */
export const FOLDED_LOGS = ':folded';

/** The longest wait (ms) between two tries to load a job. */
const MAX_RETRY_DELAY = 60_000;

/** Options of a job controller. */
export interface IJobControllerOptions {
  jobId: string;
  api: IJobApi;
  connect: SocketFactory;
  /** Lines of log tail (default 30). */
  logTail?: number;
  /** Milliseconds between log refreshes while running (default 3 s). */
  logInterval?: number;
  /** Cap on points per chart series (default 100k). */
  maxPoints?: number;
  /**
   * Retry delay (ms) after the job could not be loaded (default 2 s, growing
   * up to twofold at each failure, at most 60 s).
   */
  retryDelay?: number;
  /** Options passed to the event stream (tests shorten delays). */
  stream?: { minDelay?: number; maxDelay?: number; silenceTimeout?: number };
  /** The clock, in seconds (default Date.now() / 1000). */
  now?: () => number;
}

/** A log tail as shown. */
export interface ILogTail {
  /** Log names, driver first. */
  names: string[];
  /**
   * What a view offers, in order: FOLDED_LOGS (a failed job's), ALL_LOGS,
   * then each log by name.
   */
  choices: string[];
  /** The chosen log, ALL_LOGS or FOLDED_LOGS. */
  selected: string;
  /**
   * The tail text (with `==> name <==` headers for ALL_LOGS; the folded
   * tracebacks, then each log's last lines, for FOLDED_LOGS).
   */
  text: string;
}

/** One job's live state for a widget. */
export class JobController implements IDisposable {
  constructor(options: IJobControllerOptions) {
    this.jobId = options.jobId;
    this._api = options.api;
    this._connect = options.connect;
    this._logTail = options.logTail ?? 30;
    const logInterval = options.logInterval ?? 3000;
    this._logPoll = new Poll({
      auto: false,
      factory: () => this._readLogs(),
      frequency: {
        interval: logInterval,
        backoff: true,
        max: 10 * logInterval
      },
      name: `jupyter-edt:logs:${this.jobId}`,
      // A log tail is read only while the widget and the page are seen.
      standby: () => !this._visible || 'when-hidden'
    });
    const retryDelay = options.retryDelay ?? 2000;
    this._loadPoll = new Poll({
      auto: false,
      factory: () => this._load(),
      frequency: {
        interval: retryDelay,
        backoff: 2,
        max: Math.max(retryDelay, MAX_RETRY_DELAY)
      },
      name: `jupyter-edt:job:${this.jobId}`,
      standby: 'when-hidden'
    });
    this._streamOptions = options.stream ?? {};
    this._now = options.now ?? (() => Date.now() / 1000);
    const maxPoints = options.maxPoints ?? DEFAULT_MAX_POINTS;
    this.loss = new LossSeries(maxPoints);
    this.allocation = new AllocationSeries(maxPoints);
  }

  readonly jobId: string;

  /** Train and validation curves. */
  readonly loss: LossSeries;

  /** GPU count over time. */
  readonly allocation: AllocationSeries;

  /** The groups the workers formed, oldest first (`formed` events). */
  readonly formed: IFormedGroup[] = [];

  /** A restart job's restarts of all its workers, oldest first, each once (`restart` events). */
  readonly restarts: IRestart[] = [];

  /**
   * Where training is (epoch, step within it, and the totals the runtime
   * reported); null before any metric record.
   */
  get progress(): IJobProgress | null {
    return this._progress;
  }

  /** The job as last known; null until loaded. */
  get job(): IJobInfo | null {
    return this._job;
  }

  /** Whether the job has finished. */
  get done(): boolean {
    return this._job !== null && TERMINAL_STATES.has(this._job.state);
  }

  /** The last error (loading, an action), for the view; null when none. */
  get error(): string | null {
    return this._error;
  }

  /** The events connection. */
  get connection(): ConnectionStatus {
    return this._stream?.status ?? 'closed';
  }

  /** The log tail. */
  get logs(): ILogTail {
    return this._logs;
  }

  /** An action (cancel, priority, max GPUs) is in flight. */
  get busy(): boolean {
    return this._busy;
  }

  /** Emitted after any change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The last event id received (where the stream resumes). */
  get lastEventId(): number {
    return this._stream?.lastId ?? 0;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Load the job and its history, then follow its events. */
  async start(): Promise<void> {
    if (this._started || this._disposed) {
      return;
    }
    this._started = true;
    try {
      await this._load();
    } catch {
      // Not loaded, and worth retrying: the poll retries, backing off.
      void this._loadPoll.schedule({
        interval: this._loadPoll.frequency.interval,
        phase: 'rejected'
      });
    }
  }

  /** Whether the widget is visible: log refreshes run only while it is. */
  setVisible(visible: boolean): void {
    if (visible === this._visible) {
      return;
    }
    this._visible = visible;
    if (visible && this._job !== null) {
      void this.refreshLogs();
    }
  }

  /** Show one log, ALL_LOGS, or (for a failed job) FOLDED_LOGS. */
  selectLog(name: string): Promise<void> {
    this._logs = { ...this._logs, selected: name };
    this._emit();
    return this.refreshLogs();
  }

  /** Fetch the log tail now (a failure is shown in its place). */
  async refreshLogs(): Promise<void> {
    await this._readLogs().catch(() => undefined);
  }

  /** Fetch the log tail; rejects when it could not be read (the poll backs off). */
  private async _readLogs(): Promise<void> {
    if (this._disposed || this._job === null) {
      return;
    }
    const fetched = ++this._logRequest;
    const failed = this._job.state === 'FAILED';
    if (failed && !this._failureShown) {
      // The first read of a failed job shows what failed, folded; the user's
      // choices hold from then on.
      this._failureShown = true;
      this._logs = { ...this._logs, selected: FOLDED_LOGS };
    }
    try {
      let { selected } = this._logs;
      let names: string[];
      let text: string;
      if (selected === FOLDED_LOGS && failed) {
        const folded = await this._api.getFoldedLogs(this.jobId);
        names = folded.logs;
        text = folded.text.trimEnd();
      } else {
        names = await this._api.getLogNames(this.jobId);
        if (selected !== ALL_LOGS && !names.includes(selected)) {
          selected = ALL_LOGS;
        }
        const shown = selected === ALL_LOGS ? names : [selected];
        const chunks = await Promise.all(
          shown.map(name => this._api.getLog(this.jobId, name, this._logTail))
        );
        text =
          selected === ALL_LOGS
            ? chunks
                .filter(chunk => chunk.text.trim().length > 0)
                .map(chunk => `==> ${chunk.name} <==\n${chunk.text.trimEnd()}`)
                .join('\n')
            : (chunks[0]?.text ?? '');
      }
      if (this._disposed || fetched !== this._logRequest) {
        return; // a newer request answers
      }
      const choices = [...(failed ? [FOLDED_LOGS] : []), ALL_LOGS, ...names];
      this._logs = { names, choices, selected, text };
      this._emit();
    } catch (reason) {
      if (!this._disposed) {
        this._logs = {
          ...this._logs,
          text: `(the logs could not be read: ${reasonMessage(reason)})`
        };
        this._emit();
      }
      throw reason;
    }
  }

  /** Cancel the job (the view asks for confirmation first). */
  cancel(): Promise<void> {
    return this._act(() => this._api.cancelJob(this.jobId));
  }

  /** Change the job's priority (PRIORITY_MIN..PRIORITY_MAX). */
  setPriority(priority: number): Promise<void> {
    return this._act(() => this._api.patchJob(this.jobId, { priority }));
  }

  /** Change the most GPUs the job may hold. */
  setMaxGpus(maxGpus: number): Promise<void> {
    return this._act(() =>
      this._api.patchJob(this.jobId, { max_gpus: maxGpus })
    );
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._stream?.stop();
    this._stream = null;
    this._logPoll.dispose();
    this._loadPoll.dispose();
    Signal.clearData(this);
  }

  // -- loading ----------------------------------------------------------------------------

  /**
   * Load the job, its metrics history, then follow its events and read its
   * logs. Rejects when the job could not be loaded and a retry may help.
   */
  private async _load(): Promise<void> {
    try {
      const job = await this._api.getJob(this.jobId);
      if (this._disposed) {
        return;
      }
      this._job = job;
      this._snapshotTime = job.updated;
      this._error = null;
      this._emit();
      await this._fetchMetrics();
      if (this._disposed) {
        return;
      }
      this._loadPoll.dispose(); // loaded: nothing more to retry
      this._openStream();
      if (this.done) {
        // A finished job's logs no longer change: read them once.
        void this.refreshLogs();
      } else {
        void this._logPoll.start();
      }
    } catch (reason) {
      if (this._disposed) {
        return;
      }
      const status = (reason as { response?: { status?: number } }).response
        ?.status;
      this._error =
        status === 404
          ? `Job ${this.jobId} was not found (deleted, or another user's).`
          : `Could not load job ${this.jobId}: ${reasonMessage(reason)}`;
      this._emit();
      if (status !== 404 && this._job === null) {
        throw reason;
      }
      this._loadPoll.dispose(); // not found, or loaded: no retry
    }
  }

  /** Read the metrics history after the cursor, page by page. */
  private async _fetchMetrics(): Promise<void> {
    for (;;) {
      const page = await this._api.getMetrics(this.jobId, this._metricsCursor);
      if (this._disposed || page.metrics.length === 0) {
        return;
      }
      this._metricsCursor = page.cursor;
      if (this._addRecords(page.metrics)) {
        this._emit();
      }
    }
  }

  private _openStream(): void {
    if (this._stream) {
      return;
    }
    this._stream = new EventStream({
      jobId: this.jobId,
      connect: this._connect,
      onEvent: event => this._onEvent(event),
      onStatus: () => this._emit(),
      ...this._streamOptions
    });
    this._stream.start();
  }

  // -- events -----------------------------------------------------------------------------

  private _onEvent(event: IJobEvent): void {
    const job = this._job;
    if (job === null) {
      return;
    }
    const time = typeof event.time === 'number' ? event.time : this._now();
    // The feed replays the job's whole history: events older than the job we
    // fetched only add to the timeline and charts, not to the current state.
    const current = time >= this._snapshotTime;
    switch (event.kind) {
      case 'elastic':
        if (current) {
          this._job = withRuntimeChange(job, event);
        }
        break;
      case 'state':
        if (current && event.state) {
          this._job = {
            ...withRuntimeChange(job, event),
            state: event.state,
            reason: event.reason ?? job.reason,
            finished: TERMINAL_STATES.has(event.state) ? time : job.finished
          };
        }
        if (event.state && TERMINAL_STATES.has(event.state)) {
          // The job's last event: close the feed, read what may have raced it.
          this._finish(time);
        }
        break;
      case 'formed':
        if (typeof event.world_size === 'number') {
          this.formed.push({
            time,
            world_size: event.world_size,
            pause_s: event.pause_s ?? 0,
            waited_s: event.waited_s ?? null
          });
        }
        break;
      case 'restart':
        if (!this._addRestart(event, time)) {
          return;
        }
        break;
      case 'allocation': {
        const devices = event.devices ?? [];
        this.allocation.add(time, devices.length);
        if (current) {
          this._job = { ...job, devices };
        }
        break;
      }
      case 'limits':
        if (current) {
          this._job = {
            ...job,
            max_gpus: event.max_gpus ?? job.max_gpus,
            priority: event.priority ?? job.priority
          };
        }
        break;
      case 'metrics':
        this._addRecords(event.records ?? []);
        break;
      default:
        return;
    }
    this._emit();
  }

  /** Add metric records to the charts and the progress; true when either changed. */
  private _addRecords(records: readonly IMetricRecord[]): boolean {
    const progress = advanceProgress(this._progress, records);
    const moved = progress !== this._progress;
    this._progress = progress;
    return this.loss.addRecords(records) || moved;
  }

  /**
   * Record a restart in time order (its time is when the workers restarted,
   * which may precede events stored before it); false when already recorded.
   */
  private _addRestart(event: IJobEvent, time: number): boolean {
    const id = typeof event.id === 'number' ? event.id : null;
    const count = event.count ?? 0;
    const seen = this.restarts.some(r =>
      id !== null ? r.id === id : r.time === time && r.count === count
    );
    if (seen) {
      return false;
    }
    const at = this.restarts.findIndex(r => r.time > time);
    this.restarts.splice(at < 0 ? this.restarts.length : at, 0, {
      id,
      time,
      count,
      cause: event.cause ?? '',
      world_size: event.world_size ?? null,
      killed: event.killed ?? [],
      reason: event.reason ?? ''
    });
    return true;
  }

  private _finish(time: number): void {
    if (this._finished) {
      return;
    }
    this._finished = true;
    if (this.allocation.current !== 0 && this.allocation.length > 0) {
      this.allocation.add(time, 0);
    }
    this._stream?.stop();
    // A finished job's logs no longer change: read them once more, then stop
    // polling (they are read again when the widget is shown).
    void this._logPoll.stop();
    void this._fetchMetrics()
      .catch(() => undefined)
      .then(() => this._emit());
    void this.refreshLogs();
  }

  // -- actions ------------------------------------------------------------------------------

  private async _act(call: () => Promise<IJobInfo>): Promise<void> {
    this._busy = true;
    this._emit();
    try {
      const job = await call();
      if (this._disposed) {
        return;
      }
      // Reflect the answer at once; the events that follow agree with it.
      this._job = job;
      this._snapshotTime = Math.max(this._snapshotTime, job.updated);
      this._error = null;
      // A cancelled job's closing events still come through the feed, which
      // then closes (see _onEvent).
    } catch (reason) {
      this._error = reasonMessage(reason);
    } finally {
      this._busy = false;
      this._emit();
    }
  }

  private _emit(): void {
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private readonly _api: IJobApi;
  private readonly _connect: SocketFactory;
  private readonly _logTail: number;
  private readonly _streamOptions: IJobControllerOptions['stream'] & object;
  private readonly _now: () => number;
  private _job: IJobInfo | null = null;
  private _progress: IJobProgress | null = null;
  private _snapshotTime = 0;
  private _error: string | null = null;
  private _metricsCursor = 0;
  private _stream: EventStream | null = null;
  private _logs: ILogTail = {
    names: [],
    choices: [ALL_LOGS],
    selected: ALL_LOGS,
    text: ''
  };
  private _logRequest = 0;
  private _failureShown = false;
  private readonly _logPoll: Poll;
  private readonly _loadPoll: Poll;
  private _visible = true;
  private _busy = false;
  private _started = false;
  private _finished = false;
  private _disposed = false;
  private readonly _changed = new Signal<this, void>(this);
}
