/**
 * Runs changes to one key one at a time within this process. A subject's policy is
 * read-modify-written (assignments → compiled document → head + 1); without this, two
 * concurrent admin calls could both write head N+1 and one change would be lost. Several
 * replicas writing the same subject at the same instant are not serialized (see
 * docs/admin-api.md).
 */
const tails = new Map<string, Promise<unknown>>();

export async function withKeyLock<T>(key: string, work: () => Promise<T>): Promise<T> {
  const previous = tails.get(key) ?? Promise.resolve();
  const run = previous.then(work, work);
  const tail = run.then(
    () => undefined,
    () => undefined,
  );
  tails.set(key, tail);
  try {
    return await run;
  } finally {
    // The last waiter cleans up, so the map does not grow with every subject ever touched.
    if (tails.get(key) === tail) tails.delete(key);
  }
}
