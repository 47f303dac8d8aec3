import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import type { IEdtUser } from '../api';
import {
  fetchAdminConfig,
  patchAdminConfig,
  type IAdminConfig,
  type ILiveSettingsPatch
} from '../api/adminconfig';
import {
  AdminConfigModel,
  EdtSidebar,
  describeChangeSource,
  describeSettingChange,
  limitPatch,
  limitRows,
  newLimitPatch,
  parseQuota,
  parseWeight
} from '../sidebar';

import { waitFor } from './fixtures/wait';

const CONFIG: IAdminConfig = {
  config: {
    user_quotas: { bob: 1, alice: 2 },
    group_quotas: { students: 4 },
    user_weights: { alice: 2, carol: 0.5 },
    user_groups: { alice: ['ml'] },
    admin_users: ['root'],
    admin_groups: [],
    policy: 'fair-share'
  },
  changes: [
    {
      id: 2,
      time: 1_767_225_600,
      kind: 'config',
      user: 'root',
      source: 'api',
      changes: [{ setting: 'user_quotas', key: 'bob', old: 2, new: 1 }]
    }
  ]
};

const ROOT: IEdtUser = { name: 'root', admin: true };
const ALICE: IEdtUser = { name: 'alice', admin: false };

/** The settings with a merge patch applied, as the service does. */
function merged(answer: IAdminConfig, patch: ILiveSettingsPatch): IAdminConfig {
  const config = JSON.parse(JSON.stringify(answer.config));
  for (const [setting, value] of Object.entries(patch)) {
    for (const [name, item] of Object.entries(value as object)) {
      if (item === null) {
        delete config[setting][name];
      } else {
        config[setting][name] = item;
      }
    }
  }
  return { ...answer, config };
}

describe('the quotas and weights table', () => {
  it('lists users by name, with their quota and weight, then groups', () => {
    expect(limitRows(CONFIG.config)).toEqual([
      { kind: 'user', name: 'alice', quota: 2, weight: 2 },
      { kind: 'user', name: 'bob', quota: 1, weight: null },
      { kind: 'user', name: 'carol', quota: null, weight: 0.5 },
      { kind: 'group', name: 'students', quota: 4, weight: null }
    ]);
  });

  it('reads a quota as whole GPUs and a weight as a positive number; empty lifts it', () => {
    expect(parseQuota(' 3 ')).toEqual({ value: 3 });
    expect(parseQuota('')).toEqual({ value: null });
    expect(parseQuota('0')).toEqual({ value: 0 });
    for (const bad of ['1.5', '-1', 'two']) {
      expect(parseQuota(bad)).toEqual({
        error: `A quota is a whole number of GPUs, 0 or more, not "${bad}".`
      });
    }
    expect(parseWeight('0.5')).toEqual({ value: 0.5 });
    expect(parseWeight('')).toEqual({ value: null });
    expect('error' in parseWeight('0')).toBe(true);
    expect('error' in parseWeight('Infinity')).toBe(true);
  });

  it('changes one field of one row by a merge patch', () => {
    expect(limitPatch('user', 'bob', 'quota', 2)).toEqual({
      user_quotas: { bob: 2 }
    });
    expect(limitPatch('group', 'ml', 'quota', null)).toEqual({
      group_quotas: { ml: null }
    });
    expect(limitPatch('user', 'bob', 'weight', 3)).toEqual({
      user_weights: { bob: 3 }
    });
  });

  it("adds a user's quota and weight, or a group's quota, or says what is missing", () => {
    expect(newLimitPatch('user', ' dana ', '2', '1.5')).toEqual({
      patch: { user_quotas: { dana: 2 }, user_weights: { dana: 1.5 } }
    });
    expect(newLimitPatch('group', 'ml', '3', '9')).toEqual({
      patch: { group_quotas: { ml: 3 } }
    });
    expect(newLimitPatch('user', '', '2', '')).toEqual({
      error: 'Name the user.'
    });
    expect(newLimitPatch('user', 'dana', '', '')).toEqual({
      error: 'Give dana a quota or a weight.'
    });
    expect('error' in newLimitPatch('user', 'dana', '2', '-1')).toBe(true);
  });

  it('says who changed what', () => {
    const [latest] = CONFIG.changes;
    expect(describeChangeSource(latest)).toBe('root');
    expect(describeChangeSource({ ...latest, user: null })).toBe(
      'a reload of the config file'
    );
    expect(describeSettingChange(latest.changes[0])).toBe(
      "user_quotas['bob']: 2 → 1"
    );
    expect(
      describeSettingChange({ setting: 'policy', old: 'fair-share', new: null })
    ).toBe('policy: "fair-share" → none');
  });
});

