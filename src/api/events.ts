/**
 * The events WebSocket: its URL, the socket factory, and `EventStream`, a view
 * of the feed (one job's, or every job's) that reconnects with exponential
 * backoff and resumes after the last event id seen, so nothing is lost or
 * repeated across a dropped connection or a server restart.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

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
 * feed; `job_id` names the job so a server that filters by it sends less (the
 * client filters anyway); the token is appended when the settings say so, as
 * JupyterLab does for kernel sockets.
 */
export function eventsUrl(
  settings: ServerConnection.ISettings,
  after: number,
  jobId?: string
): string {
  const params: Record<string, string | number> = { after };
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

/** The events of one job, from a resumable WebSocket. */
export class EventStream {
  constructor(options: IEventStreamOptions) {
    this._options = options;
    this._lastId = options.after ?? 0;
    this._minDelay = options.minDelay ?? 500;
    this._maxDelay = options.maxDelay ?? 30_000;
    this._delay = this._minDelay;
  }

  /** The last event id received (of any job): where a reconnection resumes. */
  get lastId(): number {
    return this._lastId;
  }

  get status(): ConnectionStatus {
    return this._status;
  }

  /** The delay before the next reconnection, in ms. */
  get reconnectDelay(): number {
    return this._delay;
  }

  /** Connect (a no-op when connected or stopped). */
  start(): void {
    if (this._stopped || this._socket) {
      return;
    }
    this._open();
  }

  /** Close for good. */
  stop(): void {
    if (this._stopped) {
      return;
    }
    this._stopped = true;
    this._clearTimers();
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
    this._setStatus('closed');
  }

  private _open(): void {
    this._setStatus(this._everOpened ? 'reconnecting' : 'connecting');
    let socket: ISocketLike;
    try {
      // '' asks for every job's events (eventsUrl then sends no job_id).
      socket = this._options.connect(this._lastId, this._options.jobId ?? '');
    } catch {
      this._scheduleReconnect();
      return;
    }
    this._socket = socket;
    socket.onopen = () => {
      this._everOpened = true;
      this._delay = this._minDelay;
      this._setStatus('open');
      this._watch();
    };
    socket.onmessage = event => this._receive(event.data);
    socket.onerror = () => {
      // onclose follows and reconnects
    };
    socket.onclose = () => {
      if (this._socket !== socket) {
        return;
      }
      this._socket = null;
      this._scheduleReconnect();
    };
  }

  private _receive(data: unknown): void {
    this._watch();
    if (typeof data !== 'string') {
      return;
    }
    let event: IJobEvent;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
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

  private _scheduleReconnect(): void {
    this._clearTimers();
    if (this._stopped) {
      return;
    }
    this._setStatus('reconnecting');
    const delay = this._delay;
    this._delay = Math.min(this._maxDelay, this._delay * 2);
    this._retryTimer = setTimeout(() => {
      this._retryTimer = null;
      if (!this._stopped) {
        this._open();
      }
    }, delay);
  }

  /** (Re)arm the silence watchdog. */
  private _watch(): void {
    const timeout = this._options.silenceTimeout ?? 60_000;
    if (this._silenceTimer !== null) {
      clearTimeout(this._silenceTimer);
      this._silenceTimer = null;
    }
    if (timeout <= 0 || this._stopped) {
      return;
    }
    this._silenceTimer = setTimeout(() => {
      this._silenceTimer = null;
      const socket = this._socket;
      if (!socket) {
        return;
      }
      this._socket = null;
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
      try {
        socket.close();
      } catch {
        // already closed
      }
      this._scheduleReconnect();
    }, timeout);
  }

  private _clearTimers(): void {
    if (this._retryTimer !== null) {
      clearTimeout(this._retryTimer);
      this._retryTimer = null;
    }
    if (this._silenceTimer !== null) {
      clearTimeout(this._silenceTimer);
      this._silenceTimer = null;
    }
  }

  private _setStatus(status: ConnectionStatus): void {
    if (status !== this._status) {
      this._status = status;
      this._options.onStatus?.(status);
    }
  }

  private readonly _options: IEventStreamOptions;
  private readonly _minDelay: number;
  private readonly _maxDelay: number;
  private _delay: number;
  private _lastId: number;
  private _socket: ISocketLike | null = null;
  private _status: ConnectionStatus = 'closed';
  private _stopped = false;
  private _everOpened = false;
  private _retryTimer: ReturnType<typeof setTimeout> | null = null;
  private _silenceTimer: ReturnType<typeof setTimeout> | null = null;
}
