import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import {
  fetchUsage,
  type IEdtUser,
  type IUsageQuery,
  type IUsageReport
} from '../api';
import { EdtSidebar } from '../sidebar';
import {
  UsageModel,
  describeQuota,
  formatGpuHours,
  ownUsage,
  rangeQuery,
  usedShare
} from '../usage';

import { waitFor } from './fixtures/wait';

const REPORT: IUsageReport = {
  since: 0,
  until: 100_000,
  by: 'user',
  rows: [
    {
      key: 'alice',
      held_gpu_seconds: 7200,
      used_gpu_seconds: 5400,
      jobs: 3,
      quota: 2
    },
    {
      key: 'bob',
      held_gpu_seconds: 3600,
      used_gpu_seconds: 3600,
      jobs: 1,
      quota: null
    }
  ],
  total: { held_gpu_seconds: 10800, used_gpu_seconds: 9000, jobs: 4 }
};

const ROOT: IEdtUser = { name: 'root', admin: true };
const ALICE: IEdtUser = {
  name: 'alice',
  admin: false,
  groups: ['vision'],
  quota: { gpus: 2, user: 3, groups: { vision: 2 } }
};

describe('usage formatting', () => {
  it('shows GPU-seconds as GPU-hours, fewer decimals as they grow', () => {
    expect(formatGpuHours(0)).toBe('0');
    expect(formatGpuHours(18)).toBe('<0.01');
    expect(formatGpuHours(5400)).toBe('1.50');
    expect(formatGpuHours(90_000)).toBe('25.0');
    expect(formatGpuHours(4_000_000)).toBe('1111');
    expect(formatGpuHours(-1)).toBe('?');
  });

  it('says what share of the time held trained', () => {
    expect(usedShare(REPORT.rows[0])).toBe('75%');
    expect(usedShare({ ...REPORT.total, held_gpu_seconds: 0 })).toBe('');
  });

  it('tells a user their quota and where it comes from', () => {
    expect(describeQuota(undefined)).toBe('No quota');
    expect(describeQuota({ gpus: null, user: null, groups: {} })).toBe(
      'No quota'
    );
    expect(describeQuota({ gpus: 1, user: 1, groups: {} })).toBe(
      '1 GPU at once'
    );
    expect(describeQuota(ALICE.quota)).toBe(
      '2 GPUs at once (yours: 3; group vision: 2)'
    );
  });

  it("finds the user's own row, or none held", () => {
    expect(ownUsage(REPORT, ALICE).jobs).toBe(3);
    expect(ownUsage(REPORT, { name: 'carol', admin: false })).toEqual({
      held_gpu_seconds: 0,
      used_gpu_seconds: 0,
      jobs: 0
    });
  });

  it('asks for a range ending now', () => {
    expect(rangeQuery('24h', 100_000)).toEqual({ since: 13_600 });
    expect(rangeQuery('7d', 1_000_000)).toEqual({ since: 395_200 });
    expect(rangeQuery('7d', 10)).toEqual({ since: 0 });
    expect(rangeQuery('all', 100_000)).toEqual({});
  });
});

describe('fetchUsage', () => {
  it('sends the range and the rows asked for, and nothing else', async () => {
    const urls: string[] = [];
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: async (input: RequestInfo) => {
        urls.push((input as Request).url);
        return new Response(JSON.stringify(REPORT), {
          status: 200,
          headers: { 'Content-Type': 'application/json' }
        });
      }
    });
    expect(await fetchUsage({ since: 5, by: 'group' }, settings)).toEqual(
      REPORT
    );
    await fetchUsage({}, settings);
    const first = new URL(urls[0]);
    expect(first.pathname).toBe('/edt/api/v1/usage');
    expect(first.searchParams.get('since')).toBe('5');
    expect(first.searchParams.get('by')).toBe('group');
    expect(first.searchParams.has('until')).toBe(false);
    expect(new URL(urls[1]).searchParams.has('since')).toBe(false);
  });
});

describe('UsageModel', () => {
  it('fetches the chosen range by user and keeps a report past a failure', async () => {
    const queries: IUsageQuery[] = [];
    let fail = false;
    const model = new UsageModel({
      fetchUsage: async query => {
        queries.push(query);
        if (fail) {
          throw new Error('server went away');
        }
        return REPORT;
      },
      standby: 'never',
      now: () => 1_000_000
    });
    expect(model.state.loading).toBe(true);
    await model.refresh();
    expect(model.state).toEqual({
      report: REPORT,
      range: '24h',
      error: null,
      loading: false
    });
    expect(queries).toEqual([{ since: 1_000_000 - 86_400, by: 'user' }]);

    model.range = 'all';
    await waitFor(() => queries.length === 2);
    expect(queries[1]).toEqual({ by: 'user' });

    fail = true;
    await model.refresh();
    expect(model.state.error).toBe(
      'Could not read the usage: server went away'
    );
    expect(model.state.report).toEqual(REPORT);
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });
});

describe('EdtSidebar usage table', () => {
  function sidebarFor(me: IEdtUser | null): EdtSidebar {
    const sidebar = new EdtSidebar({
      fetchCluster: async () => ({ source: 'virtual', devices: [] }),
      fetchUsage: async () =>
        me?.admin ? REPORT : { ...REPORT, rows: [REPORT.rows[0]] }
    });
    if (me) {
      sidebar.me = me;
    }
    Widget.attach(sidebar, document.body);
    return sidebar;
  }

  const cells = (row: Element) =>
    Array.from(row.children).map(cell => cell.textContent);

  it('shows an administrator everyone by user, with quotas and a total', async () => {
    const sidebar = sidebarFor(ROOT);
    await waitFor(
      () => sidebar.node.querySelectorAll('.jp-edt-usage-row').length === 2
    );
    const section = sidebar.node.querySelector('.jp-edt-usage') as HTMLElement;
    expect(section.dataset.admin).toBe('true');
    expect(section.querySelector('.jp-edt-section-title')?.textContent).toBe(
      'GPU usage'
    );
    const rows = section.querySelectorAll('.jp-edt-usage-row');
    expect(cells(rows[0])).toEqual(['alice', '2.00', '1.50', '3', '2']);
    expect(cells(rows[1])).toEqual(['bob', '1.00', '1.00', '1', '—']);
    const total = section.querySelector('.jp-edt-usage-total') as Element;
    expect(cells(total)).toEqual(['All users', '3.00', '2.50', '4', '—']);
    expect(section.querySelector('.jp-edt-usage-quota-line')).toBeNull();
    expect(sidebar.user).toBe('root');
    sidebar.dispose();
  });

  it('shows a user their own usage and quota', async () => {
    const sidebar = sidebarFor(ALICE);
    await waitFor(
      () => sidebar.node.querySelectorAll('.jp-edt-usage-row').length === 1
    );
    const section = sidebar.node.querySelector('.jp-edt-usage') as HTMLElement;
    expect(section.querySelector('.jp-edt-section-title')?.textContent).toBe(
      'My GPU usage'
    );
    const row = section.querySelector('.jp-edt-usage-row') as Element;
    expect(cells(row)).toEqual(['alice', '2.00', '1.50', '3']);
    expect(section.querySelector('.jp-edt-usage-total')).toBeNull();
    expect(section.querySelector('.jp-edt-usage-quota-line')?.textContent).toBe(
      'Quota: 2 GPUs at once (yours: 3; group vision: 2)'
    );
    sidebar.dispose();
  });

  it('shows no usage until the user is known', async () => {
    const sidebar = sidebarFor(null);
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(sidebar.node.querySelector('.jp-edt-usage')).toBeNull();
    sidebar.dispose();
  });
});
