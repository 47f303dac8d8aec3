/**
 * The allocation timeline's model: the devices and who held them over the
 * chosen range (1 h, 24 h, 7 days), kept live.
 *
 * A range is read whole once (GET /allocations); from then on, the events
 * WebSocket, resumed right after that answer's `last_event_id`, appends each
 * allocation change as it comes, and a Lumino `Poll` reads only the newest
 * stretch (since the last answer) and merges it in: the feed carries a user
 * only their own jobs' events, so that is how another user's jobs appear, as
 * "held", and how the bars still held reach the present. While the view is
 * hidden the socket closes (resuming after the last event seen) and the poll
 * stands by.
 */
import {
  EventStream,
  reasonMessage,
  type IAllocationDevice,
  type IAllocations,
  type IAllocationsQuery,
  type IJobEvent,
  type SocketFactory
} from '../../api';
import { PolledModel } from '../../polledModel';
import { applyAllocation, dropBefore, mergeAnswer } from './intervals';

/** A range the timeline shows: the last hour, day or week. */
export interface ITimelineRange {
  id: '1h' | '24h' | '7d';
  label: string;
  seconds: number;
}

/** The ranges offered, shortest first. */
export const TIMELINE_RANGES: readonly ITimelineRange[] = [
  { id: '1h', label: '1 h', seconds: 3600 },
  { id: '24h', label: '24 h', seconds: 86400 },
  { id: '7d', label: '7 days', seconds: 7 * 86400 }
];

/** What the timeline shows at one moment. */
export interface ITimelineState {
  readonly range: ITimelineRange;
  /** The devices and their intervals (oldest first). */
  readonly devices: IAllocationDevice[];
  /** The server's time at the last answer (seconds since the epoch); null before one. */
  readonly until: number | null;
  /** True while the range is being read whole. */
  readonly loading: boolean;
  /** The message of the last failed read; null after a success. */
  readonly error: string | null;
}

/** How a timeline model reads and follows the allocations. */
export interface ITimelineModelOptions {
  /** GET /allocations (the REST client in the app, a fake in tests). */
  fetchAllocations: (query: IAllocationsQuery) => Promise<IAllocations>;
  /** Opens the events WebSocket; null: no live events, the poll alone. */
  connect: SocketFactory | null;
  /** A job's name, for one that a live event shows first. */
  jobName?: (jobId: string) => string | null;
  /** The range shown first (default 1 h). */
  range?: ITimelineRange['id'];
  /** Milliseconds between two reads of the newest stretch (default 5 s). */
  interval?: number;
  /** The browser's clock in seconds (tests set it). */
  clock?: () => number;
  /** Passed to the event stream (tests shorten the delays). */
  stream?: { minDelay?: number; maxDelay?: number; silenceTimeout?: number };
}

/** Seconds the newest stretch reaches back before the last answer's end. */
const OVERLAP_S = 5;

/** Default milliseconds between two reads of the newest stretch. */
export const TIMELINE_INTERVAL = 5000;

/** The range named `id`; the first (1 h) for any other. */
export function findRange(id: string | undefined): ITimelineRange {
  return TIMELINE_RANGES.find(r => r.id === id) ?? TIMELINE_RANGES[0];
}

/** The allocation timeline's data, read once per range, then kept live. */
export class TimelineModel extends PolledModel<ITimelineState> {
  constructor(options: ITimelineModelOptions) {
    const interval = options.interval ?? TIMELINE_INTERVAL;
    const following = { active: false }; // read by the poll's standby, set by setActive
    super(
      {
        range: findRange(options.range),
        devices: [],
        until: null,
        loading: true,
        error: null
      },
      {
        frequency: { interval, backoff: true, max: 12 * interval },
        name: 'jupyter-edt:allocation-timeline',
        standby: () => !following.active || 'when-hidden'
      }
    );
    this._following = following;
    this._options = options;
    this._clock = options.clock ?? (() => Date.now() / 1000);
  }

  /** The last event id applied: where the live feed resumes. */
  get cursor(): number {
    return this._stream?.lastId ?? this._cursor;
  }

  /** The server's time now, as the last answer and the time since tell it. */
  now(): number {
    const { until } = this.state;
    return until === null
      ? this._clock()
      : until + Math.max(0, this._clock() - this._answeredAt);
  }

  /**
   * Follow the allocations (the view is shown) or stop (hidden): the poll
   * stands by and the socket closes, to resume after the last event seen.
   */
  setActive(active: boolean): void {
    if (this.isDisposed || active === this._following.active) {
      return;
    }
    this._following.active = active;
    if (active) {
      void this.refresh().catch(() => undefined);
      if (this.state.until !== null) {
        this._openStream();
      }
    } else {
      this._closeStream();
    }
  }

  /** Show another range: read it whole. */
  setRange(id: ITimelineRange['id']): void {
    const range = findRange(id);
    if (range.id === this.state.range.id) {
      return;
    }
    this._whole = true;
    this._setState({ ...this.state, range, loading: true });
    void this.refresh().catch(() => undefined);
  }

  /** Apply one event of the feed (the stream calls this; tests too). */
  apply(event: IJobEvent): void {
    if (event.kind !== 'allocation' || this.state.until === null) {
      return;
    }
    const name = event.job_id
      ? (this._options.jobName?.(event.job_id) ?? null)
      : null;
    const devices = applyAllocation(this.state.devices, event, name);
    if (devices !== null) {
      this._setState({ ...this.state, devices });
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._closeStream();
    super.dispose();
  }

  protected async _update(): Promise<void> {
    const whole = this._whole || this.state.until === null;
    const range = this.state.range;
    const query: IAllocationsQuery = whole
      ? { since: Math.max(0, this._clock() - range.seconds) }
      : { since: Math.max(0, (this.state.until ?? 0) - OVERLAP_S) };
    let answer: IAllocations;
    try {
      answer = await this._options.fetchAllocations(query);
    } catch (reason) {
      this._setState({
        ...this.state,
        loading: false,
        error: reasonMessage(reason)
      });
      throw reason; // the poll backs off while the server keeps failing
    }
    if (this.isDisposed || range.id !== this.state.range.id) {
      return; // another range was chosen meanwhile: its own read follows
    }
    this._answeredAt = this._clock();
    const merged = whole
      ? answer.devices
      : mergeAnswer(this.state.devices, answer.devices);
    this._setState({
      range,
      devices: dropBefore(merged, answer.until - range.seconds),
      until: answer.until,
      loading: false,
      error: null
    });
    if (whole) {
      this._whole = false;
      // the live feed goes on right after what this answer holds
      this._closeStream();
      this._cursor = answer.last_event_id;
      if (this._following.active) {
        this._openStream();
      }
    }
  }

  private _openStream(): void {
    const connect = this._options.connect;
    if (connect === null || this._stream !== null || this.isDisposed) {
      return;
    }
    this._stream = new EventStream({
      connect,
      after: this._cursor,
      onEvent: event => this.apply(event),
      ...this._options.stream
    });
    this._stream.start();
  }

  private _closeStream(): void {
    const stream = this._stream;
    if (stream !== null) {
      this._cursor = stream.lastId;
      this._stream = null;
      stream.stop();
    }
  }

  private readonly _options: ITimelineModelOptions;
  private readonly _clock: () => number;
  private readonly _following: { active: boolean };
  private _whole = true;
  private _cursor = 0;
  private _answeredAt = 0;
  private _stream: EventStream | null = null;
}
