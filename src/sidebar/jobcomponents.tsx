import * as React from 'react';

import {
  HTMLSelect,
  copyIcon,
  editIcon,
  launchIcon,
  stopIcon,
  type LabIcon
} from '@jupyterlab/ui-components';

import {
  STATE_CHOICES,
  elapsedSeconds,
  formatDuration,
  type IJobFilter,
  type IJobRow
} from '../jobs/state';
import type { IJobsState } from '../jobs/model';
import { describeProgress } from '../jobs/progress';
import { TERMINAL_STATES, type IJobInfo } from '../api';
import { describeKind } from '../format';
import { shortReason } from '../notify';
import type { IJobActions } from './actions';

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

/** One hover action of a row: an icon button. */
function RowAction(props: {
  action: string;
  label: string;
  icon: LabIcon;
  onAct: () => void;
}): JSX.Element {
  return (
    <button
      type="button"
      className="jp-edt-jobrow-action jp-Button jp-mod-minimal"
      data-action={props.action}
      title={props.label}
      aria-label={props.label}
      onClick={event => {
        event.stopPropagation(); // not the row's own click (open)
        props.onAct();
      }}
    >
      <props.icon.react tag="span" />
    </button>
  );
}

/**
 * A row's hover actions (shown on hover and on keyboard focus): open, cancel
 * and change max GPUs while the job runs, copy its id. The same actions as
 * the row's context menu.
 */
export function JobRowActions(props: {
  job: IJobInfo;
  actions: IJobActions;
}): JSX.Element {
  const { job, actions } = props;
  const active = !TERMINAL_STATES.has(job.state);
  return (
    <div
      className="jp-edt-jobrow-actions"
      role="toolbar"
      aria-label={`Actions on ${job.name || job.id}`}
      // Enter or Space on a button acts on it, not on the row.
      onKeyDown={event => event.stopPropagation()}
    >
      <RowAction
        action="open"
        label="Open job"
        icon={launchIcon}
        onAct={() => actions.open(job.id)}
      />
      {active && (
        <RowAction
          action="cancel"
          label="Cancel job…"
          icon={stopIcon}
          onAct={() => void actions.cancel(job.id)}
        />
      )}
      {active && (
        <RowAction
          action="max-gpus"
          label="Change max GPUs…"
          icon={editIcon}
          onAct={() => void actions.changeMaxGpus(job.id)}
        />
      )}
      <RowAction
        action="copy-id"
        label={`Copy job id (${job.id})`}
        icon={copyIcon}
        onAct={() => actions.copyId(job.id)}
      />
    </div>
  );
}

/**
 * One job: name, owner, state, GPUs now/max, progress and elapsed time, with
 * its actions on hover (and in its context menu, see commands.ts).
 */
export function JobRow(props: {
  row: IJobRow;
  now: number;
  onOpen: (jobId: string) => void;
  actions?: IJobActions | null;
}): JSX.Element {
  const { job, progress } = props.row;
  // One wording everywhere (jobs/progress.ts); a row says nothing before the
  // job reports, unless it is done.
  const shown = progress !== null || job.state === 'SUCCEEDED';
  const { fraction, text } = shown
    ? describeProgress(progress, job)
    : { fraction: null, text: '' };
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
      {props.actions && <JobRowActions job={job} actions={props.actions} />}
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
      {job.state === 'FAILED' && job.reason && (
        // the sentence the toast and the job tab give: the exception, where, which workers
        <div className="jp-edt-jobrow-reason" title={job.reason.split('\n')[0]}>
          {shortReason(job.reason)}
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
  actions?: IJobActions | null;
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
              actions={props.actions}
            />
          ))}
        </ul>
      )}
    </section>
  );
}
