import type { Poll } from '@lumino/polling';

import { reasonMessage, type ClusterInfo } from '../api';
import { PolledModel } from '../polledModel';

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
export class ClusterModel extends PolledModel<IClusterState> {
  constructor(options: IClusterModelOptions) {
    const interval = options.interval ?? DEFAULT_INTERVAL;
    super(
      { cluster: null, error: null, loading: true },
      {
        frequency: { interval, backoff: true, max: 12 * interval },
        name: 'jupyter-edt:cluster',
        standby: options.standby ?? 'when-hidden'
      }
    );
    this._fetchCluster = options.fetchCluster;
  }

  protected async _update(): Promise<void> {
    try {
      const cluster = await this._fetchCluster();
      this._setState({ cluster, error: null, loading: false });
    } catch (reason) {
      const error = reasonMessage(reason);
      this._setState({ ...this.state, error, loading: false });
      // Rethrow so that the poll backs off while the server keeps failing.
      throw reason;
    }
  }

  private readonly _fetchCluster: () => Promise<ClusterInfo>;
}
