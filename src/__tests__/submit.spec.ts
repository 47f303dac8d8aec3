import type { Contents } from '@jupyterlab/services';

import type { IJobInfo, IJobSubmission } from '../api';
import {
  SubmitForm,
  kindChoiceText,
  submitFile,
  type ISubmitUi
} from '../submit/dialog';
import { readFitArguments } from '../submit/fitargs';
import {
  checkForm,
  isIPythonLine,
  isSubmittable,
  notebookToScript,
  programOf,
  splitArgs,
  submission,
  whereInProgram
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
    name: '',
    kind: 'elastic',
    minGpus: 1,
    maxGpus: 2,
    epochs: null,
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

  it('takes no epochs (as the script says) or a whole number of them', () => {
    expect(checkForm({ ...ok, epochs: 3 })).toBeNull();
    expect(checkForm({ ...ok, epochs: 0 })).toMatch(/^Epochs/);
    expect(checkForm({ ...ok, epochs: 2.5 })).toMatch(/^Epochs/);
    expect(checkForm({ ...ok, name: 'x'.repeat(201) })).toBe(
      'Name must be at most 200 characters.'
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
    name: '',
    kind: 'restart',
    minGpus: 2,
    maxGpus: 3,
    epochs: null,
    priority: 5,
    args: '--lr 0.1'
  } as const;

  it('sends a Python file as its own entrypoint, with its kind', () => {
    const program = programOf('work/train.py', 'print(1)\n');
    expect(submission(program, form)).toEqual({
      name: 'train',
      code: 'print(1)\n',
      entrypoint: 'train.py',
      args: ['--lr', '0.1'],
      kind: 'restart',
      min_gpus: 2,
      max_gpus: 3,
      priority: 5
    });
    expect(submission(program, { ...form, name: ' run 1 ' }).name).toBe(
      'run 1'
    );
  });

  it("sends epochs as EDT_EPOCHS only when they differ from the script's", () => {
    const program = programOf('train.py', 'trainer.fit(epochs=10)\n');
    const fit = readFitArguments(program.code);
    expect(submission(program, { ...form, epochs: 10 }, fit).env).toBe(
      undefined
    );
    expect(submission(program, { ...form, epochs: 3 }, fit).env).toEqual({
      EDT_EPOCHS: '3'
    });
    expect(submission(program, { ...form, epochs: 3 }).env).toEqual({
      EDT_EPOCHS: '3'
    });
  });

  it('sends a notebook (object or JSON text) as main.py', () => {
    const fromObject = submission(programOf('nb/Digits.ipynb', NOTEBOOK), form);
    const fromText = submission(
      programOf('nb/Digits.ipynb', JSON.stringify(NOTEBOOK)),
      form
    );
    expect(fromObject).toEqual(fromText);
    expect(fromObject.name).toBe('Digits');
    expect(fromObject.entrypoint).toBe('main.py');
    expect(fromObject.code).toContain('import torch');
  });

  it("names a line as its author finds it: a file's line, a notebook's cell", () => {
    expect(whereInProgram(programOf('t.py', 'a\nb\n'), 2)).toBe('line 2');
    const notebook = programOf('nb/Digits.ipynb', NOTEBOOK);
    expect(whereInProgram(notebook, 3)).toBe('cell 1');
    expect(whereInProgram(notebook, 7)).toBe('cell 2');
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
      name: '',
      kind: 'restart',
      minGpus: 2,
      maxGpus: 4,
      epochs: null,
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
    const values = {
      name: 'run 2',
      kind: 'rigid',
      minGpus: 3,
      maxGpus: 3,
      epochs: 12,
      priority: 7,
      args: '--x'
    } as const;
    expect(new SubmitForm('train.py', values).getValue()).toEqual(values);
  });

  it('says where the job runs as the user types, and what the script says', () => {
    const form = new SubmitForm(
      'work/train.py',
      { maxGpus: 4 },
      'train.py gives max_gpus=4 (fit(…), line 3).'
    );
    const summary = form.node.querySelector('.jp-edt-submit-intro');
    expect(summary?.textContent).toBe(
      'train.py runs on 1 to 4 GPUs, as the scheduler shares them.'
    );
    expect(form.node.querySelector('.jp-edt-submit-script')?.textContent).toBe(
      'train.py gives max_gpus=4 (fit(…), line 3).'
    );
    set(form, '.jp-edt-submit-min-gpus', '4');
    expect(summary?.textContent).toBe(
      'train.py runs on 4 GPUs, as the scheduler shares them.'
    );
    const name = form.node.querySelector(
      '.jp-edt-submit-name'
    ) as HTMLInputElement;
    expect(name.placeholder).toBe('train');
    const epochs = form.node.querySelector(
      '.jp-edt-submit-epochs'
    ) as HTMLInputElement;
    expect(epochs.value).toBe('');
    expect(epochs.placeholder).toBe('as the script says');
  });
});

describe('submitFile', () => {
  const SCRIPT = [
    'trainer = Trainer(model, data, loss, opt)',
    '# trainer.fit(epochs=1, max_gpus=8)',
    'trainer.fit(epochs=10, effective_batch_size=64, max_gpus=4)',
    ''
  ].join('\n');
  const contents = {
    get: async () => ({ content: SCRIPT })
  } as unknown as Contents.IManager;

  function fakeUi(answers: ((defaults: unknown) => unknown)[]) {
    const asked: unknown[] = [];
    const notes: (string | null)[] = [];
    const alerts: string[][] = [];
    const ui: ISubmitUi = {
      ask: async (_path, defaults, note) => {
        asked.push(defaults);
        notes.push(note);
        const answer = answers.shift();
        return (answer ? answer(defaults) : null) as never;
      },
      alert: async (title, message) => {
        alerts.push([title, message]);
      }
    };
    return { ui, asked, notes, alerts };
  }

  function recorder() {
    const sent: IJobSubmission[] = [];
    const submit = async (spec: IJobSubmission) => {
      sent.push(spec);
      return { id: 'j1', name: spec.name } as IJobInfo;
    };
    return { sent, submit };
  }

  it("starts from the script's max_gpus and epochs, and says the dialog wins", async () => {
    const { ui, asked, notes } = fakeUi([]);
    const { submit } = recorder();
    expect(await submitFile('work/train.py', contents, submit, ui)).toBeNull();
    expect(asked).toEqual([{ name: 'train', maxGpus: 4, epochs: 10 }]);
    expect(notes).toEqual([
      'train.py gives max_gpus=4 and epochs=10 (fit(…), line 3). They are the defaults below. ' +
        "What you submit here wins over the script: Max GPUs caps the GPUs the job gets, and Epochs, when set, replaces fit()'s epochs."
    ]);
  });

  it('says when the file cannot be read, and asks nothing', async () => {
    const { ui, asked, alerts } = fakeUi([]);
    const broken = {
      get: async () => {
        throw new Error('No such file');
      }
    } as unknown as Contents.IManager;
    const { sent, submit } = recorder();
    expect(await submitFile('gone.py', broken, submit, ui)).toBeNull();
    expect(asked).toEqual([]);
    expect(sent).toEqual([]);
    expect(alerts).toEqual([['The file could not be read', 'No such file']]);
  });

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
    expect(sent[0].env).toBeUndefined(); // no epochs typed: the script's
  });

  it('submits nothing when min exceeds max, says why and asks again', async () => {
    const bad = {
      name: '',
      kind: 'restart',
      minGpus: 3,
      maxGpus: 2,
      epochs: null,
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
    // the dialog came back with its values
    expect(asked).toEqual([{ name: 'train', maxGpus: 4, epochs: 10 }, bad]);
  });
});
