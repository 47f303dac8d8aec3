import {
  blankStringsAndComments,
  readFitArguments,
  wholeLiteral
} from '../submit/fitargs';
import { scriptNote, sizeSummary } from '../submit/wording';

describe('readFitArguments', () => {
  it("reads fit()'s max_gpus and epochs given by keyword, with the call's line", () => {
    const code = [
      'import torch',
      'trainer = Trainer(model, data, loss, opt)',
      'history = trainer.fit(',
      '    epochs=10,',
      '    effective_batch_size=64,',
      '    max_gpus = 4,',
      ')'
    ].join('\n');
    expect(readFitArguments(code)).toEqual({
      maxGpus: { value: 4, call: 'fit', line: 3 },
      epochs: { value: 10, call: 'fit', line: 3 },
      disagree: {}
    });
  });

  it("reads the runtime's positional fit(epochs, effective_batch_size, max_gpus)", () => {
    const fit = readFitArguments('trainer.fit(1, 64, 2, checkpoint_every=0)');
    expect(fit.epochs?.value).toBe(1);
    expect(fit.maxGpus?.value).toBe(2);
    // A keyword wins over a position of the same call.
    expect(readFitArguments('t.fit(3, 64, max_gpus=8)').maxGpus?.value).toBe(8);
  });

  it("leaves another library's fit alone: its first argument is not a number", () => {
    expect(readFitArguments('model.fit(x, y, 32, 10)')).toEqual({
      maxGpus: null,
      epochs: null,
      disagree: {}
    });
  });

  it('takes only whole numbers written as they are', () => {
    const fit = readFitArguments(
      'trainer.fit(epochs=n_epochs, max_gpus=int(os.environ["G"]))'
    );
    expect(fit.maxGpus).toBeNull();
    expect(fit.epochs).toBeNull();
    expect(readFitArguments('fit(epochs=1_000)').epochs?.value).toBe(1000);
    expect(readFitArguments('fit(epochs=2.5)').epochs).toBeNull();
    expect(readFitArguments('fit(epochs=-1)').epochs).toBeNull();
    // `==` is a comparison, not a keyword
    expect(readFitArguments('fit(epochs == 3)').epochs).toBeNull();
  });

  it('reads Trainer() keywords and a WMLA FabricModel.train()', () => {
    expect(
      readFitArguments('Trainer(model, max_gpus=3, epochs=7)')
    ).toMatchObject({
      maxGpus: { value: 3, call: 'Trainer', line: 1 },
      epochs: { value: 7, call: 'Trainer', line: 1 }
    });
    expect(
      readFitArguments(
        'edt.train(epoch_number=5, batch_size=64, engines_number=2)'
      )
    ).toMatchObject({
      maxGpus: { value: 2, call: 'train' },
      epochs: { value: 5, call: 'train' }
    });
    // model.train() switches a torch module to training: nothing to read
    expect(readFitArguments('model.train()\nmodel.train(True)').maxGpus).toBe(
      null
    );
  });

  it('skips comments, strings, definitions, and names that only end in fit', () => {
    const code = [
      '# trainer.fit(epochs=99, max_gpus=99)',
      's = "trainer.fit(epochs=98)"',
      'doc = """',
      'fit(max_gpus=97)',
      '"""',
      'def fit(epochs=96): pass',
      'refit(max_gpus=95)',
      "trainer.fit(epochs=3, tag='a, b)', max_gpus=2)"
    ].join('\n');
    expect(readFitArguments(code)).toEqual({
      maxGpus: { value: 2, call: 'fit', line: 8 },
      epochs: { value: 3, call: 'fit', line: 8 },
      disagree: {}
    });
  });

  it('keeps nested brackets in one argument', () => {
    const fit = readFitArguments(
      'trainer.fit(epochs=len([1, 2]), callbacks=[A(1), B(max_gpus=9)], max_gpus=4)'
    );
    expect(fit.maxGpus?.value).toBe(4);
    expect(fit.epochs).toBeNull();
  });

  it('reports calls that disagree instead of choosing one', () => {
    const code = 'a.fit(1, 64, 2)\nb.fit(1, 64, 4)\nc.fit(epochs=1)';
    expect(readFitArguments(code)).toEqual({
      maxGpus: null,
      epochs: { value: 1, call: 'fit', line: 1 },
      disagree: { maxGpus: [2, 4] }
    });
  });

  it('reads nothing from an unclosed call or an empty script', () => {
    expect(readFitArguments('trainer.fit(epochs=3').epochs).toBeNull();
    expect(readFitArguments('')).toEqual({
      maxGpus: null,
      epochs: null,
      disagree: {}
    });
  });
});

