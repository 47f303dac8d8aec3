/**
 * Notifications of my jobs' ends: which finished jobs deserve one and what it
 * says (pure, so the rule (my jobs only, a transition seen live, not a
 * replay) is tested alone), and the plugin that shows them. As JupyterLab's
 * own, each toast closes by itself and stays in the notification centre; it
 * names the job's state as its badge does (SUCCEEDED, FAILED, CANCELLED).
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

/** A notification to show: its kind, message, and how long its toast stays. */
export interface IJobNotice {
  type: 'success' | 'error' | 'info';
  message: string;
  /** Milliseconds before the toast closes (the notification centre keeps it). */
  autoClose: number;
}

/** How long a toast stays: long enough to read a failure's reason, not to cover the page. */
export const NOTICE_MS = { success: 5000, info: 5000, error: 10000 } as const;

/** The longest reason a toast shows (its first line); the job tab has all of it. */
const REASON_CHARS = 160;

/** JupyterLab cuts a toast's message past this many characters. */
export const TOAST_CHARS = 140;

/** A reason's first line, cut with an ellipsis past `REASON_CHARS`. */
export function shortReason(reason: string): string {
  const line = (reason || '').split('\n')[0].trim();
  return line.length > REASON_CHARS
    ? `${line.slice(0, REASON_CHARS - 1).trimEnd()}…`
    : line;
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
      return {
        type: 'success',
        message: `${name} SUCCEEDED.`,
        autoClose: NOTICE_MS.success
      };
    case 'FAILED':
      return {
        type: 'error',
        message: failedMessage(name, job.name || job.id, job.reason),
        autoClose: NOTICE_MS.error
      };
    case 'CANCELLED':
      return {
        type: 'info',
        message: `${name} CANCELLED.`,
        autoClose: NOTICE_MS.info
      };
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
        autoClose: notice.autoClose,
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

/**
 * A failure's toast: the sentence the row and the tab give, whole within the
 * characters a toast shows (TOAST_CHARS), so the job's id gives way first
 * (its Open button opens the job); cut only when even that is too long.
 */
function failedMessage(
  name: string,
  short: string,
  fullReason: string
): string {
  const reason = shortReason(fullReason);
  if (!reason) {
    return `${name} FAILED.`;
  }
  const messages = [`${name} FAILED: ${reason}`, `${short} FAILED: ${reason}`];
  const fits = messages.find(message => message.length <= TOAST_CHARS);
  return fits ?? `${messages[1].slice(0, TOAST_CHARS - 1).trimEnd()}…`;
}
