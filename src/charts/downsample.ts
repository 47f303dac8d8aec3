/**
 * Bounded, deterministic downsampling of streaming series.
 *
 * A series keeps at most `maxPoints` points. When one more arrives, the older
 * half is thinned to every other point (its first point kept) and the newer
 * half is kept whole. Older data thus becomes coarser step by step while the
 * recent part stays exact, and the result depends only on the sequence of
 * points pushed: the Python `LossChart` (jupyter_edt/notebook/widgets.py) uses
 * the same rule, so the kernel's arrays and the browser's stay equal.
 */

/** Default cap on the points of one series. */
export const DEFAULT_MAX_POINTS = 100_000;

/** The smallest cap that still thins meaningfully. */
const MIN_MAX_POINTS = 4;

/**
 * Thin `xs`/`ys` in place: every other point of the older half (indices
 * 0, 2, 4, ... below `floor(n / 2)`), then every point of the newer half.
 */
export function thinOlderHalf(xs: number[], ys: number[]): void {
  const n = xs.length;
  const half = Math.floor(n / 2);
  let out = 0;
  for (let i = 0; i < n; i++) {
    if (i >= half || i % 2 === 0) {
      xs[out] = xs[i];
      ys[out] = ys[i];
      out++;
    }
  }
  xs.length = out;
  ys.length = out;
}

/** One streaming series: x and y values, capped at `maxPoints`. */
export class SeriesBuffer {
  constructor(maxPoints: number = DEFAULT_MAX_POINTS) {
    this.maxPoints = Math.max(MIN_MAX_POINTS, Math.floor(maxPoints));
  }

  /** The cap on the number of points. */
  readonly maxPoints: number;

  /** The x values, oldest first (do not modify). */
  readonly x: number[] = [];

  /** The y values, aligned with `x` (do not modify). */
  readonly y: number[] = [];

  /** Number of points held. */
  get length(): number {
    return this.x.length;
  }

  /** The last x value, or -Infinity when empty. */
  get lastX(): number {
    return this.x.length > 0 ? this.x[this.x.length - 1] : -Infinity;
  }

  /** Append one point, thinning the older half when over the cap. */
  push(x: number, y: number): void {
    this.x.push(x);
    this.y.push(y);
    if (this.x.length > this.maxPoints) {
      thinOlderHalf(this.x, this.y);
    }
  }

  /** Append many points, in order (as `push` for each). */
  pushMany(xs: ArrayLike<number>, ys: ArrayLike<number>): void {
    const n = Math.min(xs.length, ys.length);
    for (let i = 0; i < n; i++) {
      this.push(xs[i], ys[i]);
    }
  }

  /** Forget every point. */
  clear(): void {
    this.x.length = 0;
    this.y.length = 0;
  }
}