describe('blankStringsAndComments', () => {
  it('keeps offsets and line breaks, blanks what is not code', () => {
    const code = 'x = \'a#b\'  # c\ny = """1\n2"""\nz = r\'\\\'\'';
    const blanked = blankStringsAndComments(code);
    expect(blanked).toHaveLength(code.length);
    expect(blanked.split('\n')).toEqual([
      "x = '   '     ",
      'y = """ ',
      ' """',
      "z = r'  '"
    ]);
  });
});

describe('wholeLiteral', () => {
  it('reads decimal whole numbers only', () => {
    expect(wholeLiteral(' 4 ')).toBe(4);
    expect(wholeLiteral('0')).toBe(0);
    expect(wholeLiteral('1_024')).toBe(1024);
    expect(wholeLiteral('04')).toBeNull();
    expect(wholeLiteral('0x10')).toBeNull();
    expect(wholeLiteral('4.0')).toBeNull();
    expect(wholeLiteral('n')).toBeNull();
  });
});

describe('scriptNote', () => {
  const where = (line: number) => `line ${line}`;
  const WINS =
    "What you submit here wins over the script: Max GPUs caps the GPUs the job gets, and Epochs, when set, replaces fit()'s epochs.";

  it('says what the script gives, where, and that the dialog wins', () => {
    const fit = readFitArguments('x\ntrainer.fit(epochs=10, max_gpus=4)');
    expect(scriptNote('train.py', fit, where)).toBe(
      `train.py gives max_gpus=4 and epochs=10 (fit(…), line 2). They are the defaults below. ${WINS}`
    );
  });

  it('names each place when the values come from different calls', () => {
    const fit = readFitArguments('Trainer(m, max_gpus=2)\nt.fit(epochs=5)');
    expect(scriptNote('t.py', fit, where)).toBe(
      `t.py gives max_gpus=2 (Trainer(…), line 1), epochs=5 (fit(…), line 2). They are the defaults below. ${WINS}`
    );
    const one = readFitArguments('t.fit(epochs=5)');
    expect(scriptNote('t.py', one, where)).toBe(
      `t.py gives epochs=5 (fit(…), line 1). It is the default below. ${WINS}`
    );
  });

  it('says when the script gives nothing, or its calls disagree', () => {
    expect(scriptNote('t.py', readFitArguments('t.fit(e, b, g)'), where)).toBe(
      `t.py gives no max_gpus or epochs as plain numbers in a fit(…) call. ${WINS}`
    );
    const fit = readFitArguments('a.fit(max_gpus=2)\nb.fit(max_gpus=4)');
    expect(scriptNote('t.py', fit, where)).toBe(
      `t.py's calls disagree on max_gpus (2, 4). ${WINS}`
    );
  });
});

describe('sizeSummary', () => {
  it('says on how many GPUs the job runs, in words', () => {
    expect(sizeSummary('t.py', { minGpus: 1, maxGpus: 4 })).toBe(
      't.py runs on 1 to 4 GPUs, as the scheduler shares them.'
    );
    expect(sizeSummary('t.py', { minGpus: 1, maxGpus: 1 })).toBe(
      't.py runs on 1 GPU, as the scheduler shares them.'
    );
    expect(sizeSummary('t.py', { minGpus: 3, maxGpus: 2 })).toBe(
      'Run t.py as a training job.'
    );
    expect(sizeSummary('t.py', { minGpus: 1, maxGpus: NaN })).toBe(
      'Run t.py as a training job.'
    );
  });
});
