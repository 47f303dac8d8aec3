/**
 * The usage the sidebar shows: GET /usage over a chosen range (the last day,
 * the last week, or all history), polled by a Lumino `Poll` while the panel is
 * seen.
 */
import type { Poll } from '@lumino/polling';

import { reasonMessage, type IUsageQuery, type IUsageReport } from '../api';
import { PolledModel } from '../polledModel';

/** The ranges the usage table offers. */
export type UsageRange = '24h' | '7d' | 'all';

/** Each range, its label and its length in seconds (null: all history). */
export const USAGE_RANGES: ReadonlyArray<{
  value: UsageRange;
  label: string;
  seconds: number | null;
}> = [
  { value: '24h', label: 'Last 24 hours', seconds: 24 * 3600 },
  { value: '7d', label: 'Last 7 days', seconds: 7 * 24 * 3600 },
  { value: 'all', label: 'All time', seconds: null }
];

/** The query of a range ending now (`now` in seconds since the epoch). */
export function rangeQuery(range: UsageRange, now: number): IUsageQuery {
  const seconds = USAGE_RANGES.find(r => r.value === range)?.seconds ?? null;
  return seconds === null ? {} : { since: Math.max(0, now - seconds) };
}

/** What the usage table shows at one moment. */
export interface IUsageState {
  /** The last report received; kept while a later request fails. */
  readonly report: IUsageReport | null;
  /** The range it covers (the one asked for last). */
  readonly range: UsageRange;
  /** The message of the last failed request; null after a success. */
  readonly error: string | null;
  /** True until the first answer (success or failure) arrives. */
  readonly loading: boolean;
}

/** How a UsageModel gets its data and when it polls. */
export interface IUsageModelOptions {
  /** Fetches a report (the REST client in the app, a fake in tests). */
  fetchUsage: (query: IUsageQuery) => Promise<IUsageReport>;
  /** The range to start with; the last 24 hours by default. */
  range?: UsageRange;
  /** Milliseconds between two polls; 60 s by default. */
  interval?: number;
  /** When the poll rests; the sidebar rests while it is hidden. */
  standby?: Poll.Standby | (() => boolean | Poll.Standby);
  /** Seconds since the epoch (tests fix it). */
  now?: () => number;
}

/** Default polling period of the usage, in milliseconds. */
export const DEFAULT_USAGE_INTERVAL = 60_000;

/** Polls the usage endpoint over the chosen range, by user. */
export class UsageModel extends PolledModel<IUsageState> {
  constructor(options: IUsageModelOptions) {
    const interval = options.interval ?? DEFAULT_USAGE_INTERVAL;
    super(
      {
        report: null,
        range: options.range ?? '24h',
        error: null,
        loading: true
      },
      {
        frequency: { interval, backoff: true, max: 10 * interval },
        name: 'jupyter-edt:usage',
        standby: options.standby ?? 'when-hidden'
      }
    );
    this._fetchUsage = options.fetchUsage;
    this._now = options.now ?? (() => Date.now() / 1000);
  }

  /** The range shown; setting it fetches that range at once. */
  get range(): UsageRange {
    return this.state.range;
  }
  set range(value: UsageRange) {
    if (value === this.state.range) {
      return;
    }
    this._setState({ ...this.state, range: value });
    void this.refresh();
  }

  protected async _update(): Promise<void> {
    const range = this.state.range;
    try {
      const report = await this._fetchUsage({
        ...rangeQuery(range, this._now()),
        by: 'user'
      });
      if (range === this.state.range) {
        this._setState({ report, range, error: null, loading: false });
      }
    } catch (reason) {
      const error = `Could not read the usage: ${reasonMessage(reason)}`;
      this._setState({ ...this.state, error, loading: false });
      // Rethrow so that the poll backs off while the server keeps failing.
      throw reason;
    }
  }

  private readonly _fetchUsage: (query: IUsageQuery) => Promise<IUsageReport>;
  private readonly _now: () => number;
}
