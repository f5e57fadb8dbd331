/**
 * Auth-profile secrets for the MCP executor, opened once and then reused while the sealed
 * secret stored for the profile is unchanged. Each use reads the profile record (small)
 * and compares its sealed secret with the one the cached plaintext came from, so a
 * rotated or deleted secret is never served from the cache; only the ML-KEM open is
 * saved. Entries live at most `ttlMs` and only in this process's memory; they are never
 * logged, returned or persisted.
 */
import { LRUCache } from "lru-cache";
import {
  AUTH_PROFILE_SECRET_SCHEME,
  createAuthProfileSecretResolver,
  resolveAuthProfileSecret,
} from "../admin/auth-profiles.ts";
import type { AdminDeps } from "../admin/deps.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import type { SecretResolver } from "../execute/auth-profiles.ts";
import { type AuthProfileRecord, collections, storeKeys } from "../store/model.ts";

export interface SecretCacheOptions {
  /** Profiles kept (default 1000). */
  readonly max?: number;
  /** Longest time a plaintext is kept (default 300000 ms). */
  readonly ttlMs?: number;
}

interface Entry {
  readonly sealed: string;
  readonly value: string;
}

function profileOf(ref: string): { partnerId: string; profileId: string } | undefined {
  if (!ref.startsWith(AUTH_PROFILE_SECRET_SCHEME)) return undefined;
  const rest = ref.slice(AUTH_PROFILE_SECRET_SCHEME.length);
  const slash = rest.indexOf("/");
  if (slash <= 0 || slash !== rest.lastIndexOf("/") || slash === rest.length - 1) return undefined;
  return { partnerId: rest.slice(0, slash), profileId: rest.slice(slash + 1) };
}

export function createCachedSecretResolver(
  deps: Pick<AdminDeps, "store" | "secretKeyRings">,
  options: SecretCacheOptions = {},
): SecretResolver {
  const max = positiveIntegerOption(options.max, 1000, "max");
  const ttl = positiveIntegerOption(options.ttlMs, 300_000, "ttlMs");
  const cache = new LRUCache<string, Entry>({ max, ttl });
  const fallback = createAuthProfileSecretResolver(deps);
  return async (ref) => {
    const profile = profileOf(ref);
    // Anything but a well-formed profile reference goes the uncached way (and fails there).
    if (profile === undefined) return fallback(ref);
    const record = await deps.store.get<AuthProfileRecord>(
      collections.authProfiles,
      storeKeys.authProfile(profile.partnerId, profile.profileId),
    );
    const cached = cache.get(ref);
    if (record !== undefined && cached !== undefined && cached.sealed === record.sealed_secret)
      return cached.value;
    cache.delete(ref);
    const value = await resolveAuthProfileSecret(deps, profile.partnerId, profile.profileId);
    if (record !== undefined && record.sealed_secret.length > 0)
      cache.set(ref, { sealed: record.sealed_secret, value });
    return value;
  };
}
