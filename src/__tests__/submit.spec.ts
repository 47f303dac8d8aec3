import type { Contents } from '@jupyterlab/services';

import type { IJobInfo, IJobSubmission } from '../api';
import {
  SubmitForm,
  kindChoiceText,
  submitFile,
  type ISubmitUi
} from '../submit/dialog';
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
  const ok = {
    kind: 'elastic',
    minGpus: 1,
    maxGpus: 2,
    priority: 0,
    args: ''
  } as const;

  it('names the bad field in a sentence', () => {
    expect(checkForm(ok)).toBeNull();
    expect(checkForm({ ...ok, maxGpus: 0 })).toMatch(/Max GPUs/);
    expect(checkForm({ ...ok, maxGpus: 1.5 })).toMatch(/Max GPUs/);
    expect(checkForm({ ...ok, maxGpus: 1, priority: 1001 })).toMatch(
      /Priority/
    );
    expect(checkForm({ ...ok, maxGpus: NaN })).toMatch(/Max GPUs/);
    expect(checkForm({ ...ok, minGpus: 0 })).toMatch(/^Min GPUs/);
    expect(checkForm({ ...ok, kind: 'flexible' as never })).toBe(
      'Kind must be one of elastic, restart, rigid.'
    );
  });

  it('refuses more min GPUs than max', () => {
    expect(checkForm({ ...ok, minGpus: 3, maxGpus: 2 })).toBe(
      'Min GPUs (3) must not exceed Max GPUs (2).'
    );
    expect(checkForm({ ...ok, minGpus: 2, maxGpus: 2 })).toBeNull();
  });
});

