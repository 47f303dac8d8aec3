/** What the plugins share about JupyterLab's shell. */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { WidgetTracker } from '@jupyterlab/apputils';
import type { Widget } from '@lumino/widgets';

/**
 * Add a tab to the main area, tracked (so the layout restorer reopens it),
 * and bring it to the front.
 */
export async function addMainTab<T extends Widget>(
  app: JupyterFrontEnd,
  tracker: WidgetTracker<T>,
  widget: T
): Promise<T> {
  await tracker.add(widget);
  app.shell.add(widget, 'main');
  app.shell.activateById(widget.id);
  return widget;
}

/**
 * The job under the context menu being opened: the nearest element marked
 * with `data-job-id` (a sidebar row), as the file browser finds its item;
 * null when the menu was not opened on one.
 */
export function jobIdUnderContextMenu(app: JupyterFrontEnd): string | null {
  const node = app.contextMenuHitTest(
    candidate => candidate.dataset.jobId !== undefined
  );
  return node?.dataset.jobId || null;
}
