/**
 * The allocation timeline as a main-area tab of its own: the same view the
 * cluster view shows, wider. It follows the allocations only while shown.
 */
import { Widget } from '@lumino/widgets';
import type { Message } from '@lumino/messaging';

import {
  fetchAllocations,
  webSocketFactory,
  type IAllocations,
  type IAllocationsQuery,
  type SocketFactory
} from '../../api';
import { TimelineModel } from './model';
import { TimelineView, type ITimelineViewOptions } from './view';

/** The DOM id of the timeline tab (also its restorer key). */
export const TIMELINE_ID = 'jupyter-edt-allocation-timeline';

/** Options of the timeline tab. */
export interface ITimelinePanelOptions extends ITimelineViewOptions {
  /** GET /allocations (the REST client by default). */
  fetchAllocations?: (query: IAllocationsQuery) => Promise<IAllocations>;
  /** Opens the events WebSocket (the page's by default; null: none). */
  connect?: SocketFactory | null;
}

/** A timeline model over the REST client and the events WebSocket. */
export function timelineModel(
  options: ITimelinePanelOptions = {}
): TimelineModel {
  return new TimelineModel({
    fetchAllocations: options.fetchAllocations ?? (q => fetchAllocations(q)),
    connect:
      options.connect === undefined ? webSocketFactory() : options.connect,
    jobName: options.jobName
  });
}

/** The timeline tab's content. */
export class TimelinePanel extends Widget {
  constructor(options: ITimelinePanelOptions = {}) {
    super();
    this.id = TIMELINE_ID;
    this.addClass('jp-edt-timeline-panel');
    this.title.label = 'Allocation Timeline';
    this.title.caption =
      'Which job held each GPU over time, and why each change happened';
    this.title.closable = true;
    this.model = timelineModel(options);
    this.view = new TimelineView(this.model, options);
    this.node.append(this.view.node);
  }

  readonly model: TimelineModel;
  readonly view: TimelineView;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.view.dispose();
    this.model.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.model.setActive(this.isVisible);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.model.setActive(true);
  }

  protected onBeforeHide(msg: Message): void {
    super.onBeforeHide(msg);
    this.model.setActive(false);
  }

  protected onBeforeDetach(msg: Message): void {
    this.model.setActive(false);
    super.onBeforeDetach(msg);
  }
}
