/**
 * The one uPlot wrapper every jupyter-edt chart uses.
 *
 * A `StreamingChart` owns a DOM node. It creates its uPlot plot once the node
 * has a width (it watches its size with a ResizeObserver, so it follows the
 * widget or panel it sits in), redraws at most once per animation frame however
 * often data arrives, and takes its colours from JupyterLab's CSS variables,
 * rebuilding the plot when the theme changes (light/dark).
 *
 * Its axes have nice ticks and labels (steps, wall times, values to
 * significant digits); its legend shows the latest values until hovered; its
 * left axis may be log (values <= 0 are left out, and said so); and while it
 * has no point it says why instead of showing a blank area. The options
 * themselves are built in plotoptions.ts, from pure geometry (ticks.ts,
 * scale.ts, legend.ts).
 */
import uPlot from 'uplot';

import { latestIndices } from './legend';
import { plotOptions } from './plotoptions';
import {
  drawnScale,
  logColumns,
  logScaleNote,
  type ILogColumns,
  type ScaleKind
} from './scale';
import type { AlignedColumns } from './series';

/** How one series is drawn. */
export interface ISeriesSpec {
  /** Legend label. */
  label: string;
  /** A JupyterLab CSS variable (e.g. `--jp-brand-color1`) or a CSS colour. */
  color: string;
  /** The y scale: `y` (left axis, default) or `y2` (right axis). */
  scale?: 'y' | 'y2';
  /** Line width in CSS pixels (default 1.5). */
  width?: number;
  /** Dash pattern, e.g. [4, 4]. */
  dash?: number[];
  /** Draw a dot at each point (sparse series such as per-epoch values). */
  points?: boolean;
  /** Draw as a step line (a value holds until the next point). */
  stepped?: boolean;
  /** Fill below the line with the colour at low opacity. */
  fill?: boolean;
}

/** What the x values are: steps (whole numbers), wall times (seconds since the epoch), or numbers. */
export type XKind = 'step' | 'time' | 'number';

/** What a chart shows. */
export interface IChartOptions {
  /** Series after the x values, in the order of the data's columns. */
  series: ISeriesSpec[];
  /** What the x values are (default numbers): their ticks and labels follow. */
  xKind?: XKind;
  /** Label of the x axis. */
  xLabel?: string;
  /** Label of the left y axis. */
  yLabel?: string;
  /** Label of the right y axis; shown when a series uses `y2`. */
  y2Label?: string;
  /** The left y axis' scale (default linear); values <= 0 are gaps on a log one. */
  yScale?: ScaleKind;
  /** The left y axis holds whole numbers (GPU counts): whole ticks only. */
  yInteger?: boolean;
  /** Height in pixels (default 200). */
  height?: number;
  /** Fixed range of the left y axis, e.g. [0, max] for counts (linear scale). */
  yRange?: (min: number, max: number) => [number, number];
  /** Accessible name of the chart. */
  ariaLabel?: string;
  /** What the chart says while it has no point (default "no data yet"). */
  emptyText?: string;
}

/** Resolve a CSS variable on `node` (or return a literal colour as given). */
export function cssColor(
  node: Element,
  value: string,
  fallback: string
): string {
  if (!value.startsWith('--')) {
    return value;
  }
  const resolved =
    typeof getComputedStyle === 'function'
      ? getComputedStyle(node).getPropertyValue(value).trim()
      : '';
  return resolved || fallback;
}

/** A colour with an alpha, from a `#rgb`/`#rrggbb` or `rgb()` colour. */
export function withAlpha(color: string, alpha: number): string {
  const hex = /^#([0-9a-f]{3}|[0-9a-f]{6})$/i.exec(color.trim());
  if (hex) {
    let digits = hex[1];
    if (digits.length === 3) {
      digits = digits
        .split('')
        .map(d => d + d)
        .join('');
    }
    const [r, g, b] = [0, 2, 4].map(i => parseInt(digits.slice(i, i + 2), 16));
    return `rgba(${r}, ${g}, ${b}, ${alpha})`;
  }
  const rgb = /^rgba?\(([^)]+)\)$/i.exec(color.trim());
  if (rgb) {
    const [r, g, b] = rgb[1].split(',').map(part => part.trim());
    return `rgba(${r}, ${g}, ${b}, ${alpha})`;
  }
  return color;
}

