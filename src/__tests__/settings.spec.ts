import type { ISettingRegistry } from '@jupyterlab/settingregistry';
import { Signal } from '@lumino/signaling';

import { ScalePreference } from '../charts/preference';
import { PLUGIN_ID, keepLossScale, watchSettings } from '../settings';

/** Settings as the registry holds them: composite values, `set`, `changed`. */
class FakeSettings {
  constructor(public user: Record<string, unknown>) {}

  readonly saved: [string, unknown][] = [];
  readonly changed = new Signal<this, void>(this);

  get composite(): Record<string, unknown> {
    return { ...this.user };
  }

  async set(key: string, value: unknown): Promise<void> {
    this.saved.push([key, value]);
    this.user = { ...this.user, [key]: value };
    this.changed.emit();
  }

  /** A change made elsewhere (the Settings Editor). */
  edit(key: string, value: unknown): void {
    this.user = { ...this.user, [key]: value };
    this.changed.emit();
  }
}

function registry(settings: FakeSettings, loaded: string[] = []) {
  return {
    load: async (id: string) => {
      loaded.push(id);
      return settings;
    }
  } as unknown as ISettingRegistry;
}

describe('the loss scale setting', () => {
  it('reads as linear unless set to log', async () => {
    let seen = '';
    await watchSettings(registry(new FakeSettings({})), s => {
      seen = s.lossScale;
    });
    expect(seen).toBe('linear');
    await watchSettings(
      registry(new FakeSettings({ lossScale: 'sqrt' })),
      s => (seen = s.lossScale)
    );
    expect(seen).toBe('linear');
  });

  it('gives the loss charts their scale, and keeps their toggle', async () => {
    const settings = new FakeSettings({ lossScale: 'log' });
    const preference = new ScalePreference();
    const loaded: string[] = [];
    await keepLossScale(registry(settings, loaded), preference);
    expect(loaded).toEqual([PLUGIN_ID]);
    expect(preference.value).toBe('log');

    // A chart's toggle saves the choice, once.
    preference.value = 'linear';
    expect(settings.saved).toEqual([['lossScale', 'linear']]);
    await Promise.resolve();
    expect(preference.value).toBe('linear');

    // A change in the Settings Editor reaches the charts, and is not saved again.
    settings.edit('lossScale', 'log');
    expect(preference.value).toBe('log');
    expect(settings.saved).toHaveLength(1);
  });

  it('leaves the scale to the page without a registry', async () => {
    const preference = new ScalePreference();
    await keepLossScale(null, preference);
    preference.value = 'log';
    expect(preference.value).toBe('log');
  });
});
