/**
 * What the submit dialog says in words: where the job runs, and what the
 * script says of its own size and whether the dialog's values win. Pure.
 */
import type { IFitArguments, IFitValue, FitField } from './fitargs';
import type { ISubmitForm } from './script';

/** How the script names each value (its keyword in `fit()`). */
const SCRIPT_NAMES: Record<FitField, string> = {
  maxGpus: 'max_gpus',
  epochs: 'epochs'
};

/**
 * One line saying where the job runs, as the values read now:
 * "train.py runs on 1 to 4 GPUs, as the scheduler shares them." A generic
 * line while the values are not whole numbers (the dialog says what is wrong).
 */
export function sizeSummary(
  file: string,
  form: Pick<ISubmitForm, 'minGpus' | 'maxGpus'>
): string {
  const { minGpus: min, maxGpus: max } = form;
  if (
    !Number.isInteger(min) ||
    !Number.isInteger(max) ||
    min < 1 ||
    min > max
  ) {
    return `Run ${file} as a training job.`;
  }
  const gpus =
    min === max ? `${max} GPU${max === 1 ? '' : 's'}` : `${min} to ${max} GPUs`;
  return `${file} runs on ${gpus}, as the scheduler shares them.`;
}

/** "max_gpus=4 and epochs=10 (fit(…), line 12)", grouped by where they were read. */
function describeValues(
  read: [FitField, IFitValue][],
  where: (line: number) => string
): string {
  const groups = new Map<string, string[]>();
  for (const [field, found] of read) {
    const place = `${found.call}(…), ${where(found.line)}`;
    groups.set(place, [
      ...(groups.get(place) ?? []),
      `${SCRIPT_NAMES[field]}=${found.value}`
    ]);
  }
  return [...groups]
    .map(([place, values]) => `${values.join(' and ')} (${place})`)
    .join(', ');
}

/**
 * What the script says of its size, for the dialog: the values it gives in
 * its `fit(…)` call (they are the dialog's defaults), calls that disagree,
 * or that it gives none; and plainly, that the dialog's values win.
 *
 * @param file - the file's name
 * @param fit - what `readFitArguments` read
 * @param where - a line of the program as its author finds it ("line 12", "cell 3")
 */
export function scriptNote(
  file: string,
  fit: IFitArguments,
  where: (line: number) => string
): string {
  const read = (['maxGpus', 'epochs'] as const)
    .filter(field => fit[field] !== null)
    .map(field => [field, fit[field]] as [FitField, IFitValue]);
  const parts: string[] = [];
  if (read.length > 0) {
    const them =
      read.length === 1 ? 'It is the default' : 'They are the defaults';
    parts.push(`${file} gives ${describeValues(read, where)}. ${them} below.`);
  }
  for (const [field, values] of Object.entries(fit.disagree)) {
    const name = SCRIPT_NAMES[field as FitField];
    parts.push(`${file}'s calls disagree on ${name} (${values.join(', ')}).`);
  }
  if (read.length === 0 && Object.keys(fit.disagree).length === 0) {
    parts.push(
      `${file} gives no max_gpus or epochs as plain numbers in a fit(…) call.`
    );
  }
  parts.push(
    "What you submit here wins over the script: Max GPUs caps the GPUs the job gets, and Epochs, when set, replaces fit()'s epochs."
  );
  return parts.join(' ');
}