const DEFAULT_HEIGHT = 200;

/** What an empty chart says when its owner says nothing more precise. */
const DEFAULT_EMPTY_TEXT = 'no data yet';

/** A streaming uPlot chart in its own DOM node. */
export class StreamingChart {
  constructor(options: IChartOptions) {
    this._options = options;
    this.node = document.createElement('div');
    this.node.className = 'jp-edt-chart';
    // A figure, not an image: its legend, empty text and toggles are read.
    this.node.setAttribute('role', 'figure');
    if (options.ariaLabel) {
      this.node.setAttribute('aria-label', options.ariaLabel);
    }
    this.node.dataset.points = '0';
    this._emptyNode = document.createElement('div');
    this._emptyNode.className = 'jp-edt-chart-empty';
    this.node.append(this._emptyNode);
    this._emptyText = options.emptyText ?? DEFAULT_EMPTY_TEXT;
    this._setColumns([[], ...options.series.map(() => [])] as AlignedColumns);

    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this._fit());
      this._resizeObserver.observe(this.node);
    }
    if (typeof MutationObserver !== 'undefined' && document.body) {
      // JupyterLab marks the theme on <body>; rebuild with the new colours.
      this._themeObserver = new MutationObserver(() => this._rebuild());
      this._themeObserver.observe(document.body, {
        attributes: true,
        attributeFilter: ['data-jp-theme-name', 'data-jp-theme-light']
      });
    }
  }

  /** The node to place in a widget or panel. */
  readonly node: HTMLDivElement;

  /** What the chart shows. */
  get options(): IChartOptions {
    return this._options;
  }

  /**
   * Change the series drawn (e.g. a validation metric appeared); the plot is
   * rebuilt only when they differ. Pass data with matching columns next.
   */
  setSeries(series: ISeriesSpec[]): void {
    if (JSON.stringify(series) === JSON.stringify(this._options.series)) {
      return;
    }
    this._options = { ...this._options, series };
    this._setColumns([[], ...series.map(() => [])] as AlignedColumns);
    this._rebuild();
  }

  /** The number of x values shown (also in the node's `data-points`). */
  get pointCount(): number {
    return this._data[0].length;
  }

  /** The current data, as given. */
  get data(): AlignedColumns {
    return this._data;
  }

  /** The scale the left y axis asks for (`IChartOptions.yScale`). */
  get yScale(): ScaleKind {
    return this._options.yScale ?? 'linear';
  }

  /**
   * The scale it is drawn with: linear while a log one has no value > 0 to
   * place (also in the node's `data-y-scale`).
   */
  get drawnYScale(): ScaleKind {
    return drawnScale(this.yScale, this._log?.drawn ?? 0);
  }

  /** What a log scale leaves out (values <= 0), in words; null when nothing. */
  get scaleNote(): string | null {
    return this._log
      ? logScaleNote(this.yScale, this._log.drawn, this._log.hidden)
      : null;
  }

  /** Ask for a linear or a log left y axis; the plot is rebuilt when it changes. */
  setYScale(scale: ScaleKind): void {
    if (scale === this.yScale) {
      return;
    }
    this._options = { ...this._options, yScale: scale };
    this._setColumns(this._data);
    this._rebuild();
  }

  /** What the chart says while it has no point. */
  get emptyText(): string {
    return this._emptyText;
  }

  /** Say why the chart is empty (e.g. "failed before its first step"). */
  setEmptyText(text: string): void {
    if (text !== this._emptyText) {
      this._emptyText = text;
      this._showEmpty();
    }
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Replace the data; the plot is redrawn at the next animation frame. */
  setData(data: AlignedColumns): void {
    if (this._disposed) {
      return;
    }
    const drawn = this.drawnYScale;
    this._setColumns(data);
    if (this.drawnYScale !== drawn) {
      this._rebuild(); // a log scale got its first value > 0, or lost it
    }
    this._scheduleDraw();
  }

  /** Size the plot to the node now (the ResizeObserver does it by itself). */
  fit(): void {
    this._fit();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._resizeObserver?.disconnect();
    this._themeObserver?.disconnect();
    if (this._frame !== null && typeof cancelAnimationFrame === 'function') {
      cancelAnimationFrame(this._frame);
    }
    this._plot?.destroy();
    this._plot = null;
    this.node.remove();
  }

  /** Take new data: what the plot draws, what the legend reads, the empty text. */
  private _setColumns(data: AlignedColumns): void {
    this._data = data;
    this._latest = latestIndices(data);
    if (this.yScale === 'log') {
      const onAxis = this._options.series.map(s => (s.scale ?? 'y') === 'y');
      this._log = logColumns(data, onAxis);
    } else {
      this._log = null;
    }
    this._drawn =
      this._log && this.drawnYScale === 'log' ? this._log.columns : data;
    this.node.dataset.points = String(data[0].length);
    this.node.dataset.yScale = this.drawnYScale;
    this._showEmpty();
  }

  private _showEmpty(): void {
    const empty = this._data[0].length === 0;
    const text = empty ? this._emptyText : '';
    if (this._emptyNode.textContent !== text) {
      this._emptyNode.textContent = text;
    }
    this._emptyNode.hidden = !empty;
    this.node.dataset.empty = String(empty);
  }

  private _scheduleDraw(): void {
    if (this._frame !== null) {
      return;
    }
    const draw = () => {
      this._frame = null;
      this._draw();
    };
    if (typeof requestAnimationFrame === 'function') {
      this._frame = requestAnimationFrame(draw);
    } else {
      draw();
    }
  }

  private _draw(): void {
    if (this._disposed) {
      return;
    }
    if (this._plot) {
      this._plot.setData(this._drawn as uPlot.AlignedData);
    } else {
      this._fit();
    }
  }

  /** Create the plot when the node has a width; otherwise resize it. */
  private _fit(): void {
    if (this._disposed) {
      return;
    }
    const width = Math.floor(this.node.clientWidth);
    if (width <= 0) {
      return; // hidden or not attached yet: the observer calls again
    }
    const height = this.options.height ?? DEFAULT_HEIGHT;
    if (!this._plot) {
      this._plot = new uPlot(
        this._plotOptions(width, height),
        this._drawn as uPlot.AlignedData,
        this.node
      );
    } else if (this._plot.width !== width || this._plot.height !== height) {
      this._plot.setSize({ width, height });
    }
  }

  private _rebuild(): void {
    if (this._disposed || !this._plot) {
      return;
    }
    this._plot.destroy();
    this._plot = null;
    this._fit();
  }

  private _plotOptions(width: number, height: number): uPlot.Options {
    const node = this.node;
    const color = (value: string, fallback: string) =>
      cssColor(node, value, fallback);
    const fontFamily = color(
      '--jp-ui-font-family',
      'system-ui, -apple-system, sans-serif'
    );
    return plotOptions({
      options: this.options,
      width,
      height,
      theme: {
        text: color('--jp-ui-font-color2', '#616161'),
        grid: color('--jp-border-color2', '#e0e0e0'),
        font: `11px ${fontFamily}`,
        strokes: this.options.series.map((spec, index) =>
          color(spec.color, FALLBACK_COLORS[index % FALLBACK_COLORS.length])
        )
      },
      yScale: this.drawnYScale,
      values: () => this._data,
      latest: () => this._latest,
      translucent: withAlpha,
      // What the canvas shows under each axis, also in the DOM
      // (data-x-ticks, data-y-ticks, data-y2-ticks: JSON lists of labels).
      ticks: (scale, labels) => {
        this.node.dataset[`${scale}Ticks`] = JSON.stringify(labels);
      }
    });
  }

  private _options: IChartOptions;
  private _data!: AlignedColumns;
  /** What uPlot draws: the data, with a log axis' values <= 0 as gaps. */
  private _drawn!: AlignedColumns;
  private _latest: (number | null)[] = [];
  private _log: ILogColumns | null = null;
  private _emptyText: string;
  private readonly _emptyNode: HTMLDivElement;
  private _plot: uPlot | null = null;
  private _frame: number | null = null;
  private _disposed = false;
  private _resizeObserver: ResizeObserver | null = null;
  private _themeObserver: MutationObserver | null = null;
}

/** Colours used when a CSS variable is not defined (outside JupyterLab). */
const FALLBACK_COLORS = [
  '#1976d2',
  '#f57c00',
  '#388e3c',
  '#7b1fa2',
  '#d32f2f',
  '#0097a7'
];
