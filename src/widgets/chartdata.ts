/**
 * The data of the standalone `LossChart` widget, as the kernel sends it:
 * custom messages `{type: "data", reset, names, counts}` whose binary buffers
 * hold, for each name in turn, its x values and y values as float64 arrays.
 * Kept apart from the ipywidgets classes so that it is tested on its own.
 */
import { DEFAULT_MAX_POINTS, SeriesBuffer } from '../charts/downsample';
import type { INamedSeries } from '../charts/series';

/** The kernel's data message. */
export interface IChartDataMessage {
  type: 'data';
  /** Replace everything held (a new view asked, or the chart was cleared). */
  reset?: boolean;
  /** Series names, in the order of the buffers. */
  names: string[];
  /** Points per series. */
  counts: number[];
}

/** What a new model asks the kernel for: all data, as a reset. */
export const REQUEST_DATA = { type: 'request_data' } as const;

/** Read float64 values from a message buffer (ArrayBuffer, DataView or view). */
export function toFloat64(
  buffer: ArrayBuffer | ArrayBufferView,
  count: number
): Float64Array {
  if (buffer instanceof Float64Array) {
    return buffer.subarray(0, count);
  }
  if (ArrayBuffer.isView(buffer)) {
    const bytes = new Uint8Array(
      buffer.buffer,
      buffer.byteOffset,
      buffer.byteLength
    );
    // Copy: the view's offset need not be aligned to 8 bytes.
    return new Float64Array(bytes.slice().buffer, 0, count);
  }
  return new Float64Array(buffer, 0, count);
}

/** Named series, capped and thinned like the kernel's. */
export class ChartData {
  constructor(maxPoints: number = DEFAULT_MAX_POINTS) {
    this.maxPoints = maxPoints;
  }

  readonly maxPoints: number;

  /** The series by name, in the order first seen. */
  readonly series = new Map<string, SeriesBuffer>();

  /** Points held over all series. */
  get pointCount(): number {
    let n = 0;
    for (const buffer of this.series.values()) {
      n += buffer.length;
    }
    return n;
  }

  /** Apply a data message; false when it is not one. */
  apply(
    content: unknown,
    buffers: readonly (ArrayBuffer | ArrayBufferView)[] = []
  ): boolean {
    const msg = content as IChartDataMessage | null;
    if (
      !msg ||
      msg.type !== 'data' ||
      !Array.isArray(msg.names) ||
      !Array.isArray(msg.counts)
    ) {
      return false;
    }
    if (msg.reset) {
      this.series.clear();
    }
    msg.names.forEach((name, i) => {
      const count = msg.counts[i] ?? 0;
      const xs = buffers[2 * i];
      const ys = buffers[2 * i + 1];
      let buffer = this.series.get(name);
      if (!buffer) {
        buffer = new SeriesBuffer(this.maxPoints);
        this.series.set(name, buffer);
      }
      if (count > 0 && xs !== undefined && ys !== undefined) {
        buffer.pushMany(toFloat64(xs, count), toFloat64(ys, count));
      }
    });
    return true;
  }

  /** The series for the chart, loss first. */
  named(): INamedSeries[] {
    return [...this.series].map(([name, buffer]) => ({
      name,
      x: buffer.x,
      y: buffer.y
    }));
  }
}
