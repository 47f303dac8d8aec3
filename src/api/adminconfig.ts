/**
 * The settings an administrator changes without a restart (GET|PATCH
 * /edt/api/v1/admin/config): quotas, weights, user groups, administrators
 * and the allocation policy, and their latest changes.
 */
import type { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from './client';

/** The live settings, named as the configuration names them (LiveSettings). */
export interface ILiveSettings {
  user_quotas: Record<string, number>;
  group_quotas: Record<string, number>;
  user_weights: Record<string, number>;
  user_groups: Record<string, string[]>;
  admin_users: string[];
  admin_groups: string[];
  policy: string;
}

/** A JSON merge patch of the settings: a null removes a name, or a setting. */
export interface ILiveSettingsPatch {
  user_quotas?: Record<string, number | null> | null;
  group_quotas?: Record<string, number | null> | null;
  user_weights?: Record<string, number | null> | null;
  user_groups?: Record<string, string[] | null> | null;
  admin_users?: string[] | null;
  admin_groups?: string[] | null;
  policy?: string | null;
}

/** One setting's change within a record (`key`: the user or group). */
export interface ISettingChange {
  setting: keyof ILiveSettings;
  key?: string;
  old: unknown;
  new: unknown;
}

/** A stored change of the settings (ConfigChange). */
export interface IConfigChange {
  id: number;
  /** Seconds since the epoch. */
  time: number;
  kind: 'config';
  /** The administrator who made it; null for a reload of the config file. */
  user: string | null;
  source: 'api' | 'reload';
  changes: ISettingChange[];
}

/** The settings and their latest changes, newest first (AdminConfig). */
export interface IAdminConfig {
  config: ILiveSettings;
  changes: IConfigChange[];
}

/** The live settings: an administrator's only (others get 403). */
export function fetchAdminConfig(
  settings?: ServerConnection.ISettings
): Promise<IAdminConfig> {
  return requestAPI<IAdminConfig>('admin/config', { method: 'GET' }, settings);
}

/**
 * Change the live settings; the next allocation goes by them. A bad value is
 * refused whole (400, its message naming the setting).
 */
export function patchAdminConfig(
  patch: ILiveSettingsPatch,
  settings?: ServerConnection.ISettings
): Promise<IAdminConfig> {
  return requestAPI<IAdminConfig>(
    'admin/config',
    { method: 'PATCH', body: JSON.stringify(patch) },
    settings
  );
}
