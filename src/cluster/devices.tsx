/**
 * The devices as the sidebar and the cluster view show them: a row per device
 * with its memory, utilisation, holder and (optionally) its recent history.
 */
import * as React from 'react';

import type { Device } from '../api';
import { StreamingChart } from '../charts/chart';
import {
  clampPercent,
  describeCluster,
  describeDrain,
  formatMemory
} from '../format';
import type { IClusterState } from './model';

/** Utilisation history columns for the chart: times and percentages. */
export function historyColumns(device: Device): [number[], (number | null)[]] {
  const readings = device.history ?? [];
  return [
    readings.map(r => r.time),
    readings.map(r => clampPercent(r.utilization))
  ];
}

/** Whether a device has utilisation readings to chart (virtual ones have none). */
export function hasReadings(device: Device): boolean {
  const readings = device.history ?? [];
  return (
    readings.length > 1 &&
    readings.some(r => r.utilization !== null && r.utilization !== undefined)
  );
}

/** A device's recent utilisation, through the one chart wrapper (src/charts). */
export function UtilizationHistory(props: { device: Device }): JSX.Element {
  const host = React.useRef<HTMLDivElement>(null);
  const chart = React.useRef<StreamingChart | null>(null);
  React.useEffect(() => {
    const instance = new StreamingChart({
      series: [
        { label: 'utilisation %', color: '--jp-brand-color1', fill: true }
      ],
      xKind: 'time',
      height: 70,
      yRange: () => [0, 100],
      ariaLabel: 'Utilisation history',
      emptyText: 'no utilisation reading yet'
    });
    chart.current = instance;
    host.current?.appendChild(instance.node);
    return () => {
      instance.dispose();
      chart.current = null;
    };
  }, []);
  const [times, values] = historyColumns(props.device);
  React.useEffect(() => {
    chart.current?.setData([times, values]);
  });
  return (
    <div
      className="jp-edt-device-history"
      ref={host}
      data-readings={times.length}
    />
  );
}

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

/** One device: name, index, virtual badge, memory, utilisation and holder. */
export function DeviceRow(props: {
  device: Device;
  onOpenJob?: (jobId: string) => void;
  jobName?: (jobId: string) => string | null;
  showHistory?: boolean;
}): JSX.Element {
  const holder = (jobId: string) => {
    const name = props.jobName?.(jobId);
    return name ? `${name} [${jobId}]` : `training job ${jobId}`;
  };
  const { device } = props;
  const memory = formatMemory(device);
  const utilization = clampPercent(device.utilization);
  return (
    <li
      className="jp-edt-device"
      data-device-id={device.id}
      data-virtual={device.virtual ? 'true' : 'false'}
      data-held={device.held ? 'true' : 'false'}
      data-draining={device.draining ? 'true' : 'false'}
      title={device.uuid}
    >
      <div className="jp-edt-device-head">
        <span className="jp-edt-device-index">#{device.index}</span>
        <span className="jp-edt-device-name">{device.name}</span>
        {device.virtual && (
          <span className="jp-edt-virtual-badge">virtual</span>
        )}
        {device.draining && (
          <span
            className="jp-edt-draining-badge"
            title={describeDrain(device, Date.now() / 1000)}
          >
            draining
          </span>
        )}
      </div>
      <div className="jp-edt-device-holder jp-edt-muted">
        {device.held ? (
          device.job_id ? (
            props.onOpenJob ? (
              <a
                href="#"
                className="jp-edt-holder-link"
                onClick={event => {
                  event.preventDefault();
                  props.onOpenJob?.(device.job_id as string);
                }}
              >
                {holder(device.job_id)}
              </a>
            ) : (
              holder(device.job_id)
            )
          ) : (
            "another user's job"
          )
        ) : (
          'free'
        )}
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
      {props.showHistory &&
        (hasReadings(device) ? (
          <UtilizationHistory device={device} />
        ) : (
          <div className="jp-edt-no-history jp-edt-muted">
            {device.virtual
              ? 'No utilisation readings (virtual device)'
              : 'No utilisation readings yet'}
          </div>
        ))}
    </li>
  );
}

/** The list of devices. */
export function DeviceList(props: {
  devices: Device[];
  onOpenJob?: (jobId: string) => void;
  jobName?: (jobId: string) => string | null;
  showHistory?: boolean;
}): JSX.Element {
  return (
    <ul className="jp-edt-device-list">
      {props.devices.map(device => (
        <DeviceRow
          key={device.id}
          device={device}
          onOpenJob={props.onOpenJob}
          jobName={props.jobName}
          showHistory={props.showHistory}
        />
      ))}
    </ul>
  );
}

/** The cluster: every device, its holder and (optionally) its history. */
export function DevicesSection(props: {
  state: IClusterState;
  onOpenJob?: (jobId: string) => void;
  jobName?: (jobId: string) => string | null;
  showHistory?: boolean;
  onOpenCluster?: () => void;
}): JSX.Element {
  const { cluster, error, loading } = props.state;
  return (
    <>
      <section className="jp-edt-section jp-edt-devices" aria-label="Devices">
        <div className="jp-edt-section-head">
          <h3 className="jp-edt-section-title">Devices</h3>
          {props.onOpenCluster && (
            <a
              href="#"
              className="jp-edt-open-cluster"
              onClick={event => {
                event.preventDefault();
                props.onOpenCluster?.();
              }}
            >
              Cluster view
            </a>
          )}
        </div>
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
            <DeviceList
              devices={cluster.devices}
              onOpenJob={props.onOpenJob}
              jobName={props.jobName}
              showHistory={props.showHistory}
            />
          </>
        )}
      </section>
    </>
  );
}
