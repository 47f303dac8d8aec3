/**
 * What a training script says of its own size: `max_gpus` and `epochs` as it
 * passes them to the runtime's `fit(...)` (or `Trainer(...)`, or a WMLA
 * `FabricModel`'s `train(...)`), so that the submit dialog starts from the
 * script's values instead of its own. Only whole numbers written as they are
 * count (`max_gpus=4`, not `max_gpus=n`). Pure: a small scanner of Python
 * source, not a parser; strings and comments are skipped.
 */

/** The values read: `max_gpus` and `epochs`. */
export type FitField = 'maxGpus' | 'epochs';

/** One value read from the script, and where. */
export interface IFitValue {
  value: number;
  /** The call it was given to, e.g. "fit". */
  call: string;
  /** 1-based line of that call. */
  line: number;
}

/** What the script says; a value is null when it says none, or calls disagree. */
export interface IFitArguments {
  maxGpus: IFitValue | null;
  epochs: IFitValue | null;
  /** Values that calls disagree on, e.g. { maxGpus: [2, 4] } (then null above). */
  disagree: Partial<Record<FitField, number[]>>;
}

/** How a call takes each value: by keyword, and by position. */
interface ICallSignature {
  keywords: Record<FitField, string>;
  /**
   * Positions in the runtime's own signature. Read only when the first
   * argument is a whole number itself: `trainer.fit(3, 64, 4)` is the
   * runtime's (epochs, effective_batch_size, max_gpus); `model.fit(x, y, 32)`
   * is another library's.
   */
  positions?: Record<FitField, number>;
}

/** The calls read (by the name called), and how each takes the values. */
export const FIT_CALLS: Readonly<Record<string, ICallSignature>> = {
  fit: {
    keywords: { maxGpus: 'max_gpus', epochs: 'epochs' },
    positions: { epochs: 0, maxGpus: 2 }
  },
  Trainer: { keywords: { maxGpus: 'max_gpus', epochs: 'epochs' } },
  // WMLA's FabricModel.train(epoch_number, batch_size, engines_number)
  train: { keywords: { maxGpus: 'engines_number', epochs: 'epoch_number' } }
};

const FIELDS: readonly FitField[] = ['maxGpus', 'epochs'];

/**
 * The source with every string's contents and every comment blanked (spaces;
 * line breaks kept), so that what is left is code at the same offsets.
 */
export function blankStringsAndComments(source: string): string {
  const out = source.split('');
  let i = 0;
  const blank = (from: number, to: number) => {
    for (let k = from; k < to; k++) {
      if (out[k] !== '\n') {
        out[k] = ' ';
      }
    }
  };
  while (i < source.length) {
    const c = source[i];
    if (c === '#') {
      const end = source.indexOf('\n', i);
      const stop = end < 0 ? source.length : end;
      blank(i, stop);
      i = stop;
    } else if (c === '"' || c === "'") {
      const quote = source.startsWith(c.repeat(3), i) ? c.repeat(3) : c;
      let k = i + quote.length;
      while (k < source.length && !source.startsWith(quote, k)) {
        if (quote.length === 1 && source[k] === '\n') {
          break; // an unterminated one-line string ends with its line
        }
        k += source[k] === '\\' ? 2 : 1;
      }
      const end = Math.min(source.length, k + quote.length);
      blank(i + quote.length, Math.min(k, source.length));
      i = end;
    } else {
      i += 1;
    }
  }
  return out.join('');
}

const OPEN = '([{';
const CLOSE = ')]}';

/** The arguments of the call whose '(' is at `open`, split at its top-level commas. */
function callArguments(code: string, open: number): string[] | null {
  const args: string[] = [];
  let depth = 0;
  let start = open + 1;
  for (let i = open; i < code.length; i++) {
    const c = code[i];
    if (OPEN.includes(c)) {
      depth += 1;
    } else if (CLOSE.includes(c)) {
      depth -= 1;
      if (depth === 0) {
        args.push(code.slice(start, i));
        return args.map(a => a.trim()).filter(a => a.length > 0);
      }
    } else if (c === ',' && depth === 1) {
      args.push(code.slice(start, i));
      start = i + 1;
    }
  }
  return null; // never closed
}

/** A whole number written as it is (`4`, `1_000`), or null. */
export function wholeLiteral(text: string): number | null {
  const t = text.trim();
  if (!/^(?:0|[1-9](?:_?\d)*)$/.test(t)) {
    return null;
  }
  return Number(t.replace(/_/g, ''));
}

/** The values one call gives, by field. */
function callValues(
  signature: ICallSignature,
  args: string[]
): Partial<Record<FitField, number>> {
  const out: Partial<Record<FitField, number>> = {};
  const positional: string[] = [];
  let starred = false;
  for (const arg of args) {
    const keyword = /^([A-Za-z_]\w*)\s*=(?!=)([\s\S]*)$/.exec(arg);
    if (keyword) {
      for (const field of FIELDS) {
        if (signature.keywords[field] === keyword[1]) {
          const value = wholeLiteral(keyword[2]);
          if (value !== null) {
            out[field] = value;
          }
        }
      }
    } else if (arg.startsWith('*')) {
      starred = true; // positions after *args are unknown
    } else if (!starred) {
      positional.push(arg);
    }
  }
  const positions = signature.positions;
  if (
    positions &&
    positional.length > 0 &&
    wholeLiteral(positional[0]) !== null
  ) {
    for (const field of FIELDS) {
      const at = positions[field];
      const value =
        at < positional.length ? wholeLiteral(positional[at]) : null;
      if (value !== null && out[field] === undefined) {
        out[field] = value;
      }
    }
  }
  return out;
}

/**
 * `max_gpus` and `epochs` as the script's calls give them. When several calls
 * give one, and they agree, it is the first; when they disagree, it is null
 * and `disagree` lists the values.
 */
export function readFitArguments(source: string): IFitArguments {
  const code = blankStringsAndComments(source);
  const names = Object.keys(FIT_CALLS).join('|');
  const pattern = new RegExp(`\\b(${names})\\s*\\(`, 'g');
  const found: Record<FitField, IFitValue[]> = { maxGpus: [], epochs: [] };
  let match: RegExpExecArray | null;
  while ((match = pattern.exec(code)) !== null) {
    const before = code.slice(Math.max(0, match.index - 10), match.index);
    if (/\b(def|class)\s+$/.test(before)) {
      continue; // its definition, not a call
    }
    const call = match[1];
    const args = callArguments(code, match.index + match[0].length - 1);
    if (args === null) {
      continue;
    }
    const line = code.slice(0, match.index).split('\n').length;
    const values = callValues(FIT_CALLS[call], args);
    for (const field of FIELDS) {
      const value = values[field];
      if (value !== undefined) {
        found[field].push({ value, call, line });
      }
    }
  }
  const result: IFitArguments = { maxGpus: null, epochs: null, disagree: {} };
  for (const field of FIELDS) {
    const values = [...new Set(found[field].map(f => f.value))];
    if (values.length === 1) {
      result[field] = found[field][0];
    } else if (values.length > 1) {
      result.disagree[field] = values;
    }
  }
  return result;
}
