import * as React from 'react';

import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  fetchCluster,
  fetchUsage,
  type ClusterInfo,
  type IEdtUser,
  type IUsageQuery,
  type IUsageReport
} from '../api';
import { edtIcon } from '../icons';
import { DevicesSection } from '../cluster/devices';
import { PanelHeader } from './components';
import { JobList } from './jobcomponents';
import type { JobsModel } from '../jobs/model';
import { DEFAULT_FILTER, visibleJobs, type IJobFilter } from '../jobs/state';
import { ClusterModel } from '../cluster/model';
import type { IJobActions } from './actions';
import { UsageModel, UsageSection } from '../usage';
import {
  AdminConfigModel,
  AdminConfigSection,
  type IAdminConfigModelOptions
} from './adminconfig';

/** The DOM id of the sidebar widget (also its layout-restorer key). */
export const SIDEBAR_ID = 'jupyter-edt-sidebar';

/** Options of the sidebar. */
export interface IEdtSidebarOptions {
  /** Fetches the device list; the REST client by default. */
  fetchCluster?: () => Promise<ClusterInfo>;
  /** Polling period of the device list in milliseconds. */
  interval?: number;
  /** The live job list; without it the panel shows the devices only. */
  jobs?: JobsModel;
  /** The filter to start with (restored from the state database). */
  filter?: IJobFilter;
  /** Opens a job's detail tab. */
  openJob?: (jobId: string) => void;
  /** Opens the cluster view in the main area. */
  openCluster?: () => void;
  /** A job row's actions (open, cancel, change max GPUs, copy id), on hover. */
  actions?: IJobActions;
  /** Fetches the GPU usage; the REST client by default. */
  fetchUsage?: (query: IUsageQuery) => Promise<IUsageReport>;
  /** How an administrator's quotas and weights are read and changed. */
  adminConfig?: IAdminConfigModelOptions;
  /** Polling period of the usage in milliseconds. */
  usageInterval?: number;
}

/**
 * The "Elastic Training" left sidebar panel: the job list, the devices, and
 * the GPU usage (everyone's for an administrator, the user's own and their
 * quota for anyone else) once the user is known (`me`).
 *
 * The device list and the usage poll only while the panel is visible and the
 * browser tab shown; the job list's WebSocket is switched by the plugin, which
 * watches `visibilityChanged` (see plugin.ts).
 */
export class EdtSidebar extends ReactWidget {
  constructor(options: IEdtSidebarOptions = {}) {
    super();
    this.id = SIDEBAR_ID;
    this.addClass('jp-edt-sidebar');
    this.title.icon = edtIcon;
    this.title.caption = 'Elastic Training';
    this.node.setAttribute('aria-label', 'Elastic Training');
    this.jobs = options.jobs ?? null;
    this._filter = options.filter ?? DEFAULT_FILTER;
    this._openJob = options.openJob ?? null;
    this._openCluster = options.openCluster ?? null;
    this._adminConfigOptions = options.adminConfig ?? {};
    this._actions = options.actions ?? null;
    this.model = new ClusterModel({
      fetchCluster: options.fetchCluster ?? (() => fetchCluster()),
      interval: options.interval,
      standby: () => !this.isVisible || 'when-hidden'
    });
    this.usage = new UsageModel({
      fetchUsage: options.fetchUsage ?? (query => fetchUsage(query)),
      interval: options.usageInterval,
      standby: () => !this.isVisible || 'when-hidden'
    });
    this.model.stateChanged.connect(this._changed, this);
    this.usage.stateChanged.connect(this._changed, this);
    this.jobs?.changed.connect(this._changed, this);
    void this.model.start();
  }

  /** The polled cluster state shown by the panel. */
  readonly model: ClusterModel;

  /** The GPU usage shown once the user is known (polled from then on). */
  readonly usage: UsageModel;

  /** The live job list, when the panel has one. */
  readonly jobs: JobsModel | null;

