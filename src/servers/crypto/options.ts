/** Options of the upstream crypto service, validated once at construction. */

import { availableParallelism } from "node:os";
import { Kek } from "../../crypto/index.ts";
import type { JwtVerifier } from "../../identity/jwt-verifier.ts";
import type { Logger } from "../../observability/logger.ts";
import type { Store } from "../../store/store.ts";

export interface CryptoServerOptions {
  readonly store: Store;
  /** Wraps every private key and the credential pepper at rest. */
  readonly kek: Kek;
  /** Verifies the identity provider's bearer tokens (actions and admin routes). */
  readonly verifier: JwtVerifier;
  /** The process's logger, from its composition root. */
  readonly logger: Logger;
  /** Clock for signing times and records (tests). */
  readonly now?: () => Date;
  /** Largest request body in bytes (default 2 MiB: above the managed API's 1 MiB). */
  readonly bodyLimit?: number;
  /** Role an admin token must carry (default "admin"). */
  readonly adminRole?: string;
  /** How long a cached owner is trusted before re-reading it (default 30 s). */
  readonly ownerCacheTtlMs?: number;
  /** How long a verified bearer token is remembered (default 60 s; 0 verifies every call). */
  readonly tokenCacheMaxAgeMs?: number;
  /**
   * Worker threads for sign-encrypt and decrypt-verify, started at the first such call
   * (default: the available parallelism, 1 to 4). 0: they run on the event loop with only
   * the ML-DSA step on the libuv thread pool.
   */
  readonly workerThreads?: number;
}

export interface ResolvedCryptoServerOptions {
  readonly store: Store;
  readonly kek: Kek;
  readonly verifier: JwtVerifier;
  readonly logger: Logger;
  readonly now: () => Date;
  readonly bodyLimit: number;
  readonly adminRole: string;
  readonly ownerCacheTtlMs: number;
  readonly tokenCacheMaxAgeMs: number;
  readonly workerThreads: number;
}

export class CryptoServerConfigError extends Error {
  readonly code = "crypto_server_config_invalid";

  constructor(message: string) {
    super(`crypto service: ${message}`);
    this.name = "CryptoServerConfigError";
  }
}

function nonNegativeInteger(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new CryptoServerConfigError(`${name} must be a non-negative integer`);
  }
  return value;
}

export function resolveCryptoServerOptions(options: CryptoServerOptions): ResolvedCryptoServerOptions {
  if (typeof options !== "object" || options === null)
    throw new CryptoServerConfigError("options are required");
  const { store, kek, verifier } = options;
  if (typeof store !== "object" || store === null || typeof store.get !== "function") {
    throw new CryptoServerConfigError("store is required");
  }
  if (!(kek instanceof Kek)) throw new CryptoServerConfigError("kek must be a loaded Kek");
  if (typeof verifier !== "object" || verifier === null || typeof verifier.verify !== "function") {
    throw new CryptoServerConfigError("verifier is required");
  }
  if (typeof options.logger?.info !== "function") {
    throw new CryptoServerConfigError("logger is required (the composition root's)");
  }
  if (options.now !== undefined && typeof options.now !== "function") {
    throw new CryptoServerConfigError("now must be a function");
  }
  const bodyLimit = nonNegativeInteger(options.bodyLimit, "bodyLimit", 2 * 1024 * 1024);
  if (bodyLimit < 1024) throw new CryptoServerConfigError("bodyLimit must be at least 1024 bytes");
  const adminRole = options.adminRole ?? "admin";
  if (typeof adminRole !== "string" || adminRole.length === 0) {
    throw new CryptoServerConfigError("adminRole must be a non-empty string");
  }
  const workerThreads = nonNegativeInteger(
    options.workerThreads,
    "workerThreads",
    Math.max(1, Math.min(4, availableParallelism())),
  );
  if (workerThreads > 64) throw new CryptoServerConfigError("workerThreads must be at most 64");
  const ownerCacheTtlMs = nonNegativeInteger(options.ownerCacheTtlMs, "ownerCacheTtlMs", 30_000);
  if (ownerCacheTtlMs < 1) throw new CryptoServerConfigError("ownerCacheTtlMs must be at least 1 ms");
  return {
    store,
    kek,
    verifier,
    logger: options.logger,
    now: options.now ?? (() => new Date()),
    bodyLimit,
    adminRole,
    ownerCacheTtlMs,
    tokenCacheMaxAgeMs: nonNegativeInteger(options.tokenCacheMaxAgeMs, "tokenCacheMaxAgeMs", 60_000),
    workerThreads,
  };
}
