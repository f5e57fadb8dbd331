/**
 * lru-cache options that bound a cache at `max` entries without allocating for them at
 * construction. Given `max`, lru-cache allocates (and fills) its key, value and link arrays
 * for `max` entries up front — ≈ 2 ms of CPU per 20,000 entries, paid by every cache a process
 * builds at start, most of which never hold more than a few entries. Bounded by `maxSize` with
 * each entry counted 1, the same bound holds and the arrays grow with what is held (decision 2871).
 */
export interface GrowingBound {
  readonly maxSize: number;
  readonly sizeCalculation: () => number;
}

const ONE_ENTRY = (): number => 1;

export function growingBound(max: number): GrowingBound {
  return { maxSize: max, sizeCalculation: ONE_ENTRY };
}
