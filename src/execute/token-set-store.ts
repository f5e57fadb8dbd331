import type { Store } from "../store/store.ts";
import type { TokenSet, TokenSetStore } from "./auth-profiles.ts";

export const DEFAULT_TOKEN_SET_COLLECTION = "oauth_user_token_sets";

/**
 * The key of one user's grant for one profile (token sets, exchanged tokens): partner,
 * profile and subject, none of which may hold a `/`.
 */
export function userGrantKey(partnerId: string, profileId: string, subjectId: string): string {
  for (const part of [partnerId, profileId, subjectId]) {
    if (typeof part !== "string" || part.length === 0 || part.includes("/"))
      throw new TypeError("grant key parts must be non-empty and hold no /");
  }
  return `${partnerId}/${profileId}/${subjectId}`;
}

export interface StoreTokenSetStoreOptions {
  /** Collection name; default "oauth_user_token_sets". */
  readonly collection?: string;
}

export function isTokenSet(value: unknown): value is TokenSet {
  if (typeof value !== "object" || value === null) return false;
  const record = value as Record<string, unknown>;
  return (
    typeof record.accessToken === "string" &&
    record.tokenType === "Bearer" &&
    (record.refreshToken === undefined || typeof record.refreshToken === "string") &&
    (record.expiresAt === undefined || typeof record.expiresAt === "number") &&
    (record.scope === undefined || typeof record.scope === "string")
  );
}

/**
 * User token sets kept in the Store (SQLite or Redis), one document per grant key. A
 * document that does not have the token-set shape reads as absent, so the user is asked
 * to connect again rather than a broken credential being sent.
 */
export function createStoreTokenSetStore(
  store: Store,
  options: StoreTokenSetStoreOptions = {},
): TokenSetStore {
  const collection = options.collection ?? DEFAULT_TOKEN_SET_COLLECTION;
  if (typeof collection !== "string" || collection.length === 0)
    throw new TypeError("collection must be a name");
  return {
    async get(key) {
      const value = await store.get<unknown>(collection, key);
      return isTokenSet(value) ? value : undefined;
    },
    async put(key, tokenSet) {
      await store.put(collection, key, tokenSet);
    },
    async delete(key) {
      await store.delete(collection, key);
    },
  };
}
