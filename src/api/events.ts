/**
 * The events WebSocket: its URL, the socket factory, and `EventStream`, a view
 * of the feed (one job's, or every job's) that reconnects with exponential
 * backoff and resumes after the last event id seen, so nothing is lost or
 * repeated across a dropped connection or a server restart. The reconnections
 * are a Lumino `Poll` and the silence watchdog a Lumino `Debouncer`: no
 * hand-rolled timers.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Debouncer, Poll } from '@lumino/polling';

import { API_NAMESPACE } from './client';
import type { IJobEvent } from './types';

/** The minimal WebSocket the event stream uses (a fake in tests). */
export interface ISocketLike {
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: unknown) => void) | null;
  onerror: ((event: unknown) => void) | null;
  close(): void;
}

/** Opens the events WebSocket after an event id, for one job. */
export type SocketFactory = (after: number, jobId: string) => ISocketLike;

/**
 * The events WebSocket URL below the server's base URL: `after` resumes the
 * feed; `batch=1` asks for the events ready at once in one message (an array),
 * which a busy feed needs; `job_id` names the job so a server that filters by
 * it sends less (the client filters anyway); the token is appended when the
 * settings say so, as JupyterLab does for kernel sockets.
 */
export function eventsUrl(
  settings: ServerConnection.ISettings,
  after: number,
  jobId?: string
): string {
  const params: Record<string, string | number> = { after, batch: 1 };
  if (jobId) {
    params.job_id = jobId;
  }
  if (settings.token && settings.appendToken) {
    params.token = settings.token;
  }
  return (
    URLExt.join(settings.wsUrl, API_NAMESPACE, 'events') +
    URLExt.objectToQueryString(params)
  );
}

/** Opens real WebSockets with the page's settings. */
export function webSocketFactory(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): SocketFactory {
  return (after, jobId) =>
    new settings.WebSocket(eventsUrl(settings, after, jobId)) as ISocketLike;
}

/** Where the connection stands. */
export type ConnectionStatus =
  'connecting' | 'open' | 'reconnecting' | 'closed';

/** Options of an event stream. */
export interface IEventStreamOptions {
  /** The job whose events are delivered (others are skipped); all when absent. */
  jobId?: string;
  /** Opens a socket after an event id. */
  connect: SocketFactory;
  /** Receives the job's events, in order. */
  onEvent: (event: IJobEvent) => void;
  /** Told each status change. */
  onStatus?: (status: ConnectionStatus) => void;
  /** Resume after this event id (default 0: the whole feed). */
  after?: number;
  /** First reconnection delay in ms (default 500). */
  minDelay?: number;
  /** Longest reconnection delay in ms (default 30 s). */
  maxDelay?: number;
  /**
   * A connection silent this long (ms) is taken as dead and replaced; the
   * server sends a keepalive every 20 s (default 60 s; 0 disables).
   */
  silenceTimeout?: number;
}

/**
 * The events of one job, from a resumable WebSocket.
 *
 * Each tick of its `Poll` is one connection, whose promise settles when the
 * connection ends: resolved when it had opened (the next one follows after
 * `minDelay`, the backoff starting over), rejected when it failed before
 * opening (the poll backs off, up to `maxDelay`, with Lumino's jitter). The
 * first connection opens at once, in `start()`. Whether a stream should exist
 * at all (a view shown, the page visible) is its owner's decision: the poll
 * never stands by on its own.
 */
export class EventStream {
  constructor(options: IEventStreamOptions) {
    this._options = options;
    this._lastId = options.after ?? 0;
    const interval = options.minDelay ?? 500;
    const frequency = {
      interval,
      backoff: 2,
      max: Math.max(interval, options.maxDelay ?? 30_000)
    };
    this._poll = new Poll({
      auto: false,
      factory: () => this._connect(),
      frequency,
      name: `jupyter-edt:events:${options.jobId ?? 'all'}`,
      standby: 'never'
    });
    // The constructor raises `max` to at least Lumino's default (30 s); the
    // setter takes it as given.
    this._poll.frequency = frequency;
    const silence = options.silenceTimeout ?? 60_000;
    this._watchdog =
      silence > 0 ? new Debouncer(() => this._onSilence(), silence) : null;
  }

  /** The last event id received (of any job): where a reconnection resumes. */
  get lastId(): number {
    return this._lastId;
  }

