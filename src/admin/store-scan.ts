import type { Store, StoredItem } from "../store/store.ts";

/** Every item of a collection under a prefix, page by page (admin-sized collections). */
export async function* scan<T>(
  store: Store,
  collection: string,
  prefix?: string,
): AsyncGenerator<StoredItem<T>> {
  let after: string | undefined;
  for (;;) {
    const page = await store.list<T>(collection, {
      limit: 1000,
      ...(prefix === undefined ? {} : { prefix }),
      ...(after === undefined ? {} : { after }),
    });
    yield* page.items;
    if (page.next === undefined) return;
    after = page.next;
  }
}

export async function scanAll<T>(
  store: Store,
  collection: string,
  prefix?: string,
): Promise<StoredItem<T>[]> {
  const out: StoredItem<T>[] = [];
  for await (const item of scan<T>(store, collection, prefix)) out.push(item);
  return out;
}

/** Counts the items under a prefix without keeping them. */
export async function countPrefix(store: Store, collection: string, prefix: string): Promise<number> {
  let count = 0;
  for await (const _ of scan(store, collection, prefix)) count++;
  return count;
}

export interface PageRequest {
  readonly limit?: number;
  /** The last local id of the previous page. */
  readonly after?: string;
}

export interface PageOf<T> {
  readonly items: T[];
  /** Pass as `after` to get the next page; absent on the last page. */
  readonly next?: string;
}

/**
 * One page of a partner-scoped collection. Cursors are local ids (without the
 * `<partner>/` prefix), so callers never see or forge store keys.
 */
export async function pageUnder<T>(
  store: Store,
  collection: string,
  prefix: string,
  request: PageRequest,
): Promise<PageOf<StoredItem<T>>> {
  const page = await store.list<T>(collection, {
    prefix,
    limit: request.limit ?? 100,
    ...(request.after === undefined ? {} : { after: `${prefix}${request.after}` }),
  });
  const next = page.next?.slice(prefix.length);
  return next === undefined ? { items: page.items } : { items: page.items, next };
}
