/**
 * The sidebar's quotas and weights, for an administrator: each user's and
 * group's quota and each user's weight, edited in place, and the latest change
 * of the live settings (GET|PATCH /edt/api/v1/admin/config). The service
 * allocates by a change at once: a lowered quota shrinks the jobs over it.
 */
import * as React from 'react';

import type { Poll } from '@lumino/polling';

import { reasonMessage } from '../api';
import {
  fetchAdminConfig,
  patchAdminConfig,
  type IAdminConfig,
  type IConfigChange,
  type ILiveSettings,
  type ILiveSettingsPatch,
  type ISettingChange
} from '../api/adminconfig';
import { PolledModel } from '../polledModel';

/** Whose limit a row is: a user's (quota and weight) or a group's (quota). */
export type LimitKind = 'user' | 'group';

/** One row of the table. */
export interface ILimitRow {
  kind: LimitKind;
  name: string;
  /** GPUs at once; null: no quota. */
  quota: number | null;
  /** The fair-share weight (users only); null: the default, 1. */
  weight: number | null;
}

/** What a row's field is. */
export type LimitField = 'quota' | 'weight';

/** The rows of the settings: users by name, then groups by name. */
export function limitRows(config: ILiveSettings): ILimitRow[] {
  const users = new Set([
    ...Object.keys(config.user_quotas),
    ...Object.keys(config.user_weights)
  ]);
  const byName = (a: string, b: string) => a.localeCompare(b);
  return [
    ...[...users].sort(byName).map(name => ({
      kind: 'user' as const,
      name,
      quota: config.user_quotas[name] ?? null,
      weight: config.user_weights[name] ?? null
    })),
    ...Object.keys(config.group_quotas)
      .sort(byName)
      .map(name => ({
        kind: 'group' as const,
        name,
        quota: config.group_quotas[name],
        weight: null
      }))
  ];
}

/** A field's typed text: its value (null when empty), or why it is none. */
export type Parsed = { value: number | null } | { error: string };

/** A quota as typed: empty (no quota) or a whole number of GPUs, 0 or more. */
export function parseQuota(text: string): Parsed {
  const trimmed = text.trim();
  if (trimmed === '') {
    return { value: null };
  }
  const value = Number(trimmed);
  return Number.isInteger(value) && value >= 0
    ? { value }
    : {
        error: `A quota is a whole number of GPUs, 0 or more, not "${trimmed}".`
      };
}

/** A weight as typed: empty (the default, 1) or a positive number. */
export function parseWeight(text: string): Parsed {
  const trimmed = text.trim();
  if (trimmed === '') {
    return { value: null };
  }
  const value = Number(trimmed);
  return Number.isFinite(value) && value > 0
    ? { value }
    : { error: `A weight is a positive number, not "${trimmed}".` };
}

/** The merge patch that sets one field of a row (null lifts it). */
export function limitPatch(
  kind: LimitKind,
  name: string,
  field: LimitField,
  value: number | null
): ILiveSettingsPatch {
  if (field === 'weight') {
    return { user_weights: { [name]: value } };
  }
  return kind === 'user'
    ? { user_quotas: { [name]: value } }
    : { group_quotas: { [name]: value } };
}

/**
 * The patch the add form sends for a user's or group's new quota and weight
 * (typed text), or why it sends none.
 */
export function newLimitPatch(
  kind: LimitKind,
  name: string,
  quotaText: string,
  weightText: string
): { patch: ILiveSettingsPatch } | { error: string } {
  const trimmed = name.trim();
  const quota = parseQuota(quotaText);
  const weight = kind === 'user' ? parseWeight(weightText) : { value: null };
  if (trimmed === '') {
    return { error: `Name the ${kind}.` };
  }
  if ('error' in quota) {
    return quota;
  }
  if ('error' in weight) {
    return weight;
  }
  if (quota.value === null && weight.value === null) {
    return { error: `Give ${trimmed} a quota or a weight.` };
  }
  const patch: ILiveSettingsPatch = {};
  if (quota.value !== null) {
    Object.assign(patch, limitPatch(kind, trimmed, 'quota', quota.value));
  }
  if (weight.value !== null) {
    Object.assign(patch, limitPatch(kind, trimmed, 'weight', weight.value));
  }
  return { patch };
}