  get status(): ConnectionStatus {
    return this._status;
  }

  /**
   * The delay before the next reconnection, in ms: the one scheduled while
   * reconnecting, otherwise the first one after a drop.
   */
  get reconnectDelay(): number {
    return this._status === 'reconnecting'
      ? this._poll.state.interval
      : this._poll.frequency.interval;
  }

  /** Connect (a no-op when started before or stopped). */
  start(): void {
    if (this._started || this._poll.isDisposed) {
      return;
    }
    this._started = true;
    // The first connection opens now; the poll times the ones after it.
    const next = { interval: this._poll.frequency.interval };
    void this._connect().then(
      () => this._poll.schedule({ ...next, phase: 'resolved' }),
      () => this._poll.schedule({ ...next, phase: 'rejected' })
    );
  }

  /** Close for good. */
  stop(): void {
    if (this._poll.isDisposed) {
      return;
    }
    this._poll.dispose();
    this._watchdog?.dispose();
    this._close();
    this._setStatus('closed');
  }

  /**
   * One connection: settles when it ends, resolved if it had opened. A
   * connection that `stop()` or the watchdog closes settles too.
   */
  private _connect(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this._setStatus(this._everOpened ? 'reconnecting' : 'connecting');
      let socket: ISocketLike;
      try {
        // '' asks for every job's events (eventsUrl then sends no job_id).
        socket = this._options.connect(this._lastId, this._options.jobId ?? '');
      } catch (reason) {
        this._setStatus('reconnecting');
        reject(reason);
        return;
      }
      let opened = false;
      this._socket = socket;
      this._ended = () => {
        this._ended = null;
        void this._watchdog?.stop();
        if (opened) {
          resolve();
        } else {
          reject(new Error('The events connection closed before it opened.'));
        }
      };
      socket.onopen = () => {
        opened = true;
        this._everOpened = true;
        this._setStatus('open');
        this._watch();
      };
      socket.onmessage = event => this._receive(event.data);
      socket.onerror = () => {
        // onclose follows and ends the connection
      };
      socket.onclose = () => {
        if (this._socket !== socket) {
          return;
        }
        this._socket = null;
        this._setStatus('reconnecting');
        this._ended?.();
      };
    });
  }

  private _receive(data: unknown): void {
    this._watch();
    if (typeof data !== 'string') {
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return;
    }
    // A batch (what `eventsUrl` asks for), or one event (a keepalive, an older server)
    for (const event of Array.isArray(parsed) ? parsed : [parsed]) {
      this._take(event);
    }
  }

  private _take(event: IJobEvent | null): void {
    if (event === null || typeof event !== 'object') {
      return;
    }
    if (typeof event.id === 'number') {
      if (event.id <= this._lastId) {
        return; // already seen (a replay overlapping what was delivered)
      }
      this._lastId = event.id;
    }
    const { jobId } = this._options;
    if (
      event.kind === 'keepalive' ||
      (jobId !== undefined && event.job_id !== jobId)
    ) {
      return;
    }
    this._options.onEvent(event);
  }

  /** (Re)arm the silence watchdog: heard from the server now. */
  private _watch(): void {
    if (this._watchdog && !this._poll.isDisposed) {
      void this._watchdog.invoke();
    }
  }

  /** The connection went silent: take it as dead, and replace it. */
  private _onSilence(): void {
    if (this._socket === null || this._poll.isDisposed) {
      return;
    }
    this._close();
    this._setStatus('reconnecting');
  }

  /** Close the socket without its handlers; end its connection. */
  private _close(): void {
    const socket = this._socket;
    this._socket = null;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
      try {
        socket.close();
      } catch {
        // already closed
      }
    }
    this._ended?.();
  }

  private _setStatus(status: ConnectionStatus): void {
    if (status !== this._status) {
      this._status = status;
      this._options.onStatus?.(status);
    }
  }

  private readonly _options: IEventStreamOptions;
  private readonly _poll: Poll;
  private readonly _watchdog: Debouncer | null;
  private _lastId: number;
  private _socket: ISocketLike | null = null;
  /** Settles the connection in progress (the poll's tick, or the first one). */
  private _ended: (() => void) | null = null;
  private _status: ConnectionStatus = 'closed';
  private _started = false;
  private _everOpened = false;
}
