import * as React from 'react';

import { refreshIcon } from '@jupyterlab/ui-components';

import type { Device } from '../api';
import { clampPercent, describeCluster, formatMemory } from '../format';
import type { IClusterState } from './model';

/** A small horizontal bar for a utilisation in percent. */
export function UtilizationBar(props: { percent: number }): JSX.Element {
  const percent = Math.round(props.percent);
  return (
    <div
      className="jp-edt-util"
      title={`Utilisation: ${percent}%`}
      role="meter"
      aria-label="Utilisation"
      aria-valuemin={0}
      aria-valuemax={100}
      aria-valuenow={percent}
    >
      <div className="jp-edt-util-bar">
        <div className="jp-edt-util-fill" style={{ width: `${percent}%` }} />
      </div>
      <span className="jp-edt-util-label">{percent}%</span>
    </div>
  );
}

/** One device: name, index, virtual badge, memory and utilisation. */
export function DeviceRow(props: { device: Device }): JSX.Element {
  const { device } = props;
  const memory = formatMemory(device);
  const utilization = clampPercent(device.utilization);
  return (
    <li
      className="jp-edt-device"
      data-device-id={device.id}
      data-virtual={device.virtual ? 'true' : 'false'}
      data-held={device.held ? 'true' : 'false'}
      title={device.uuid}
    >
      <div className="jp-edt-device-head">
        <span className="jp-edt-device-index">#{device.index}</span>
        <span className="jp-edt-device-name">{device.name}</span>
        {device.virtual && (
          <span className="jp-edt-virtual-badge">virtual</span>
        )}
      </div>
      <div className="jp-edt-device-holder jp-edt-muted">
        {device.held
          ? device.job_id
            ? `training job ${device.job_id}`
            : "another user's job"
          : 'free'}
      </div>
      <div className="jp-edt-device-stats">
        {memory !== null ? (
          <span className="jp-edt-device-memory">{memory}</span>
        ) : (
          <span className="jp-edt-device-memory jp-edt-muted">
            {device.virtual ? 'CPU worker slot' : 'memory unknown'}
          </span>
        )}
        {utilization !== null && <UtilizationBar percent={utilization} />}
      </div>
    </li>
  );
}

/** The list of devices. */
export function DeviceList(props: { devices: Device[] }): JSX.Element {
  return (
    <ul className="jp-edt-device-list">
      {props.devices.map(device => (
        <DeviceRow key={device.id} device={device} />
      ))}
    </ul>
  );
}

/** The whole panel: title, refresh button, and the Devices section. */
export function ClusterView(props: {
  state: IClusterState;
  onRefresh: () => void;
}): JSX.Element {
  const { cluster, error, loading } = props.state;
  return (
    <div className="jp-edt-panel">
      <header className="jp-edt-header">
        <h2 className="jp-edt-title">Elastic Training</h2>
        <button
          type="button"
          className="jp-edt-refresh jp-Button jp-mod-minimal"
          title="Refresh"
          aria-label="Refresh"
          onClick={props.onRefresh}
        >
          <refreshIcon.react tag="span" />
        </button>
      </header>
      <section className="jp-edt-section jp-edt-devices" aria-label="Devices">
        <h3 className="jp-edt-section-title">Devices</h3>
        {loading && cluster === null && (
          <div className="jp-edt-loading">Loading devices…</div>
        )}
        {error !== null && (
          <div className="jp-edt-error" role="alert">
            {error}
          </div>
        )}
        {cluster !== null && (
          <>
            <div className="jp-edt-source" data-source={cluster.source}>
              {describeCluster(cluster)}
            </div>
            <DeviceList devices={cluster.devices} />
          </>
        )}
      </section>
    </div>
  );
}
