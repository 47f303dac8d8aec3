import {
  checkForm,
  isIPythonLine,
  isSubmittable,
  notebookToScript,
  splitArgs,
  submission
} from '../submit/script';

const NOTEBOOK = {
  cells: [
    { cell_type: 'markdown', source: '# Title' },
    {
      cell_type: 'code',
      source: ['%load_ext jupyter_edt\n', 'import torch\n']
    },
    { cell_type: 'code', source: '!pip list\nx = 1\nprint(x)\n  %time y = 2' },
    { cell_type: 'raw', source: 'not code' }
  ]
};

describe('notebookToScript', () => {
  it('joins the code cells and comments IPython-only lines', () => {
    expect(notebookToScript(NOTEBOOK)).toBe(
      [
        '# %% cell 1',
        '# (IPython) %load_ext jupyter_edt',
        'import torch',
        '',
        '# %% cell 2',
        '# (IPython) !pip list',
        'x = 1',
        'print(x)',
        '# (IPython)   %time y = 2',
        ''
      ].join('\n')
    );
  });

  it('tells IPython lines from Python', () => {
    expect(isIPythonLine('%%edt_submit --max-gpus 2')).toBe(true);
    expect(isIPythonLine('model?')).toBe(true);
    expect(isIPythonLine('x = a % b')).toBe(false);
    expect(isIPythonLine('print("!")')).toBe(false);
  });

  it('handles an empty notebook', () => {
    expect(notebookToScript({})).toBe('');
  });
});

describe('splitArgs', () => {
  it('splits like a shell, keeping quoted words together', () => {
    expect(splitArgs(`--lr 0.1  --name "my run" --tag 'a b' x\\"y`)).toEqual([
      '--lr',
      '0.1',
      '--name',
      'my run',
      '--tag',
      'a b',
      'x\\"y'
    ]);
    expect(splitArgs('   ')).toEqual([]);
  });
});

describe('checkForm', () => {
  it('names the bad field in a sentence', () => {
    expect(checkForm({ maxGpus: 2, priority: 0, args: '' })).toBeNull();
    expect(checkForm({ maxGpus: 0, priority: 0, args: '' })).toMatch(
      /Max GPUs/
    );
    expect(checkForm({ maxGpus: 1.5, priority: 0, args: '' })).toMatch(
      /Max GPUs/
    );
    expect(checkForm({ maxGpus: 1, priority: 1001, args: '' })).toMatch(
      /Priority/
    );
    expect(checkForm({ maxGpus: NaN, priority: 0, args: '' })).toMatch(
      /Max GPUs/
    );
  });
});

describe('submission', () => {
  const form = { maxGpus: 3, priority: 5, args: '--epochs 2' };

  it('sends a Python file as its own entrypoint', () => {
    expect(submission('work/train.py', 'print(1)\n', form)).toEqual({
      name: 'train',
      code: 'print(1)\n',
      entrypoint: 'train.py',
      args: ['--epochs', '2'],
      max_gpus: 3,
      priority: 5
    });
  });

  it('sends a notebook (object or JSON text) as main.py', () => {
    const fromObject = submission('nb/Digits.ipynb', NOTEBOOK, form);
    const fromText = submission(
      'nb/Digits.ipynb',
      JSON.stringify(NOTEBOOK),
      form
    );
    expect(fromObject).toEqual(fromText);
    expect(fromObject.name).toBe('Digits');
    expect(fromObject.entrypoint).toBe('main.py');
    expect(fromObject.code).toContain('import torch');
  });

  it('offers only Python files and notebooks', () => {
    expect(isSubmittable('a/b.py')).toBe(true);
    expect(isSubmittable('b.ipynb')).toBe(true);
    expect(isSubmittable('b.txt')).toBe(false);
    expect(isSubmittable('py')).toBe(false);
  });
});
