/** The settings of schema/plugin.json, read in one place by every plugin. */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import { DEFAULT_MAX_POINTS } from './charts/downsample';
import { lossScale, type ScalePreference } from './charts/preference';
import { isScaleKind, type ScaleKind } from './charts/scale';

/** The plugin whose settings (schema/plugin.json) every part reads. */
export const PLUGIN_ID = 'jupyter-edt:plugin';

/** The settings of schema/plugin.json. */
export interface IEdtSettings {
  showAllUsers: boolean;
  maxChartPoints: number;
  notifications: boolean;
  /** The loss axis' scale of every loss chart (widget, job tab, LossChart). */
  lossScale: ScaleKind;
}

export const DEFAULT_SETTINGS: IEdtSettings = {
  showAllUsers: false,
  maxChartPoints: DEFAULT_MAX_POINTS,
  notifications: true,
  lossScale: 'linear'
};

function readSettings(settings: ISettingRegistry.ISettings): IEdtSettings {
  const value = settings.composite as Partial<IEdtSettings>;
  return {
    showAllUsers: value.showAllUsers ?? DEFAULT_SETTINGS.showAllUsers,
    maxChartPoints: value.maxChartPoints ?? DEFAULT_SETTINGS.maxChartPoints,
    notifications: value.notifications ?? DEFAULT_SETTINGS.notifications,
    lossScale: isScaleKind(value.lossScale)
      ? value.lossScale
      : DEFAULT_SETTINGS.lossScale
  };
}

/**
 * Load the settings and tell `changed` of them, then of each change. Without
 * a registry, or when they cannot be loaded, the defaults stay.
 */
export async function watchSettings(
  registry: ISettingRegistry | null,
  changed: (settings: IEdtSettings) => void
): Promise<void> {
  if (!registry) {
    return;
  }
  try {
    const loaded = await registry.load(PLUGIN_ID);
    changed(readSettings(loaded));
    loaded.changed.connect(() => changed(readSettings(loaded)));
  } catch (reason) {
    console.warn('jupyter-edt: settings not loaded', reason);
  }
}

/**
 * Keep the loss charts' shared scale and the `lossScale` setting equal: the
 * setting gives the scale at load and on each change (e.g. in the Settings
 * Editor); a chart's "log scale" toggle saves it, so every loss chart (job
 * widget, job tab, LossChart widget) keeps it across reloads. Call once per
 * page. Without a registry the toggle still works, for the page's life.
 */
export async function keepLossScale(
  registry: ISettingRegistry | null,
  preference: ScalePreference = lossScale
): Promise<void> {
  if (!registry) {
    return;
  }
  try {
    const loaded = await registry.load(PLUGIN_ID);
    const fromSettings = () => {
      preference.value = readSettings(loaded).lossScale;
    };
    fromSettings();
    loaded.changed.connect(fromSettings);
    preference.changed.connect((_, scale) => {
      if (readSettings(loaded).lossScale !== scale) {
        loaded.set('lossScale', scale).catch(reason => {
          console.warn('jupyter-edt: the loss scale was not saved', reason);
        });
      }
    });
  } catch (reason) {
    console.warn('jupyter-edt: settings not loaded', reason);
  }
}
