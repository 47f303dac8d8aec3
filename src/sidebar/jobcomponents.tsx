import * as React from 'react';

import { HTMLSelect } from '@jupyterlab/ui-components';

import {
  STATE_CHOICES,
  elapsedSeconds,
  formatDuration,
  progressOf,
  type IJobFilter,
  type IJobRow
} from '../jobs/state';
import type { IJobsState } from '../jobs/model';
import type { IJobInfo } from '../api';
import { describeKind } from '../format';

/** A job's state as a coloured badge (colours in style/base.css). */
export function StateBadge(props: { state: string }): JSX.Element {
  return (
    <span className="jp-edt-state-badge" data-state={props.state}>
      {props.state}
    </span>
  );
}

/** What a resize does to a job (its kind), and its restarts; text in describeKind. */
export function KindTag(props: {
  job: Pick<IJobInfo, 'spec' | 'state' | 'elastic' | 'restarts'>;
}): JSX.Element {
  const tag = describeKind(props.job);
  return (
    <span
      className="jp-edt-kind-tag"
      data-kind={tag.kind}
      data-fixed={String(tag.fixed)}
      title={tag.title}
    >
      {tag.label}
    </span>
  );
}

/** One job: name, owner, state, GPUs now/max, progress and elapsed time. */
export function JobRow(props: {
  row: IJobRow;
  now: number;
  onOpen: (jobId: string) => void;
}): JSX.Element {
  const { job } = props.row;
  const { fraction, text } = progressOf(props.row);
  const percent = fraction === null ? null : Math.round(fraction * 100);
  return (
    <li
      className="jp-edt-jobrow"
      data-job-id={job.id}
      data-state={job.state}
      data-gpus={job.devices.length}
      data-elastic={String(job.elastic)}
      tabIndex={0}
      role="button"
      title={`Open ${job.name || job.id} [${job.id}]`}
      onClick={() => props.onOpen(job.id)}
      onKeyDown={event => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          props.onOpen(job.id);
        }
      }}
    >
      <div className="jp-edt-jobrow-head">
        <span className="jp-edt-jobrow-name">{job.name || job.id}</span>
        <StateBadge state={job.state} />
      </div>
      <div className="jp-edt-jobrow-meta jp-edt-muted">
        <span className="jp-edt-jobrow-owner" title="Owner">
          {job.user}
        </span>
        <span className="jp-edt-jobrow-gpus" title="GPUs held / most">
          {job.devices.length}/{job.max_gpus} GPUs
        </span>
        <KindTag job={job} />
        <span className="jp-edt-jobrow-elapsed" title="Elapsed">
          {formatDuration(elapsedSeconds(job, props.now))}
        </span>
      </div>
      {(percent !== null || text) && (
        <div className="jp-edt-jobrow-progress" title={text}>
          {percent !== null && (
            <div
              className="jp-edt-job-progress-bar"
              role="progressbar"
              aria-valuemin={0}
              aria-valuemax={100}
              aria-valuenow={percent}
            >
              <div
                className="jp-edt-job-progress-fill"
                style={{ width: `${percent}%` }}
              />
            </div>
          )}
          <span className="jp-edt-jobrow-progress-text">{text}</span>
        </div>
      )}
    </li>
  );
}

const STATE_LABELS: Record<string, string> = {
  all: 'All states',
  active: 'Active',
  finished: 'Finished'
};

/** The filters, the connection status and the rows. */
export function JobList(props: {
  state: IJobsState;
  rows: IJobRow[];
  filter: IJobFilter;
  now: number;
  onFilter: (filter: IJobFilter) => void;
  onOpen: (jobId: string) => void;
}): JSX.Element {
  const { state, rows, filter } = props;
  return (
    <section className="jp-edt-section jp-edt-jobs" aria-label="Jobs">
      <div className="jp-edt-section-head">
        <h3 className="jp-edt-section-title">Jobs</h3>
        <span
          className="jp-edt-connection"
          data-status={state.connection}
          title={`Live updates: ${state.connection}`}
        />
      </div>
      <div className="jp-edt-job-filters">
        <HTMLSelect
          className="jp-edt-filter-scope"
          aria-label="Whose jobs"
          value={filter.scope}
          onChange={event =>
            props.onFilter({
              ...filter,
              scope: event.currentTarget.value as IJobFilter['scope']
            })
          }
          options={[
            { value: 'mine', label: 'My jobs' },
            { value: 'all', label: 'All users' }
          ]}
        />
        <HTMLSelect
          className="jp-edt-filter-state"
          aria-label="Job state"
          value={filter.state}
          onChange={event =>
            props.onFilter({
              ...filter,
              state: event.currentTarget.value as IJobFilter['state']
            })
          }
          options={STATE_CHOICES.map(value => ({
            value,
            label: STATE_LABELS[value] ?? value
          }))}
        />
      </div>
      {state.error !== null && (
        <div className="jp-edt-error" role="alert">
          {state.error}
        </div>
      )}
      {state.loading ? (
        <div className="jp-edt-loading">Loading jobs…</div>
      ) : rows.length === 0 ? (
        <div className="jp-edt-empty jp-edt-muted">
          No jobs{filter.state === 'all' ? '' : ' in this state'}. Submit one
          with %%edt_submit, or right-click a .py file or notebook.
        </div>
      ) : (
        <ul className="jp-edt-job-list">
          {rows.map(row => (
            <JobRow
              key={row.job.id}
              row={row}
              now={props.now}
              onOpen={props.onOpen}
            />
          ))}
        </ul>
      )}
    </section>
  );
}