describe('the admin config client', () => {
  it('reads and patches /edt/api/v1/admin/config', async () => {
    const requests: { url: string; method: string; body: string }[] = [];
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: async (input: RequestInfo) => {
        const request = input as Request;
        requests.push({
          url: request.url,
          method: request.method,
          body: await request.text()
        });
        return new Response(JSON.stringify(CONFIG), {
          status: 200,
          headers: { 'Content-Type': 'application/json' }
        });
      }
    });
    expect(await fetchAdminConfig(settings)).toEqual(CONFIG);
    await patchAdminConfig({ user_quotas: { bob: null } }, settings);
    expect(requests.map(r => [new URL(r.url).pathname, r.method])).toEqual([
      ['/edt/api/v1/admin/config', 'GET'],
      ['/edt/api/v1/admin/config', 'PATCH']
    ]);
    expect(JSON.parse(requests[1].body)).toEqual({
      user_quotas: { bob: null }
    });
  });
});

describe('AdminConfigModel', () => {
  it("takes the service's answer to a change, and its refusal as the error", async () => {
    let answer = CONFIG;
    const patches: ILiveSettingsPatch[] = [];
    const model = new AdminConfigModel({
      fetch: async () => answer,
      patch: async patch => {
        patches.push(patch);
        if ('group_quotas' in patch) {
          throw new Error("group_quotas['ml'] must be a whole number of GPUs");
        }
        answer = merged(answer, patch);
        return answer;
      }
    });
    await model.refresh();
    expect(model.state.loading).toBe(false);
    expect(model.rows.map(r => r.name)).toEqual([
      'alice',
      'bob',
      'carol',
      'students'
    ]);
    expect(await model.change({ user_quotas: { bob: 3 } })).toBe(true);
    expect(model.rows[1]).toEqual({
      kind: 'user',
      name: 'bob',
      quota: 3,
      weight: null
    });
    expect(await model.change({ group_quotas: { ml: -1 } })).toBe(false);
    expect(model.state.error).toContain("group_quotas['ml']");
    expect(model.state.answer?.config.user_quotas.bob).toBe(3); // kept
    expect(patches).toHaveLength(2);
    model.dispose();
  });
});

describe('EdtSidebar quotas and weights', () => {
  function sidebarFor(me: IEdtUser, patches: ILiveSettingsPatch[]): EdtSidebar {
    let answer = CONFIG;
    const sidebar = new EdtSidebar({
      fetchCluster: async () => ({ source: 'virtual', devices: [] }),
      fetchUsage: async () => ({
        since: 0,
        until: 1,
        by: 'user',
        rows: [],
        total: { held_gpu_seconds: 0, used_gpu_seconds: 0, jobs: 0 }
      }),
      adminConfig: {
        fetch: async () => answer,
        patch: async patch => {
          patches.push(patch);
          answer = merged(answer, patch);
          return answer;
        }
      }
    });
    sidebar.me = me;
    Widget.attach(sidebar, document.body);
    return sidebar;
  }

  it('lets an administrator change a quota in place', async () => {
    const patches: ILiveSettingsPatch[] = [];
    const sidebar = sidebarFor(ROOT, patches);
    await waitFor(
      () => sidebar.node.querySelectorAll('.jp-edt-limit-row').length === 4
    );
    const section = sidebar.node.querySelector(
      '.jp-edt-admin-config'
    ) as HTMLElement;
    expect(section.querySelector('.jp-edt-limits-latest')?.textContent).toBe(
      "Last changed by root: user_quotas['bob']: 2 → 1"
    );
    const quota = section.querySelector(
      'input[aria-label="Quota of user bob"]'
    ) as HTMLInputElement;
    expect(quota.value).toBe('1');
    quota.focus();
    quota.value = '2';
    quota.blur();
    await waitFor(() => patches.length === 1);
    expect(patches).toEqual([{ user_quotas: { bob: 2 } }]);
    await waitFor(() => sidebar.adminConfig?.rows[1].quota === 2);
    sidebar.dispose();
  });

  it('is not shown to anyone else', async () => {
    const sidebar = sidebarFor(ALICE, []);
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(sidebar.adminConfig).toBeNull();
    expect(sidebar.node.querySelector('.jp-edt-admin-config')).toBeNull();
    sidebar.dispose();
  });
});
