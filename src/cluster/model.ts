import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import type { IDisposable } from '@lumino/disposable';

import { reasonMessage, type ClusterInfo } from '../api';

/** What the sidebar shows about the cluster at one moment. */
export interface IClusterState {
  /** The last device list received; kept while a later request fails. */
  readonly cluster: ClusterInfo | null;
  /** The message of the last failed request; null after a success. */
  readonly error: string | null;
  /** True until the first answer (success or failure) arrives. */
  readonly loading: boolean;
}

/** How a ClusterModel gets its data and when it polls. */
export interface IClusterModelOptions {
  /** Fetches the device list (the REST client in the app, a fake in tests). */
  fetchCluster: () => Promise<ClusterInfo>;
  /** Milliseconds between two polls; 5 s by default. */
  interval?: number;
  /** When the poll rests; the sidebar rests while it is hidden. */
  standby?: Poll.Standby | (() => boolean | Poll.Standby);
}

/** Default polling period of the device list, in milliseconds. */
export const DEFAULT_INTERVAL = 5000;

/**
 * Polls the cluster endpoint and keeps the latest state for the views.
 *
 * It owns a Lumino `Poll` that backs off on errors and stands by as its
 * `standby` option says, so nothing is fetched while nobody looks.
 */
export class ClusterModel implements IDisposable {
  constructor(options: IClusterModelOptions) {
    this._fetchCluster = options.fetchCluster;
    const interval = options.interval ?? DEFAULT_INTERVAL;
    this._poll = new Poll({
      auto: false,
      factory: () => this._update(),
      frequency: { interval, backoff: true, max: 12 * interval },
      name: 'jupyter-edt:cluster',
      standby: options.standby ?? 'when-hidden'
    });
  }

  /** The current state. */
  get state(): IClusterState {
    return this._state;
  }

  /** Emitted with the new state whenever it changes. */
  get stateChanged(): ISignal<this, IClusterState> {
    return this._stateChanged;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Start polling (a no-op when already started). */
  start(): Promise<void> {
    return this._poll.start();
  }

  /** Fetch now, out of turn, and resolve once that fetch has finished. */
  async refresh(): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    try {
      await this._poll.refresh();
      await this._poll.tick;
    } catch (reason) {
      if (!this.isDisposed) {
        throw reason; // a dispose meanwhile ends the wait, not an error
      }
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _update(): Promise<void> {
    try {
      const cluster = await this._fetchCluster();
      this._setState({ cluster, error: null, loading: false });
    } catch (reason) {
      const error = reasonMessage(reason);
      this._setState({ ...this._state, error, loading: false });
      // Rethrow so that the poll backs off while the server keeps failing.
      throw reason;
    }
  }

  private _setState(state: IClusterState): void {
    this._state = state;
    this._stateChanged.emit(state);
  }

  private readonly _fetchCluster: () => Promise<ClusterInfo>;
  private readonly _poll: Poll;
  private _state: IClusterState = { cluster: null, error: null, loading: true };
  private readonly _stateChanged = new Signal<this, IClusterState>(this);
}
