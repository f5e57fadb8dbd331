/**
 * Figures over several rounds (fresh measurement windows): the median is the figure, the
 * spread (lowest–highest) is printed beside it, so one lucky or unlucky window is not the page.
 */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

export function spread(values: readonly number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length / 2;
  const median =
    sorted.length % 2 === 1
      ? (sorted[Math.floor(middle)] ?? 0)
      : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
  return { median, min: sorted[0] ?? 0, max: sorted[sorted.length - 1] ?? 0 };
}

/** "1.23–1.98": the spread of `values` over the rounds, at `digits` decimals. */
export function spreadText(values: readonly number[], digits = 2): string {
  const { min, max } = spread(values);
  return `${min.toFixed(digits)}–${max.toFixed(digits)}`;
}

/** The median of `values`, rounded to `digits` decimals. */
export function medianOf(values: readonly number[], digits = 3): number {
  return Number(spread(values).median.toFixed(digits));
}

/** The p-th percentile (0–100) of `samples`, nearest rank. */
export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? 0;
}
