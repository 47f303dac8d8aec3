/**
 * The cluster view in the main area: every device with its memory,
 * utilisation, holder and a short utilisation history, wider than the
 * sidebar has room for, and the allocation timeline below. It polls (and
 * follows the allocations) only while the tab is shown.
 */
import * as React from 'react';

import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';

import { fetchCluster, type ClusterInfo } from '../api';
import { DevicesSection } from './devices';
import { ClusterModel } from './model';
import {
  TimelineSection,
  timelineModel,
  type ITimelinePanelOptions,
  type TimelineModel
} from './timeline';

/** The DOM id of the cluster tab (also its restorer key). */
export const CLUSTER_ID = 'jupyter-edt-cluster';

/** Options of the cluster view. */
export interface IClusterPanelOptions {
  fetchCluster?: () => Promise<ClusterInfo>;
  /** Polling period in ms (default 2 s: the history moves). */
  interval?: number;
  openJob?: (jobId: string) => void;
  jobName?: (jobId: string) => string | null;
  /** Open the allocation timeline in a tab of its own. */
  openTimeline?: () => void;
  /** How the allocation timeline reads and follows the allocations. */
  timeline?: Pick<ITimelinePanelOptions, 'fetchAllocations' | 'connect'>;
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
    this.timeline = timelineModel({
      ...options.timeline,
      jobName: options.jobName
    });
  }

  readonly model: ClusterModel;
  /** The allocation timeline's model, following only while the tab is shown. */
  readonly timeline: TimelineModel;

  dispose(): void {
    if (!this.isDisposed) {
      this.model.dispose();
      this.timeline.dispose();
    }
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.timeline.setActive(this.isVisible);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh();
    this.timeline.setActive(true);
  }

  protected onBeforeHide(msg: Message): void {
    super.onBeforeHide(msg);
    this.timeline.setActive(false);
  }

  protected onBeforeDetach(msg: Message): void {
    this.timeline.setActive(false);
    super.onBeforeDetach(msg);
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
        <TimelineSection
          model={this.timeline}
          options={{
            jobName: this._options.jobName,
            openJob: this._options.openJob,
            openTab: this._options.openTimeline
          }}
        />
      </div>
    );
  }

  private readonly _options: IClusterPanelOptions;
}
