/**
 * What a chart's legend reads: under the cursor, the values at the hovered
 * x; otherwise each series' latest value, so that a chart reads without a
 * mouse ("step 1200 · loss 0.0123", not "step -- · loss --"). Pure: the chart
 * (chart.ts) hands it to uPlot, and jest tests it.
 */
import type { AlignedColumns } from './series';

/** What a legend shows where a series has no value. */
export const NO_VALUE = '–';

/**
 * Each column's last index holding a value (null where it holds none): the
 * x column first, then each series in the columns' order.
 */
export function latestIndices(columns: AlignedColumns): (number | null)[] {
  return columns.map(column => {
    for (let i = column.length - 1; i >= 0; i--) {
      const value = column[i];
      if (value !== null && value !== undefined) {
        return i;
      }
    }
    return null;
  });
}

/**
 * The text of one legend cell: the value at `hovered` (the cursor's index;
 * null when the cursor is off the chart), else the value at `latest`, through
 * `format`; NO_VALUE where there is none.
 */
export function legendText(
  column: readonly (number | null)[] | undefined,
  hovered: number | null,
  latest: number | null,
  format: (value: number) => string
): string {
  const index = hovered ?? latest;
  const value = index === null || !column ? null : column[index];
  return value === null || value === undefined ? NO_VALUE : format(value);
}
