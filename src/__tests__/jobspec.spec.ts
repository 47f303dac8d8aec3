import type { IJobInfo } from '../api';
import { plainCodeViewer } from '../jobview/codeviewer';
import { specCode, specRows } from '../jobview/spec';

const JOB: IJobInfo = {
  id: 'a1',
  user: 'alice',
  name: 'digits',
  state: 'RUNNING',
  reason: '',
  spec: {
    name: 'digits',
    code: 'print(1)\n',
    entrypoint: 'main.py',
    args: ['--tag', "it's", '--lr=0.1'],
    env: { EDT_EPOCHS: '3', SEED: '1' },
    min_gpus: 1,
    max_gpus: 2,
    priority: 0,
    kind: 'elastic',
    surface: 'job',
    annotations: {}
  },
  min_gpus: 1,
  max_gpus: 4,
  priority: 5,
  devices: [],
  elastic: true,
  restarts: 0,
  rescaled: null,
  created: 1,
  updated: 1,
  finished: null
};

describe('specRows', () => {
  it('lists what was submitted, GPUs and priority as they are now', () => {
    expect(specRows(JOB)).toEqual([
      { label: 'Name', value: 'digits' },
      { label: 'User', value: 'alice' },
      { label: 'Kind', value: 'elastic' },
      { label: 'Entrypoint', value: 'main.py', code: true },
      {
        label: 'Arguments',
        value: `--tag 'it'"'"'s' --lr=0.1`,
        code: true
      },
      { label: 'GPUs', value: '1 to 4' },
      { label: 'Priority', value: '5' },
      { label: 'Environment', value: 'EDT_EPOCHS=3\nSEED=1', code: true }
    ]);
  });

  it('names the surface of an add-on, and keeps fields it does not know', () => {
    const rows = specRows({
      ...JOB,
      min_gpus: 2,
      max_gpus: 2,
      spec: { surface: 'wmla-exec', script: '/data/train.py', future: [1] }
    });
    expect(rows).toContainEqual({ label: 'GPUs', value: '2' });
    expect(rows).toContainEqual({
      label: 'Script',
      value: '/data/train.py',
      code: true
    });
    expect(rows).toContainEqual({
      label: 'Submitted through',
      value: 'wmla-exec'
    });
    expect(rows).toContainEqual({ label: 'future', value: '[1]', code: true });
    expect(rows).toContainEqual({
      label: 'Arguments',
      value: '(none)',
      code: false
    });
  });
});

describe('specCode', () => {
  it('gives the inline code and the file it runs as', () => {
    expect(specCode(JOB)).toEqual({ code: 'print(1)\n', path: 'main.py' });
    expect(specCode({ ...JOB, spec: { script: 'x.py' } })).toBeNull();
  });

  it('shows code as plain text without an editor', () => {
    const host = document.createElement('div');
    const view = plainCodeViewer(host, 'x = 1\n', 'main.py');
    expect(host.textContent).toBe('x = 1\n');
    view.dispose();
    expect(host.textContent).toBe('');
  });
});