describe('submission', () => {
  const form = {
    kind: 'restart',
    minGpus: 2,
    maxGpus: 3,
    priority: 5,
    args: '--epochs 2'
  } as const;

  it('sends a Python file as its own entrypoint, with its kind', () => {
    expect(submission('work/train.py', 'print(1)\n', form)).toEqual({
      name: 'train',
      code: 'print(1)\n',
      entrypoint: 'train.py',
      args: ['--epochs', '2'],
      kind: 'restart',
      min_gpus: 2,
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

describe('SubmitForm', () => {
  const set = (form: SubmitForm, selector: string, value: string) => {
    const input = form.node.querySelector(selector) as HTMLInputElement;
    input.value = value;
    input.dispatchEvent(new Event('input', { bubbles: true }));
  };
  const choose = (form: SubmitForm, kind: string) => {
    const radio = form.node.querySelector(
      `input[type="radio"][value="${kind}"]`
    ) as HTMLInputElement;
    radio.checked = true;
    radio.dispatchEvent(new Event('input', { bubbles: true }));
  };

  it('offers the kinds, each labelled and described in one line', () => {
    const form = new SubmitForm('train.py');
    const radios = Array.from(
      form.node.querySelectorAll<HTMLInputElement>(
        'fieldset.jp-edt-submit-kind input[type="radio"]'
      )
    );
    expect(form.node.querySelector('legend')?.textContent).toBe('Kind');
    expect(radios.map(r => r.value)).toEqual(['elastic', 'restart', 'rigid']);
    expect(radios.map(r => r.checked)).toEqual([true, false, false]);
    for (const radio of radios) {
      expect(radio.closest('label')?.textContent?.trim()).toBe(radio.value);
      const help = form.node.querySelector(
        `#${radio.getAttribute('aria-describedby')}`
      );
      expect(help?.textContent).toBe(kindChoiceText(radio.value as never));
    }
    expect(kindChoiceText('elastic')).toBe(
      "A program that trains with the elastic runtime's Trainer; resized in place at a step boundary."
    );
    expect(kindChoiceText('restart')).toBe(
      'A torchrun-compatible program (e.g. Hugging Face, Lightning); resized by a graceful restart from a checkpoint.'
    );
    expect(kindChoiceText('rigid')).toBe(
      'A torchrun-compatible program; runs at a fixed size.'
    );
    // Two forms do not share radio names or ids.
    const other = new SubmitForm('train.py').node.querySelector(
      'input[type="radio"]'
    ) as HTMLInputElement;
    expect(other.name).not.toBe(radios[0].name);
    expect(other.getAttribute('aria-describedby')).not.toBe(
      radios[0].getAttribute('aria-describedby')
    );
  });

  it('reads the kind and min GPUs, and says at once when min exceeds max', () => {
    const form = new SubmitForm('train.py', { maxGpus: 4 });
    const problem = form.node.querySelector(
      '.jp-edt-submit-problem'
    ) as HTMLElement;
    const min = form.node.querySelector(
      '.jp-edt-submit-min-gpus'
    ) as HTMLInputElement;
    expect(problem.hidden).toBe(true);
    expect(min.value).toBe('1');
    expect(min.min).toBe('1');
    expect(min.max).toBe('4');
    expect(min.closest('label')?.textContent).toBe('Min GPUs');

    choose(form, 'restart');
    set(form, '.jp-edt-submit-min-gpus', '2');
    expect(form.getValue()).toEqual({
      kind: 'restart',
      minGpus: 2,
      maxGpus: 4,
      priority: 0,
      args: ''
    });

    set(form, '.jp-edt-submit-max-gpus', '1');
    expect(min.max).toBe('1');
    expect(problem.hidden).toBe(false);
    expect(problem.textContent).toBe(
      'Min GPUs (2) must not exceed Max GPUs (1).'
    );
    expect(problem.getAttribute('aria-live')).toBe('polite');
  });

  it('comes back with the values it was given', () => {
    const form = new SubmitForm('train.py', {
      kind: 'rigid',
      minGpus: 3,
      maxGpus: 3,
      priority: 7,
      args: '--x'
    });
    expect(form.getValue()).toEqual({
      kind: 'rigid',
      minGpus: 3,
      maxGpus: 3,
      priority: 7,
      args: '--x'
    });
  });
});

describe('submitFile', () => {
  const contents = {
    get: async () => ({ content: 'print(1)\n' })
  } as unknown as Contents.IManager;

  function fakeUi(answers: ((defaults: unknown) => unknown)[]) {
    const asked: unknown[] = [];
    const alerts: string[][] = [];
    const ui: ISubmitUi = {
      ask: async (_path, defaults) => {
        asked.push(defaults);
        const answer = answers.shift();
        return (answer ? answer(defaults) : null) as never;
      },
      alert: async (title, message) => {
        alerts.push([title, message]);
      }
    };
    return { ui, asked, alerts };
  }

  function recorder() {
    const sent: IJobSubmission[] = [];
    const submit = async (spec: IJobSubmission) => {
      sent.push(spec);
      return { id: 'j1', name: spec.name } as IJobInfo;
    };
    return { sent, submit };
  }

  it('sends the kind and min GPUs chosen in the dialog', async () => {
    const { ui, alerts } = fakeUi([
      () => {
        const form = new SubmitForm('work/train.py');
        (
          form.node.querySelector(
            'input[type="radio"][value="restart"]'
          ) as HTMLInputElement
        ).checked = true;
        (
          form.node.querySelector('.jp-edt-submit-min-gpus') as HTMLInputElement
        ).value = '2';
        (
          form.node.querySelector('.jp-edt-submit-max-gpus') as HTMLInputElement
        ).value = '4';
        return form.getValue();
      }
    ]);
    const { sent, submit } = recorder();
    const job = await submitFile('work/train.py', contents, submit, ui);
    expect(job?.id).toBe('j1');
    expect(alerts).toEqual([]);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      name: 'train',
      kind: 'restart',
      min_gpus: 2,
      max_gpus: 4
    });
  });

  it('submits nothing when min exceeds max, says why and asks again', async () => {
    const bad = {
      kind: 'restart',
      minGpus: 3,
      maxGpus: 2,
      priority: 0,
      args: ''
    };
    const { ui, asked, alerts } = fakeUi([() => bad]);
    const { sent, submit } = recorder();
    const job = await submitFile('work/train.py', contents, submit, ui);
    expect(job).toBeNull(); // the user gave up the second time
    expect(sent).toEqual([]);
    expect(alerts).toEqual([
      ['Cannot submit the job', 'Min GPUs (3) must not exceed Max GPUs (2).']
    ]);
    expect(asked).toEqual([{}, bad]); // the dialog came back with its values
  });
});