/** One setting's change as the section says it: `user_quotas['bob']: 1 → 2`. */
export function describeSettingChange(change: ISettingChange): string {
  const show = (value: unknown) =>
    value === null || value === undefined ? 'none' : JSON.stringify(value);
  const key = change.key === undefined ? '' : `['${change.key}']`;
  return `${change.setting}${key}: ${show(change.old)} → ${show(change.new)}`;
}

/** Who made a change, and how. */
export function describeChangeSource(change: IConfigChange): string {
  return change.user === null ? 'a reload of the config file' : change.user;
}

/** What the section shows at one moment. */
export interface IAdminConfigState {
  /** The last answer; kept while a later request fails. */
  readonly answer: IAdminConfig | null;
  /** The message of the last failed request or change; null after a success. */
  readonly error: string | null;
  /** True until the first answer (success or failure) arrives. */
  readonly loading: boolean;
}

/** How an AdminConfigModel talks to the server and when it polls. */
export interface IAdminConfigModelOptions {
  /** Reads the settings (the REST client in the app, a fake in tests). */
  fetch?: () => Promise<IAdminConfig>;
  /** Changes them. */
  patch?: (patch: ILiveSettingsPatch) => Promise<IAdminConfig>;
  /** Milliseconds between two polls (a reload or another admin's change). */
  interval?: number;
  /** When the poll rests; the sidebar rests while it is hidden. */
  standby?: Poll.Standby | (() => boolean | Poll.Standby);
}

/** Default polling period of the settings, in milliseconds. */
export const DEFAULT_ADMIN_CONFIG_INTERVAL = 60_000;

/** The live settings, polled, and the administrator's changes of them. */
export class AdminConfigModel extends PolledModel<IAdminConfigState> {
  constructor(options: IAdminConfigModelOptions = {}) {
    const interval = options.interval ?? DEFAULT_ADMIN_CONFIG_INTERVAL;
    super(
      { answer: null, error: null, loading: true },
      {
        frequency: { interval, backoff: true, max: 10 * interval },
        name: 'jupyter-edt:admin-config',
        standby: options.standby ?? 'when-hidden'
      }
    );
    this._fetch = options.fetch ?? (() => fetchAdminConfig());
    this._patch = options.patch ?? (patch => patchAdminConfig(patch));
  }

  /** The table's rows, as the last answer gives them. */
  get rows(): ILimitRow[] {
    const answer = this.state.answer;
    return answer === null ? [] : limitRows(answer.config);
  }

  /**
   * Send a change; resolves true once the service applied it (its answer is
   * then the state), false when it refused it (its message is the error).
   */
  async change(patch: ILiveSettingsPatch): Promise<boolean> {
    try {
      const answer = await this._patch(patch);
      this._setState({ answer, error: null, loading: false });
      return true;
    } catch (reason) {
      this._setState({ ...this.state, error: reasonMessage(reason) });
      return false;
    }
  }

  /** Say why a typed value is not sent. */
  refuse(error: string): void {
    this._setState({ ...this.state, error });
  }

  protected async _update(): Promise<void> {
    try {
      const answer = await this._fetch();
      this._setState({ answer, error: null, loading: false });
    } catch (reason) {
      const error = `Could not read the settings: ${reasonMessage(reason)}`;
      this._setState({ ...this.state, error, loading: false });
      throw reason; // the poll backs off while the server keeps failing
    }
  }

  private readonly _fetch: () => Promise<IAdminConfig>;
  private readonly _patch: (patch: ILiveSettingsPatch) => Promise<IAdminConfig>;
}

/** A field that sends its value when it loses focus (or on Enter). */
function LimitInput(props: {
  label: string;
  value: number | null;
  parse: (text: string) => Parsed;
  placeholder: string;
  onValue: (value: number | null) => void;
  onRefuse: (error: string) => void;
}): JSX.Element {
  const shown = props.value === null ? '' : String(props.value);
  return (
    <input
      key={shown} // a new value from the server replaces what was typed
      className="jp-edt-limit-input"
      aria-label={props.label}
      defaultValue={shown}
      placeholder={props.placeholder}
      inputMode="decimal"
      onKeyDown={event => {
        if (event.key === 'Enter') {
          event.currentTarget.blur();
        }
      }}
      onBlur={event => {
        const parsed = props.parse(event.currentTarget.value);
        if ('error' in parsed) {
          props.onRefuse(parsed.error);
        } else if (parsed.value !== props.value) {
          props.onValue(parsed.value);
        }
      }}
    />
  );
}

