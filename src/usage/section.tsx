/**
 * The usage table of the sidebar: an administrator sees everyone's GPU-hours
 * by user with their quotas; anyone else their own, and their quota.
 */
import * as React from 'react';

import { HTMLSelect } from '@jupyterlab/ui-components';

import type { IEdtUser, IUsageRow, IUsageSums } from '../api';
import {
  describeQuota,
  formatGpuHours,
  formatQuotaCell,
  ownUsage,
  usedShare
} from './format';
import { USAGE_RANGES, type IUsageState, type UsageRange } from './model';

const HELD_TITLE =
  'GPU-hours held: GPUs allocated times the time they were allocated';
const USED_TITLE =
  'GPU-hours used: held while the job was running (not starting or suspended)';

/** One row: a name, the GPU-hours held and used, the jobs and the quota. */
function UsageLine(props: {
  label: string;
  sums: IUsageSums;
  quota?: number | null;
  className?: string;
}): JSX.Element {
  const { sums } = props;
  const share = usedShare(sums);
  return (
    <tr
      className={props.className ?? 'jp-edt-usage-row'}
      data-key={props.label}
    >
      <th scope="row" className="jp-edt-usage-key">
        {props.label}
      </th>
      <td className="jp-edt-usage-held">
        {formatGpuHours(sums.held_gpu_seconds)}
      </td>
      <td
        className="jp-edt-usage-used"
        title={share ? `${share} of the time held` : undefined}
      >
        {formatGpuHours(sums.used_gpu_seconds)}
      </td>
      <td className="jp-edt-usage-jobs">{sums.jobs}</td>
      {props.quota !== undefined && (
        <td className="jp-edt-usage-quota">{formatQuotaCell(props.quota)}</td>
      )}
    </tr>
  );
}

/** The GPU usage over the chosen range. */
export function UsageSection(props: {
  state: IUsageState;
  me: IEdtUser;
  onRange: (range: UsageRange) => void;
}): JSX.Element {
  const { state, me } = props;
  const { report } = state;
  const admin = me.admin;
  const rows: IUsageRow[] = report?.rows ?? [];
  return (
    <section
      className="jp-edt-section jp-edt-usage"
      aria-label="GPU usage"
      data-admin={String(admin)}
    >
      <div className="jp-edt-section-head">
        <h3 className="jp-edt-section-title">
          {admin ? 'GPU usage' : 'My GPU usage'}
        </h3>
      </div>
      <HTMLSelect
        className="jp-edt-usage-range"
        aria-label="Usage period"
        value={state.range}
        onChange={event =>
          props.onRange(event.currentTarget.value as UsageRange)
        }
        options={USAGE_RANGES.map(r => ({ value: r.value, label: r.label }))}
      />
      {state.error !== null && (
        <div className="jp-edt-error" role="alert">
          {state.error}
        </div>
      )}
      {state.loading && report === null ? (
        <div className="jp-edt-loading">Loading usage…</div>
      ) : (
        report !== null && (
          <table className="jp-edt-usage-table">
            <thead>
              <tr>
                <th scope="col">{admin ? 'User' : ''}</th>
                <th scope="col" title={HELD_TITLE}>
                  GPU-h held
                </th>
                <th scope="col" title={USED_TITLE}>
                  GPU-h used
                </th>
                <th scope="col">Jobs</th>
                {admin && (
                  <th
                    scope="col"
                    title="The most GPUs the user may hold at once"
                  >
                    Quota
                  </th>
                )}
              </tr>
            </thead>
            <tbody>
              {admin ? (
                rows.map(row => (
                  <UsageLine
                    key={row.key ?? ''}
                    label={row.key ?? '(none)'}
                    sums={row}
                    quota={row.quota}
                  />
                ))
              ) : (
                <UsageLine label={me.name} sums={ownUsage(report, me)} />
              )}
            </tbody>
            {admin && (
              <tfoot>
                <UsageLine
                  label="All users"
                  sums={report.total}
                  quota={null}
                  className="jp-edt-usage-total"
                />
              </tfoot>
            )}
          </table>
        )
      )}
      {admin && report !== null && rows.length === 0 && (
        <div className="jp-edt-empty jp-edt-muted">
          No GPU was held in this period.
        </div>
      )}
      {!admin && (
        <div className="jp-edt-usage-quota-line" title="Your quota">
          Quota: {describeQuota(me.quota)}
        </div>
      )}
    </section>
  );
}
