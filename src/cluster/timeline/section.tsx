/** The allocation timeline as a section of the cluster view. */
import * as React from 'react';

import type { TimelineModel } from './model';
import { TimelineView, type ITimelineViewOptions } from './view';

/** The timeline of `model`, under a heading; its view made once per model. */
export function TimelineSection(props: {
  model: TimelineModel;
  options?: ITimelineViewOptions;
}): JSX.Element {
  const host = React.useRef<HTMLDivElement>(null);
  const options = React.useRef(props.options);
  options.current = props.options;
  React.useEffect(() => {
    const view = new TimelineView(props.model, {
      jobName: jobId => options.current?.jobName?.(jobId) ?? null,
      openJob: jobId => options.current?.openJob?.(jobId),
      openTab: props.options?.openTab && (() => options.current?.openTab?.())
    });
    host.current?.appendChild(view.node);
    return () => view.dispose();
  }, [props.model]);
  return (
    <section
      className="jp-edt-section jp-edt-timeline-section"
      aria-label="Allocation timeline"
    >
      <div className="jp-edt-section-head">
        <h3 className="jp-edt-section-title">Allocation timeline</h3>
      </div>
      <div ref={host} />
    </section>
  );
}