  /**
   * Who the user is to the job service (GET /user): their name for "My jobs",
   * and whether the usage table shows everyone's usage or their own.
   */
  get me(): IEdtUser | null {
    return this._me;
  }
  set me(value: IEdtUser | null) {
    this._me = value;
    this._user = value?.name ?? null;
    if (value !== null) {
      void this.usage.start();
    }
    if (value?.admin && this.adminConfig === null) {
      // an administrator edits quotas and weights (sidebar/adminconfig.tsx)
      this.adminConfig = new AdminConfigModel({
        standby: () => !this.isVisible || 'when-hidden',
        ...this._adminConfigOptions
      });
      this.adminConfig.stateChanged.connect(this._changed, this);
      void this.adminConfig.start();
    }
    this.update();
  }

  /** The user's own name as jobs record it (for the "My jobs" filter). */
  get user(): string | null {
    return this._user;
  }
  set user(value: string | null) {
    this._user = value;
    this.update();
  }

  /** Which jobs are shown. */
  get filter(): IJobFilter {
    return this._filter;
  }
  set filter(value: IJobFilter) {
    if (
      value.scope === this._filter.scope &&
      value.state === this._filter.state
    ) {
      return;
    }
    this._filter = value;
    this._filterChanged.emit(value);
    this.update();
  }

  /** Emitted when the user changes the filter (the plugin saves it). */
  get filterChanged(): ISignal<this, IJobFilter> {
    return this._filterChanged;
  }

  /** Emitted when the panel is shown or hidden. */
  get visibilityChanged(): ISignal<this, boolean> {
    return this._visibilityChanged;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._clock.dispose();
    this.model.dispose();
    this.usage.dispose();
    this.adminConfig?.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.isVisible) {
      void this._clock.start();
      this._visibilityChanged.emit(true);
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh();
    if (this._me !== null) {
      void this.usage.refresh();
    }
    void this._clock.start();
    this._visibilityChanged.emit(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    void this._clock.stop();
    this._visibilityChanged.emit(false);
  }

  protected render(): JSX.Element {
    const jobs = this.jobs;
    const open = this._openJob ?? undefined;
    return (
      <div className="jp-edt-panel">
        <PanelHeader
          onRefresh={() => {
            void this.model.refresh();
            void jobs?.refresh();
            if (this._me !== null) {
              void this.usage.refresh();
            }
          }}
        />
        {jobs && (
          <JobList
            state={jobs.state}
            rows={visibleJobs(jobs.state.jobs, this._filter, this._user)}
            filter={this._filter}
            now={Date.now() / 1000}
            onFilter={filter => (this.filter = filter)}
            onOpen={jobId => open?.(jobId)}
            actions={this._actions}
          />
        )}
        <DevicesSection
          state={this.model.state}
          onOpenJob={open}
          jobName={id => jobs?.state.jobs.get(id)?.job.name ?? null}
          onOpenCluster={this._openCluster ?? undefined}
        />
        {this._me !== null && (
          <UsageSection
            state={this.usage.state}
            me={this._me}
            onRange={range => (this.usage.range = range)}
          />
        )}
        {this.adminConfig !== null && (
          <AdminConfigSection model={this.adminConfig} />
        )}
      </div>
    );
  }

  private _changed(): void {
    this.update();
  }

  private _filter: IJobFilter;
  private _user: string | null = null;
  private _me: IEdtUser | null = null;
  /** An administrator's quotas and weights, once the user is known to be one. */
  adminConfig: AdminConfigModel | null = null;
  private readonly _adminConfigOptions: IAdminConfigModelOptions;
  private readonly _openJob: ((jobId: string) => void) | null;
  private readonly _openCluster: (() => void) | null;
  private readonly _actions: IJobActions | null;
  /** Elapsed times tick once a second, only while the panel is seen. */
  private readonly _clock = new Poll({
    auto: false,
    factory: async () => this.update(),
    frequency: { interval: 1000, backoff: false, max: 1000 },
    name: 'jupyter-edt:sidebar-clock',
    standby: 'when-hidden'
  });
  private readonly _filterChanged = new Signal<this, IJobFilter>(this);
  private readonly _visibilityChanged = new Signal<this, boolean>(this);
}
