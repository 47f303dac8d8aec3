/**
 * The plugins of the Elastic Training extension. `jupyter-edt:jobs` provides
 * `IEdtJobs` (what jobs exist, open a job, submit one); the sidebar, the
 * cluster view, the notifications and "Submit as Elastic Job…" are plugins
 * over it, as other extensions may be.
 */
import { clusterPlugin } from './cluster/plugin';
import { jobsPlugin } from './jobview/plugin';
import { notificationsPlugin } from './notify';
import { sidebarPlugin } from './sidebar/plugin';
import { submitPlugin } from './submit/plugin';
import { widgetsPlugin } from './widgets/plugin';

export * from './api';
export { edtIcon } from './icons';
export { PLUGIN_ID } from './settings';
export { CommandIDs, IEdtJobs } from './tokens';

export default [
  jobsPlugin,
  sidebarPlugin,
  clusterPlugin,
  notificationsPlugin,
  submitPlugin,
  widgetsPlugin
];
