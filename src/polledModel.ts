/**
 * The base of the sidebar's polled models (the cluster's devices, the usage):
 * a state kept from the last answer, the signal that says it changed, and the
 * Lumino `Poll` that fetches it (not started until `start()`).
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import type { IDisposable } from '@lumino/disposable';

/**
 * A model whose state a Lumino `Poll` refreshes by calling `_update`.
 *
 * The subclass gives the first state and the poll's options (frequency,
 * name, standby...); `_update` fetches and calls `_setState`, and rethrows a
 * failure so that the poll backs off while the server keeps failing.
 */
export abstract class PolledModel<TState> implements IDisposable {
  constructor(state: TState, options: PolledModel.IPollOptions) {
    this._state = state;
    this._poll = new Poll({
      ...options,
      auto: false,
      factory: () => this._update()
    });
  }

  /** The current state. */
  get state(): TState {
    return this._state;
  }

  /** Emitted with the new state whenever it changes. */
  get stateChanged(): ISignal<this, TState> {
    return this._stateChanged;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Start polling (a no-op when already started). */
  start(): Promise<void> {
    return this._poll.start();
  }

  /** Fetch now, out of turn, and resolve once that fetch has finished. */
  async refresh(): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    try {
      await this._poll.refresh();
      await this._poll.tick;
    } catch (reason) {
      if (!this.isDisposed) {
        throw reason; // a dispose meanwhile ends the wait, not an error
      }
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  /** Fetch once and set the state; reject when the fetch failed. */
  protected abstract _update(): Promise<void>;

  /** Replace the state and say so. */
  protected _setState(state: TState): void {
    this._state = state;
    this._stateChanged.emit(state);
  }

  private readonly _poll: Poll;
  private _state: TState;
  private readonly _stateChanged = new Signal<this, TState>(this);
}

export namespace PolledModel {
  /** The poll's options but its factory (always `_update`) and `auto`. */
  export type IPollOptions = Omit<
    Poll.IOptions<void, unknown, 'standby'>,
    'auto' | 'factory'
  >;
}