/** A form that adds a user's or a group's quota (and a user's weight). */
function AddLimit(props: { model: AdminConfigModel }): JSX.Element {
  const [kind, setKind] = React.useState<LimitKind>('user');
  const [name, setName] = React.useState('');
  const [quota, setQuota] = React.useState('');
  const [weight, setWeight] = React.useState('');
  const add = async () => {
    const patch = newLimitPatch(kind, name, quota, weight);
    if ('error' in patch) {
      props.model.refuse(patch.error);
    } else if (await props.model.change(patch.patch)) {
      setName('');
      setQuota('');
      setWeight('');
    }
  };
  return (
    <form
      className="jp-edt-limit-add"
      onSubmit={event => {
        event.preventDefault();
        void add();
      }}
    >
      <select
        aria-label="User or group"
        value={kind}
        onChange={event => setKind(event.currentTarget.value as LimitKind)}
      >
        <option value="user">User</option>
        <option value="group">Group</option>
      </select>
      <input
        aria-label="Name"
        placeholder="name"
        value={name}
        onChange={event => setName(event.currentTarget.value)}
      />
      <input
        className="jp-edt-limit-input"
        aria-label="New quota"
        placeholder="GPUs"
        value={quota}
        onChange={event => setQuota(event.currentTarget.value)}
      />
      <input
        className="jp-edt-limit-input"
        aria-label="New weight"
        placeholder="1"
        disabled={kind === 'group'}
        value={kind === 'group' ? '' : weight}
        onChange={event => setWeight(event.currentTarget.value)}
      />
      <button type="submit" className="jp-Button jp-mod-styled jp-mod-accept">
        Set
      </button>
    </form>
  );
}

/** The quotas and weights section of the sidebar (administrators only). */
export function AdminConfigSection(props: {
  model: AdminConfigModel;
}): JSX.Element {
  const { model } = props;
  const { answer, error, loading } = model.state;
  const latest = answer?.changes[0];
  const refuse = (message: string) => model.refuse(message);
  return (
    <section
      className="jp-edt-section jp-edt-admin-config"
      aria-label="Quotas and weights"
    >
      <div className="jp-edt-section-head">
        <h3 className="jp-edt-section-title">Quotas and weights</h3>
      </div>
      {error !== null && (
        <div className="jp-edt-error" role="alert">
          {error}
        </div>
      )}
      {loading && answer === null ? (
        <div className="jp-edt-loading">Loading settings…</div>
      ) : (
        answer !== null && (
          <>
            <table className="jp-edt-limits-table">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col" title="The most GPUs held at once">
                    Quota
                  </th>
                  <th scope="col" title="Weight in the fair share (default 1)">
                    Weight
                  </th>
                </tr>
              </thead>
              <tbody>
                {model.rows.map(row => (
                  <tr
                    key={`${row.kind}:${row.name}`}
                    className="jp-edt-limit-row"
                    data-kind={row.kind}
                  >
                    <th scope="row" className="jp-edt-limit-name">
                      {row.kind === 'group' ? `group ${row.name}` : row.name}
                    </th>
                    <td>
                      <LimitInput
                        label={`Quota of ${row.kind} ${row.name}`}
                        value={row.quota}
                        parse={parseQuota}
                        placeholder="none"
                        onRefuse={refuse}
                        onValue={value =>
                          void model.change(
                            limitPatch(row.kind, row.name, 'quota', value)
                          )
                        }
                      />
                    </td>
                    <td>
                      {row.kind === 'user' && (
                        <LimitInput
                          label={`Weight of user ${row.name}`}
                          value={row.weight}
                          parse={parseWeight}
                          placeholder="1"
                          onRefuse={refuse}
                          onValue={value =>
                            void model.change(
                              limitPatch(row.kind, row.name, 'weight', value)
                            )
                          }
                        />
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
            <AddLimit model={model} />
            <div className="jp-edt-muted jp-edt-limits-policy">
              Policy: {answer.config.policy}. An empty field lifts the quota (or
              weight); a change applies at once.
            </div>
            {latest !== undefined && (
              <div
                className="jp-edt-muted jp-edt-limits-latest"
                title={latest.changes.map(describeSettingChange).join('\n')}
              >
                Last changed by {describeChangeSource(latest)}:{' '}
                {latest.changes.map(describeSettingChange).join('; ')}
              </div>
            )}
          </>
        )
      )}
    </section>
  );
}
