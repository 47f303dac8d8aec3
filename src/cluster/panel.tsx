/**
 * The cluster view in the main area: every device with its memory,
 * utilisation, holder and a short utilisation history, wider than the
 * sidebar has room for. It polls only while the tab is shown.
 */
import * as React from 'react';

import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';

import { fetchCluster, type ClusterInfo } from '../api';
import { DevicesSection } from './devices';
import { ClusterModel } from './model';

/** The DOM id of the cluster tab (also its restorer key). */
export const CLUSTER_ID = 'jupyter-edt-cluster';

/** Options of the cluster view. */
export interface IClusterPanelOptions {
  fetchCluster?: () => Promise<ClusterInfo>;
  /** Polling period in ms (default 2 s: the history moves). */
  interval?: number;
  openJob?: (jobId: string) => void;
  jobName?: (jobId: string) => string | null;
}

/** Devices held and free, e.g. "3 of 4 devices held". */
export function heldSummary(cluster: ClusterInfo | null): string {
  if (cluster === null) {
    return '';
  }
  const held = cluster.devices.filter(d => d.held).length;
  return `${held} of ${cluster.devices.length} device${
    cluster.devices.length === 1 ? '' : 's'
  } held`;
}

/** The cluster tab's content. */
export class ClusterPanel extends ReactWidget {
  constructor(options: IClusterPanelOptions = {}) {
    super();
    this.id = CLUSTER_ID;
    this.addClass('jp-edt-cluster-panel');
    this.title.label = 'GPU Cluster';
    this.title.caption = 'Devices of the Elastic Training scheduler';
    this.title.closable = true;
    this._options = options;
    this.model = new ClusterModel({
      fetchCluster: options.fetchCluster ?? (() => fetchCluster()),
      interval: options.interval ?? 2000,
      standby: () => !this.isVisible || 'when-hidden'
    });
    this.model.stateChanged.connect(() => this.update());
    void this.model.start();
  }

  readonly model: ClusterModel;

  dispose(): void {
    if (!this.isDisposed) {
      this.model.dispose();
    }
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh();
  }

  protected render(): JSX.Element {
    const state = this.model.state;
    return (
      <div className="jp-edt-cluster">
        <div className="jp-edt-cluster-summary jp-edt-muted">
          {heldSummary(state.cluster)}
        </div>
        <DevicesSection
          state={state}
          onOpenJob={this._options.openJob}
          jobName={this._options.jobName}
          showHistory={true}
        />
      </div>
    );
  }

  private readonly _options: IClusterPanelOptions;
}
