/**
 * Built API tool lists, one per (subject, document_hash). The hash covers the whole
 * signed document (revocation and expiry included), so a changed policy is a new key;
 * whether the document may be used at all is checked on every request before the cache
 * is consulted. A cached index only names tools: it never grants a call.
 */
import { LRUCache } from "lru-cache";
import type { PolicyDocument } from "../core/policy-document.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { type ApiToolIndex, buildApiToolIndex } from "./api-tools.ts";

export interface ToolIndexCache {
  indexFor(subjectId: string, documentHash: string, document: PolicyDocument): ApiToolIndex;
  stats(): { readonly hits: number; readonly builds: number; readonly size: number };
  clear(): void;
}

export function createToolIndexCache(options: {
  readonly max: number;
  readonly onCollision?: (info: { subjectId: string; permissionIds: readonly string[] }) => void;
  /** Names API tools never take (the management tools'), whoever lists. */
  readonly reserved?: Iterable<string>;
}): ToolIndexCache {
  const reserved: ReadonlySet<string> = new Set(options.reserved ?? []);
  const max = positiveIntegerOption(options.max, undefined, "max");
  const cache = new LRUCache<string, ApiToolIndex>({ max });
  let hits = 0;
  let builds = 0;
  return {
    indexFor(subjectId, documentHash, document) {
      const key = `${subjectId}\u0000${documentHash}`;
      const cached = cache.get(key);
      if (cached !== undefined) {
        hits++;
        return cached;
      }
      builds++;
      const index = buildApiToolIndex(document, reserved);
      if (index.collisions.length > 0) {
        options.onCollision?.({ subjectId, permissionIds: index.collisions });
      }
      cache.set(key, index);
      return index;
    },
    stats: () => ({ hits, builds, size: cache.size }),
    clear: () => cache.clear(),
  };
}
