/**
 * The allocation timeline drawn: devices down the side (a row per GPU, under
 * its node), time along the bottom with ticks, each job a coloured bar on the
 * GPUs it held (another user's job a grey "held" bar), a legend of the jobs,
 * and, on hover or focus, a tooltip with the job, its user, its interval and
 * every change with what prompted it. SVG, sized to its node (a
 * ResizeObserver), redrawn once per animation frame whatever the number of
 * changes; colours come from CSS variables (style/timeline.css), so light and
 * dark themes both work. Its geometry is geometry.ts, its words describe.ts.
 */
import type { IDisposable } from '@lumino/disposable';

import { el } from '../../dom';
import {
  assignColours,
  axisTicks,
  barColour,
  fitSince,
  jobsShown,
  layoutBars,
  layoutRows,
  timeToX,
  type IBar,
  type ITimeScale
} from './geometry';
import { describeJob, tooltipOf } from './describe';
import {
  TIMELINE_RANGES,
  type ITimelineRange,
  type TimelineModel
} from './model';

const SVG = 'http://www.w3.org/2000/svg';

/** The left column, where the devices' labels go (pixels). */
const LABEL_WIDTH = 96;
/** Room on the right, so the last tick's label fits. */
const RIGHT_MARGIN = 24;
/** The time axis' height below the rows. */
const AXIS_HEIGHT = 26;

/** Options of a timeline view. */
export interface ITimelineViewOptions {
  /** A job's name, for a bar whose interval does not carry it. */
  jobName?: (jobId: string) => string | null;
  /** Open a job (a click on one of the user's own bars). */
  openJob?: (jobId: string) => void;
  /** Open the timeline in a tab of its own (a link in the toolbar when given). */
  openTab?: () => void;
}

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string | number>,
  className?: string
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, String(value));
  }
  if (className) {
    node.setAttribute('class', className);
  }
  return node;
}

/** What an empty timeline says, by range. */
export function allocationsEmptyText(range: ITimelineRange): string {
  const span =
    range.id === '1h' ? 'hour' : range.id === '24h' ? '24 hours' : '7 days';
  return `No GPU was held in the last ${span}.`;
}

