/**
 * The loss axis' scale (linear or log) that every loss chart shares: the job
 * widget's, the job tab's and the `LossChart` widget's. A chart's toggle sets
 * it and every open loss chart follows; settings.ts keeps it in the
 * extension's settings (`lossScale`), so it is remembered across reloads and
 * can be set in the Settings Editor.
 */
import { type ISignal, Signal } from '@lumino/signaling';

import type { ScaleKind } from './scale';

/** A scale that charts share and follow. */
export class ScalePreference {
  constructor(initial: ScaleKind = 'linear') {
    this._value = initial;
  }

  /** The scale now. */
  get value(): ScaleKind {
    return this._value;
  }

  /** Change the scale; `changed` tells the charts (and the settings) when it differs. */
  set value(value: ScaleKind) {
    if (value === this._value) {
      return;
    }
    this._value = value;
    this._changed.emit(value);
  }

  /** Emitted with the new scale after each change. */
  get changed(): ISignal<this, ScaleKind> {
    return this._changed;
  }

  private _value: ScaleKind;
  private readonly _changed = new Signal<this, ScaleKind>(this);
}

/** The loss axis' scale shared by every loss chart of the page. */
export const lossScale = new ScalePreference();
