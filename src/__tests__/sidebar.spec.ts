import { Widget } from '@lumino/widgets';

import type { ClusterInfo } from '../api';
import { ClusterModel, EdtSidebar } from '../sidebar';

const CLUSTER: ClusterInfo = {
  source: 'virtual',
  devices: [0, 1].map(index => ({
    id: `gpu${index}`,
    index,
    uuid: `virtual-${index}`,
    name: `Virtual GPU ${index}`,
    memory_total: null,
    memory_used: null,
    utilization: null,
    virtual: true,
    held: index === 0,
    job_id: index === 0 ? 'a1b2c3d4e5f6' : null
  }))
};

/** Wait until `condition` holds, or fail after `timeout` ms. */
async function waitFor(condition: () => boolean, timeout = 3000) {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeout) {
      throw new Error('condition not met in time');
    }
    await new Promise(resolve => setTimeout(resolve, 10));
  }
}

describe('ClusterModel', () => {
  it('keeps the devices and reports a later failure', async () => {
    let fail = false;
    const model = new ClusterModel({
      fetchCluster: async () => {
        if (fail) {
          throw new Error('server went away');
        }
        return CLUSTER;
      },
      standby: 'never'
    });
    expect(model.state.loading).toBe(true);

    await model.refresh();
    expect(model.state).toEqual({
      cluster: CLUSTER,
      error: null,
      loading: false
    });

    fail = true;
    await model.refresh();
    expect(model.state.error).toBe('server went away');
    expect(model.state.cluster).toEqual(CLUSTER);

    model.dispose();
    expect(model.isDisposed).toBe(true);
  });
});

describe('EdtSidebar', () => {
  let sidebar: EdtSidebar;
  let calls: number;

  beforeEach(() => {
    calls = 0;
    sidebar = new EdtSidebar({
      fetchCluster: async () => {
        calls += 1;
        return CLUSTER;
      },
      interval: 20
    });
  });

  afterEach(() => {
    sidebar.dispose();
  });

  it('has the id, class and caption the shell and the UI tests use', () => {
    expect(sidebar.id).toBe('jupyter-edt-sidebar');
    expect(sidebar.hasClass('jp-edt-sidebar')).toBe(true);
    expect(sidebar.title.caption).toBe('Elastic Training');
  });

  it('lists the devices once shown', async () => {
    Widget.attach(sidebar, document.body);
    await waitFor(
      () => sidebar.node.querySelectorAll('.jp-edt-device').length === 2
    );

    const rows = sidebar.node.querySelectorAll('.jp-edt-device');
    expect(rows[0].getAttribute('data-device-id')).toBe('gpu0');
    expect(rows[1].querySelector('.jp-edt-virtual-badge')).not.toBeNull();
    expect(rows[0].querySelector('.jp-edt-device-holder')?.textContent).toBe(
      'training job a1b2c3d4e5f6'
    );
    expect(rows[1].querySelector('.jp-edt-device-holder')?.textContent).toBe(
      'free'
    );
    expect(sidebar.node.querySelector('.jp-edt-source')?.textContent).toBe(
      '2 virtual GPUs (no NVIDIA GPU found)'
    );
    expect(sidebar.node.querySelector('.jp-edt-device-list')).not.toBeNull();
  });

  it('does not poll while hidden', async () => {
    sidebar.hide();
    Widget.attach(sidebar, document.body);
    await new Promise(resolve => setTimeout(resolve, 150));
    expect(calls).toBe(0);

    sidebar.show();
    await waitFor(() => calls > 0);
  });
});
