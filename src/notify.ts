/**
 * Notifications of my jobs' ends: which finished jobs deserve one and what it
 * says (pure, so the rule (my jobs only, a transition seen live, not a
 * replay) is tested alone), and the plugin that shows them.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { IDisposable } from '@lumino/disposable';

import { DEFAULT_SETTINGS, watchSettings } from './settings';
import type { IJobFinished } from './jobs/state';
import { IEdtJobs } from './tokens';

/** A notification to show: its kind and message. */
export interface IJobNotice {
  type: 'success' | 'error' | 'info';
  message: string;
}

/**
 * The notice for a finished job, or null: only the user's own jobs (an admin
 * watching everyone's is not told of other people's), only when enabled.
 */
export function jobNotice(
  finished: IJobFinished,
  user: string | null,
  enabled: boolean
): IJobNotice | null {
  const { job } = finished;
  if (!enabled || user === null || job.user !== user) {
    return null;
  }
  const name = `${job.name || 'Job'} [${job.id}]`;
  switch (job.state) {
    case 'SUCCEEDED':
      return { type: 'success', message: `${name} finished.` };
    case 'FAILED': {
      const reason = (job.reason || '').split('\n')[0].slice(0, 100);
      return {
        type: 'error',
        message: reason ? `${name} failed: ${reason}` : `${name} failed.`
      };
    }
    case 'CANCELLED':
      return { type: 'info', message: `${name} was cancelled.` };
    default:
      return null;
  }
}

/**
 * Notifications of my jobs' ends, with a button to open them. While they are
 * wanted (the `notifications` setting), the job list stays live.
 */
export const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-edt:notifications',
  description: "Elastic Training: notifications of the user's finished jobs.",
  autoStart: true,
  requires: [IEdtJobs],
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    edtJobs: IEdtJobs,
    registry: ISettingRegistry | null
  ): void => {
    let enabled = DEFAULT_SETTINGS.notifications;
    let user: string | null = null;
    let watching: IDisposable | null = null;
    const updateWatch = () => {
      if (enabled && watching === null) {
        watching = edtJobs.watch();
      } else if (!enabled && watching !== null) {
        watching.dispose();
        watching = null;
      }
    };

    edtJobs.model.finished.connect((_, finished) => {
      const notice = jobNotice(finished, user, enabled);
      if (notice === null) {
        return;
      }
      Notification.emit(notice.message, notice.type, {
        autoClose: notice.type === 'error' ? false : 8000,
        actions: [
          {
            label: 'Open',
            caption: 'Open the job in a tab',
            callback: () => void edtJobs.open(finished.job.id)
          }
        ]
      });
    });

    let ready = false;
    const settingsLoaded = watchSettings(registry, settings => {
      enabled = settings.notifications;
      if (ready) {
        updateWatch();
      }
    });
    const userRead = edtJobs.user.then(me => {
      user = me?.name ?? null;
    });
    void Promise.all([settingsLoaded, userRead, app.restored]).then(() => {
      ready = true;
      updateWatch();
    });
  }
};