/** The allocation timeline of a `TimelineModel`, in a node of its own. */
export class TimelineView implements IDisposable {
  constructor(model: TimelineModel, options: ITimelineViewOptions = {}) {
    this.model = model;
    this._options = options;
    this.node = el('div', 'jp-edt-timeline');
    this.node.append(this._toolbar(), this._plot, this._legend);
    this._plot.append(this._svg, this._empty, this._tooltip);
    this._tooltip.hidden = true;
    this._tooltip.setAttribute('role', 'tooltip');
    this._svg.setAttribute('role', 'img');
    this._svg.setAttribute('aria-label', 'GPU allocations over time');
    this._svg.addEventListener('mousemove', this._onHover);
    this._svg.addEventListener('mouseleave', this._hideTooltip);
    this._svg.addEventListener('focusin', this._onFocus);
    this._svg.addEventListener('focusout', this._hideTooltip);
    this._svg.addEventListener('click', this._onClick);
    model.stateChanged.connect(this._schedule, this);
    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this._schedule());
      this._resizeObserver.observe(this._plot);
    }
    this._schedule();
  }

  readonly model: TimelineModel;
  readonly node: HTMLDivElement;

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.model.stateChanged.disconnect(this._schedule, this);
    this._resizeObserver?.disconnect();
    if (this._frame !== null) {
      cancelAnimationFrame(this._frame);
    }
    this.node.remove();
  }

  /** Draw now (a frame does it by itself after each change). */
  render(): void {
    this._frame = null;
    if (this._disposed) {
      return;
    }
    const state = this.model.state;
    for (const button of this._rangeButtons) {
      button.setAttribute(
        'aria-pressed',
        String(button.dataset.range === state.range.id)
      );
    }
    this._status.textContent = state.error
      ? `Could not read the allocations: ${state.error}`
      : state.loading
        ? 'Loading…'
        : '';
    this._status.classList.toggle('jp-edt-error', state.error !== null);
    const width = this._plot.clientWidth;
    if (!(width > 0)) {
      return; // hidden: drawn once it has a size (the ResizeObserver says so)
    }
    const now = this.model.now();
    const scale: ITimeScale = {
      since: fitSince(state.devices, now - state.range.seconds, now),
      until: now,
      x0: LABEL_WIDTH,
      x1: Math.max(LABEL_WIDTH + 1, width - RIGHT_MARGIN)
    };
    const { rows, height } = layoutRows(state.devices);
    const colours = assignColours(jobsShown(rows));
    const bars = layoutBars(rows, scale, colours, { now });
    this._bars = new Map(bars.map(bar => [bar.key, bar]));
    this._now = now;
    this._draw(rows, height, scale, bars, width);
    this._drawLegend(bars, colours);
    this._empty.textContent =
      state.until !== null && bars.length === 0
        ? allocationsEmptyText(state.range)
        : '';
    this._empty.hidden = this._empty.textContent === '';
    this.node.dataset.bars = String(bars.length);
    this.node.dataset.range = state.range.id;
  }

  private _toolbar(): HTMLElement {
    const bar = el('div', 'jp-edt-timeline-toolbar');
    const ranges = el('div', 'jp-edt-timeline-ranges');
    ranges.setAttribute('role', 'group');
    ranges.setAttribute('aria-label', 'Time range');
    for (const range of TIMELINE_RANGES) {
      const button = el(
        'button',
        'jp-edt-timeline-range jp-mod-styled',
        range.label
      );
      button.type = 'button';
      button.dataset.range = range.id;
      button.title = `The last ${range.label}`;
      button.addEventListener('click', () => this.model.setRange(range.id));
      ranges.append(button);
      this._rangeButtons.push(button);
    }
    bar.append(ranges, this._status);
    if (this._options.openTab) {
      const open = el('a', 'jp-edt-timeline-open', 'Open in a tab');
      open.href = '#';
      open.addEventListener('click', event => {
        event.preventDefault();
        this._options.openTab?.();
      });
      bar.append(open);
    }
    return bar;
  }

  private _draw(
    rows: ReturnType<typeof layoutRows>['rows'],
    height: number,
    scale: ITimeScale,
    bars: IBar[],
    width: number
  ): void {
    const total = height + AXIS_HEIGHT;
    const root = this._svg;
    root.setAttribute('width', String(width));
    root.setAttribute('height', String(total));
    root.setAttribute('viewBox', `0 0 ${width} ${total}`);
    root.replaceChildren();
    const grid = svg('g', {}, 'jp-edt-timeline-grid');
    const ticks = axisTicks(scale);
    for (const row of rows) {
      if (row.kind === 'node') {
        grid.append(
          svg(
            'line',
            { x1: 0, x2: scale.x1, y1: row.y + 0.5, y2: row.y + 0.5 },
            'jp-edt-timeline-node-rule'
          )
        );
        const label = svg(
          'text',
          { x: 4, y: row.y + row.height - 5 },
          'jp-edt-timeline-node'
        );
        label.textContent = row.label;
        grid.append(label);
      } else {
        grid.append(
          svg(
            'rect',
            {
              x: scale.x0,
              y: row.y,
              width: scale.x1 - scale.x0,
              height: row.height
            },
            'jp-edt-timeline-lane'
          )
        );
        const label = svg(
          'text',
          { x: 12, y: row.y + row.height / 2, 'dominant-baseline': 'central' },
          'jp-edt-timeline-device'
        );
        label.textContent = row.label;
        const title = svg('title', {});
        title.textContent = [row.device.name, row.device.id]
          .filter(Boolean)
          .join(' · ');
        label.append(title);
        grid.append(label);
      }
    }
    for (const tick of ticks) {
      grid.append(
        svg(
          'line',
          { x1: tick.x, x2: tick.x, y1: 0, y2: height + 4 },
          'jp-edt-timeline-gridline'
        )
      );
    }
    root.append(grid);

    const layer = svg('g', {}, 'jp-edt-timeline-bars');
    const name = this._options.jobName;
    for (const bar of bars) {
      const rect = svg(
        'rect',
        {
          x: bar.x,
          y: bar.y,
          width: Math.max(0, bar.width),
          height: bar.height,
          rx: 2,
          tabindex: 0,
          'data-bar': bar.key,
          'data-device': bar.deviceId,
          'data-job': bar.jobId ?? '',
          'data-open': bar.interval.end === null ? 'true' : 'false',
          'aria-label': `${describeJob(
            bar.interval,
            bar.jobId ? (name?.(bar.jobId) ?? null) : null
          )} on ${bar.deviceId}`
        },
        bar.jobId === null
          ? 'jp-edt-timeline-bar jp-edt-timeline-held'
          : 'jp-edt-timeline-bar'
      );
      rect.setAttribute('style', `fill: ${barColour(bar.colour)}`);
      layer.append(rect);
    }
    root.append(layer);

    const axis = svg('g', {}, 'jp-edt-timeline-axis');
    axis.append(
      svg('line', {
        x1: scale.x0,
        x2: scale.x1,
        y1: height + 0.5,
        y2: height + 0.5
      })
    );
    for (const tick of ticks) {
      axis.append(
        svg('line', { x1: tick.x, x2: tick.x, y1: height, y2: height + 5 })
      );
      const text = svg(
        'text',
        { x: tick.x, y: height + 17, 'text-anchor': 'middle' },
        'jp-edt-timeline-tick'
      );
      text.textContent = tick.label;
      axis.append(text);
    }
    const nowX = timeToX(this._now, scale);
    axis.append(
      svg(
        'line',
        { x1: nowX, x2: nowX, y1: 0, y2: height },
        'jp-edt-timeline-now'
      )
    );
    root.append(axis);
  }

  private _drawLegend(
    bars: IBar[],
    colours: ReadonlyMap<string, number>
  ): void {
    const items: HTMLElement[] = [];
    const name = this._options.jobName;
    const shown = new Map<string, IBar>();
    let held = false;
    for (const bar of bars) {
      if (bar.jobId === null) {
        held = true;
      } else if (!shown.has(bar.jobId)) {
        shown.set(bar.jobId, bar);
      }
    }
    for (const [jobId, bar] of shown) {
      const item = el('span', 'jp-edt-timeline-legend-item');
      item.dataset.job = jobId;
      const swatch = el('span', 'jp-edt-timeline-swatch');
      swatch.style.background = barColour(colours.get(jobId) ?? null);
      const user = bar.interval.user ? ` · ${bar.interval.user}` : '';
      item.append(
        swatch,
        document.createTextNode(
          `${describeJob(bar.interval, name?.(jobId) ?? null)}${user}`
        )
      );
      items.push(item);
    }
    if (held) {
      const item = el('span', 'jp-edt-timeline-legend-item');
      const swatch = el('span', 'jp-edt-timeline-swatch');
      swatch.style.background = barColour(null);
      item.append(
        swatch,
        document.createTextNode("held by another user's job")
      );
      items.push(item);
    }
    this._legend.replaceChildren(...items);
  }

  private _schedule(): void {
    if (this._disposed || this._frame !== null) {
      return;
    }
    if (typeof requestAnimationFrame === 'undefined') {
      this.render();
      return;
    }
    this._frame = requestAnimationFrame(() => this.render());
  }

  private _barAt(target: EventTarget | null): IBar | null {
    const node =
      target instanceof Element ? target.closest('[data-bar]') : null;
    const key = node?.getAttribute('data-bar');
    return key ? (this._bars.get(key) ?? null) : null;
  }

  private _showTooltip(bar: IBar, x: number, y: number): void {
    const name = bar.jobId
      ? (this._options.jobName?.(bar.jobId) ?? null)
      : null;
    const tip = tooltipOf(bar.interval, bar.deviceId, this._now, name);
    const lines = [
      el('div', 'jp-edt-timeline-tooltip-title', tip.title),
      ...(tip.user
        ? [el('div', 'jp-edt-timeline-tooltip-user', `user: ${tip.user}`)]
        : []),
      el('div', 'jp-edt-timeline-tooltip-interval', tip.interval),
      ...tip.changes.map(line =>
        el('div', 'jp-edt-timeline-tooltip-change', line)
      )
    ];
    this._tooltip.replaceChildren(...lines);
    this._tooltip.hidden = false;
    // measured where it has all the room it may take, then put beside the
    // pointer, or against the plot's right edge where it would overflow it
    this._tooltip.style.left = '0px';
    const plot = this._plot.getBoundingClientRect();
    const tipWidth = this._tooltip.offsetWidth;
    const left = Math.min(x - plot.left + 12, plot.width - tipWidth - 4);
    this._tooltip.style.left = `${Math.max(0, left)}px`;
    this._tooltip.style.top = `${y - plot.top + 14}px`;
    this._tooltip.dataset.bar = bar.key;
  }

  private readonly _onHover = (event: MouseEvent): void => {
    const bar = this._barAt(event.target);
    if (bar === null) {
      this._hideTooltip();
      return;
    }
    this._showTooltip(bar, event.clientX, event.clientY);
  };

  private readonly _onFocus = (event: FocusEvent): void => {
    const bar = this._barAt(event.target);
    if (bar !== null && event.target instanceof Element) {
      const box = event.target.getBoundingClientRect();
      this._showTooltip(bar, box.left, box.bottom - 10);
    }
  };

  private readonly _onClick = (event: MouseEvent): void => {
    const bar = this._barAt(event.target);
    if (bar?.jobId && this._options.openJob) {
      this._options.openJob(bar.jobId);
    }
  };

  private readonly _hideTooltip = (): void => {
    this._tooltip.hidden = true;
  };

  private readonly _options: ITimelineViewOptions;
  private readonly _plot = el('div', 'jp-edt-timeline-plot');
  private readonly _svg = document.createElementNS(SVG, 'svg');
  private readonly _empty = el('div', 'jp-edt-timeline-empty');
  private readonly _tooltip = el('div', 'jp-edt-timeline-tooltip');
  private readonly _legend = el('div', 'jp-edt-timeline-legend');
  private readonly _status = el('span', 'jp-edt-timeline-status');
  private readonly _rangeButtons: HTMLButtonElement[] = [];
  private _bars = new Map<string, IBar>();
  private _now = 0;
  private _frame: number | null = null;
  private _resizeObserver: ResizeObserver | null = null;
  private _disposed = false;
}
