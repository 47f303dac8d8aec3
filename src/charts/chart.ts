/**
 * The one uPlot wrapper every jupyter-edt chart uses.
 *
 * A `StreamingChart` owns a DOM node. It creates its uPlot plot once the node
 * has a width (it watches its size with a ResizeObserver, so it follows the
 * widget or panel it sits in), redraws at most once per animation frame however
 * often data arrives, and takes its colours from JupyterLab's CSS variables,
 * rebuilding the plot when the theme changes (light/dark).
 */
import uPlot from 'uplot';

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

/** What a chart shows. */
export interface IChartOptions {
  /** Series after the x values, in the order of the data's columns. */
  series: ISeriesSpec[];
  /** Label of the x axis. */
  xLabel?: string;
  /** Label of the left y axis. */
  yLabel?: string;
  /** Label of the right y axis; shown when a series uses `y2`. */
  y2Label?: string;
  /** The x values are times in seconds since the epoch. */
  time?: boolean;
  /** Height in pixels (default 200). */
  height?: number;
  /** Fixed range of the left y axis, e.g. [0, max] for counts. */
  yRange?: (min: number, max: number) => [number, number];
  /** Accessible name of the chart. */
  ariaLabel?: string;
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

/** A streaming uPlot chart in its own DOM node. */
export class StreamingChart {
  constructor(options: IChartOptions) {
    this._options = options;
    this.node = document.createElement('div');
    this.node.className = 'jp-edt-chart';
    this.node.setAttribute('role', 'img');
    if (options.ariaLabel) {
      this.node.setAttribute('aria-label', options.ariaLabel);
    }
    this.node.dataset.points = '0';
    this._data = [[], ...options.series.map(() => [])] as AlignedColumns;

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
    this._data = [[], ...series.map(() => [])] as AlignedColumns;
    this._rebuild();
  }

  /** The number of x values shown (also in the node's `data-points`). */
  get pointCount(): number {
    return this._data[0].length;
  }

  /** The current data. */
  get data(): AlignedColumns {
    return this._data;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Replace the data; the plot is redrawn at the next animation frame. */
  setData(data: AlignedColumns): void {
    if (this._disposed) {
      return;
    }
    this._data = data;
    this.node.dataset.points = String(data[0].length);
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
      this._plot.setData(this._data as uPlot.AlignedData);
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
        this._data as uPlot.AlignedData,
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
    const text = color('--jp-ui-font-color2', '#616161');
    const grid = color('--jp-border-color2', '#e0e0e0');
    const fontFamily = color(
      '--jp-ui-font-family',
      'system-ui, -apple-system, sans-serif'
    );
    const font = `11px ${fontFamily}`;
    const axis = (label: string | undefined, scale?: string): uPlot.Axis => ({
      scale,
      label,
      stroke: text,
      font,
      labelFont: font,
      labelSize: label ? 18 : 0,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1 }
    });

    const hasY2 = this.options.series.some(s => s.scale === 'y2');
    const axes: uPlot.Axis[] = [
      axis(this.options.xLabel),
      axis(this.options.yLabel, 'y')
    ];
    if (hasY2) {
      axes.push({
        ...axis(this.options.y2Label, 'y2'),
        side: 1,
        grid: { show: false }
      });
    }

    const stepped = uPlot.paths.stepped
      ? uPlot.paths.stepped({ align: 1 })
      : undefined;
    const series: uPlot.Series[] = [
      { label: this.options.xLabel ?? (this.options.time ? 'time' : 'x') },
      ...this.options.series.map((spec, index): uPlot.Series => {
        const stroke = color(spec.color, FALLBACK_COLORS[index % 6]);
        return {
          label: spec.label,
          scale: spec.scale ?? 'y',
          stroke,
          width: spec.width ?? 1.5,
          dash: spec.dash,
          fill: spec.fill ? withAlpha(stroke, 0.15) : undefined,
          spanGaps: true,
          paths: spec.stepped ? stepped : undefined,
          points: spec.points
            ? { show: true, size: 6, stroke, fill: stroke }
            : { show: false }
        };
      })
    ];

    const yRange = this.options.yRange;
    const scales: uPlot.Scales = {
      x: { time: this.options.time ?? false },
      y: yRange
        ? { range: (_self, min, max) => yRange(min, max) }
        : { auto: true }
    };
    if (hasY2) {
      scales.y2 = { auto: true };
    }

    return {
      width,
      height,
      scales,
      axes,
      series,
      legend: { show: true, live: true },
      cursor: { drag: { x: true, y: false } }
    };
  }

  private _options: IChartOptions;
  private _data: AlignedColumns;
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
