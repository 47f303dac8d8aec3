import * as React from 'react';

import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';

import { fetchCluster, type ClusterInfo } from '../api';
import { edtIcon } from '../icons';
import { ClusterView } from './components';
import { ClusterModel, type IClusterState } from './model';

/** The DOM id of the sidebar widget (also its layout-restorer key). */
export const SIDEBAR_ID = 'jupyter-edt-sidebar';

/** Options of the sidebar. */
export interface IEdtSidebarOptions {
  /** Fetches the device list; the REST client by default. */
  fetchCluster?: () => Promise<ClusterInfo>;
  /** Polling period in milliseconds. */
  interval?: number;
}

/**
 * The "Elastic Training" left sidebar panel.
 *
 * Its model polls the cluster endpoint only while the panel is visible and the
 * browser tab is shown; showing the panel fetches at once.
 */
export class EdtSidebar extends ReactWidget {
  constructor(options: IEdtSidebarOptions = {}) {
    super();
    this.id = SIDEBAR_ID;
    this.addClass('jp-edt-sidebar');
    this.title.icon = edtIcon;
    this.title.caption = 'Elastic Training';
    this.node.setAttribute('aria-label', 'Elastic Training');
    this.model = new ClusterModel({
      fetchCluster: options.fetchCluster ?? (() => fetchCluster()),
      interval: options.interval,
      standby: () => !this.isVisible || 'when-hidden'
    });
    void this.model.start();
  }

  /** The polled cluster state shown by the panel. */
  readonly model: ClusterModel;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh();
  }

  protected render(): JSX.Element {
    return (
      <UseSignal<ClusterModel, IClusterState>
        signal={this.model.stateChanged}
        initialArgs={this.model.state}
      >
        {(_, state) => (
          <ClusterView
            state={state ?? this.model.state}
            onRefresh={() => void this.model.refresh()}
          />
        )}
      </UseSignal>
    );
  }
}
