/**
 * The live job list: a snapshot from GET /jobs, then the events WebSocket
 * after the newest event the snapshot includes, applied to it (state.ts). It
 * is the list behind IEdtJobs, which the sidebar, the cluster view and the
 * notifications share. The connection exists only
 * while the model is active (the sidebar shown, or notifications wanted, and
 * the browser tab visible); reactivating resumes after the last event id, so nothing is lost
 * or repeated in between.
 */
import { ISignal, Signal } from '@lumino/signaling';
import type { IDisposable } from '@lumino/disposable';

import {
  EventStream,
  type ConnectionStatus,
  TERMINAL_STATES,
  type IJobEvent,
  type IJobInfo,
  type IJobList,
  type SocketFactory,
  reasonMessage
} from '../api';
import {
  applyEvent,
  fromSnapshot,
  upsertJob,
  type IJobFinished,
  type JobMap
} from './state';

/** What the model needs from the server (the REST client, or a fake in tests). */
export interface IJobsModelOptions {
  /** The jobs, and the newest event they include (`readJobList`). */
  listJobs: () => Promise<IJobList>;
  getJob: (jobId: string) => Promise<IJobInfo>;
  connect: SocketFactory;
  /** Passed to the event stream (tests shorten the delays). */
  stream?: { minDelay?: number; maxDelay?: number; silenceTimeout?: number };
}

/** The model's state for the views. */
export interface IJobsState {
  readonly jobs: JobMap;
  /** True until the first snapshot (or its failure). */
  readonly loading: boolean;
  readonly error: string | null;
  readonly connection: ConnectionStatus;
}

/** Everyone's jobs the user may see, kept live while active. */
export class JobsModel implements IDisposable {
  constructor(options: IJobsModelOptions) {
    this._options = options;
  }

  get state(): IJobsState {
    return {
      jobs: this._jobs,
      loading: this._loading,
      error: this._error,
      connection: this._stream?.status ?? 'closed'
    };
  }

  /** Emitted after any change of `state`. */
  get changed(): ISignal<this, IJobsState> {
    return this._changed;
  }

  /** Emitted when a job reaches SUCCEEDED, FAILED or CANCELLED while watched. */
  get finished(): ISignal<this, IJobFinished> {
    return this._finished;
  }

  /** The last event id applied: where the next connection resumes. */
  get cursor(): number {
    return this._stream?.lastId ?? this._cursor;
  }

  get active(): boolean {
    return this._active;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /**
   * Connect (load the snapshot first, once) or disconnect. Idempotent; the
   * cursor survives, so a later activation replays only what it missed.
   */
  setActive(active: boolean): void {
    if (this._disposed || active === this._active) {
      return;
    }
    this._active = active;
    if (active) {
      void this._connect();
    } else {
      this._closeStream();
      this._emit();
    }
  }

  /** Read the whole list again (the refresh button); the stream goes on. */
  async refresh(): Promise<void> {
    try {
      const answer = await this._options.listJobs();
      if (this._disposed) {
        return;
      }
      this._jobs = fromSnapshot(answer.jobs, this._jobs);
      this._listedAt = answer.last_event_id ?? 0; // 0 from a server without it: replay all
      this._error = null;
    } catch (reason) {
      this._error = `Could not list the jobs: ${reasonMessage(reason)}`;
    } finally {
      this._loading = false;
      this._emit();
    }
  }

  /**
   * Put a job's latest known form (an action's answer) in the list now. It
   * may arrive before the event saying the same: a job it ends counts as
   * finished here, and that event then changes nothing.
   */
  update(job: IJobInfo): void {
    const previous = this._jobs.get(job.id)?.job.state;
    this._jobs = upsertJob(this._jobs, job);
    this._emit();
    if (
      previous !== undefined &&
      !TERMINAL_STATES.has(previous) &&
      TERMINAL_STATES.has(job.state)
    ) {
      this._finished.emit({ job, previous });
    }
  }

  /** Apply one event (the stream calls this; exposed for tests and replays). */
  apply(event: IJobEvent): void {
    const held = event.job_id ? this._pending.get(event.job_id) : undefined;
    if (held) {
      held.push(event); // its job is being read: applied once it is in the list
      return;
    }
    const result = applyEvent(this._jobs, event);
    if (result.unknownJob !== null) {
      void this._fetchUnknown(result.unknownJob, event);
      return;
    }
    if (!result.changed) {
      return;
    }
    this._jobs = result.jobs;
    this._emit();
    if (result.finished !== null) {
      this._finished.emit(result.finished);
    }
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._closeStream();
    Signal.clearData(this);
  }

  private async _connect(): Promise<void> {
    if (!this._loaded) {
      this._loaded = true;
      await this.refresh();
      // the first connection goes on from the snapshot, not from the feed's start;
      // a later one resumes where the last stopped (what happened meanwhile is told)
      this._cursor = Math.max(this._cursor, this._listedAt);
    }
    if (!this._active || this._disposed || this._stream) {
      return;
    }
    this._stream = new EventStream({
      connect: this._options.connect,
      after: this._cursor,
      onEvent: event => this.apply(event),
      onStatus: () => this._emit(),
      ...this._options.stream
    });
    this._stream.start();
  }

  private _closeStream(): void {
    const stream = this._stream;
    if (stream) {
      this._cursor = stream.lastId;
      this._stream = null;
      stream.stop();
    }
  }

  /**
   * A job created after the snapshot: read it once, then apply the events
   * that came meanwhile, in order. The answer may have been read before them
   * (an allocation, on a busy server): dropped, they would be lost for good;
   * an event the answer already holds changes nothing (`applyEvent`).
   */
  private async _fetchUnknown(jobId: string, first: IJobEvent): Promise<void> {
    const held = [first];
    this._pending.set(jobId, held);
    try {
      const job = await this._options.getJob(jobId);
      if (!this._disposed && !this._jobs.has(jobId)) {
        this._jobs = upsertJob(this._jobs, job);
      }
    } catch {
      // deleted meanwhile, or not visible: nothing to show
    } finally {
      this._pending.delete(jobId);
    }
    if (this._disposed || !this._jobs.has(jobId)) {
      return;
    }
    this._emit();
    for (const event of held) {
      this.apply(event);
    }
  }

  private _emit(): void {
    if (!this._disposed) {
      this._changed.emit(this.state);
    }
  }

  private readonly _options: IJobsModelOptions;
  private _jobs: JobMap = new Map();
  private _loading = true;
  private _loaded = false;
  private _error: string | null = null;
  private _active = false;
  private _cursor = 0;
  /** The newest event the last snapshot includes. */
  private _listedAt = 0;
  private _stream: EventStream | null = null;
  /** Jobs being read (`_fetchUnknown`), with the events that came meanwhile. */
  private readonly _pending = new Map<string, IJobEvent[]>();
  private _disposed = false;
  private readonly _changed = new Signal<this, IJobsState>(this);
  private readonly _finished = new Signal<this, IJobFinished>(this);
}
