/** The settings of schema/plugin.json, read in one place by every plugin. */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import { DEFAULT_MAX_POINTS } from './charts/downsample';

/** The plugin whose settings (schema/plugin.json) every part reads. */
export const PLUGIN_ID = 'jupyter-edt:plugin';

/** The settings of schema/plugin.json. */
export interface IEdtSettings {
  showAllUsers: boolean;
  maxChartPoints: number;
  notifications: boolean;
}

export const DEFAULT_SETTINGS: IEdtSettings = {
  showAllUsers: false,
  maxChartPoints: DEFAULT_MAX_POINTS,
  notifications: true
};

function readSettings(settings: ISettingRegistry.ISettings): IEdtSettings {
  const value = settings.composite as Partial<IEdtSettings>;
  return {
    showAllUsers: value.showAllUsers ?? DEFAULT_SETTINGS.showAllUsers,
    maxChartPoints: value.maxChartPoints ?? DEFAULT_SETTINGS.maxChartPoints,
    notifications: value.notifications ?? DEFAULT_SETTINGS.notifications
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
