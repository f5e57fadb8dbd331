/**
 * Partner user assertions (`X-Authority-User-Assertion`): one RFC 8725 verifier per
 * binding, built from the binding's issuer, keys, audience, tenant and algorithm
 * allowlist, cached and rebuilt when any of those change. A binding's `jwks_url` is the
 * partner's choice: its key set is fetched only through the egress gate, with a size bound.
 */
import { createHash } from "node:crypto";
import type { JSONWebKeySet } from "jose";
import { LRUCache } from "lru-cache";
import { hashCanonical } from "../core/canonical-json.ts";
import { AuthorityError } from "../errors.ts";
import { readBoundedBody } from "../execute/bounded-body.ts";
import { egressDenialOf, type FetchLike } from "../execute/egress.ts";
import { tokenErrorToAuthorityError } from "../identity/errors.ts";
import { createJwtVerifier, type JwtVerifier, type VerifiedToken } from "../identity/jwt-verifier.ts";
import type { BindingRecord } from "../store/binding-model.ts";

export const USER_ASSERTION_HEADER = "x-authority-user-assertion";

export interface AssertionVerifiers {
  /**
   * Verifies the token against the binding; throws AuthorityError `invalid_user_assertion`
   * (401), `egress_denied` (403) when the egress gate refuses the binding's JWKS URL, or
   * `upstream_unavailable` (503) when the issuer's keys cannot be fetched.
   */
  verify(binding: BindingRecord, token: string | undefined): Promise<VerifiedToken>;
}

export interface AssertionVerifiersOptions {
  /** The egress gate's fetch (EgressPolicy.fetch): the only way a binding's key set is fetched. */
  readonly fetch: FetchLike;
  readonly now?: () => Date;
  /** Bindings whose verifier is kept (default 1000). */
  readonly max?: number;
  readonly clockToleranceSec?: number;
}

/** Longest time a verified assertion is reused without checking its signature again. */
const VERIFIED_CACHE_MAX_AGE_MS = 60_000;
/** A key set of at most 32 keys fits many times over; anything larger is not one. */
export const MAX_JWKS_BYTES = 256 * 1024;

/** The gate's fetch, with the key set's body read under MAX_JWKS_BYTES before jose parses it. */
function boundedKeySetFetch(gateFetch: FetchLike): (url: string, init: RequestInit) => Promise<Response> {
  return async (url, init) => {
    const response = await gateFetch(url, init);
    if (response.status !== 200) {
      await response.body?.cancel().catch(() => undefined);
      return new Response(null, { status: response.status });
    }
    const body = await readBoundedBody(response, MAX_JWKS_BYTES);
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  };
}

/** A key-set fetch the egress gate refused: the binding names a destination the platform forbids. */
function egressRefusal(error: unknown): AuthorityError | undefined {
  const denial = egressDenialOf(error);
  return denial === undefined
    ? undefined
    : new AuthorityError("egress_denied", "The binding's JWKS URL is refused by the egress policy.", {
        details: { field: "jwks_url", rule: denial.rule },
      });
}
interface Entry {
  readonly fingerprint: string;
  readonly verifier: JwtVerifier;
}

function fingerprintOf(binding: BindingRecord): string {
  return hashCanonical({
    issuer: binding.issuer,
    jwks_url: binding.jwks_url,
    jwks: binding.jwks,
    audience: binding.audience,
    tenant_claim: binding.tenant_claim,
    tenant_value: binding.tenant_value,
    algorithms: binding.algorithms,
  });
}

export function createAssertionVerifiers(options: AssertionVerifiersOptions): AssertionVerifiers {
  if (typeof options?.fetch !== "function")
    throw new TypeError("assertion verifiers need the egress gate's fetch");
  const keySetFetch = boundedKeySetFetch(options.fetch);
  const cache = new LRUCache<string, Entry>({ max: options.max ?? 1000 });
  const clockToleranceSec = options.clockToleranceSec ?? 30;
  const now = options.now ?? (() => new Date());
  // Keyed by the binding's settings and the token's SHA-256 (never the token itself): a
  // change of issuer, keys, audience, tenant or algorithms starts over.
  const verified = new LRUCache<string, { token: VerifiedToken; until: number }>({ max: 10_000 });

  function verifierFor(binding: BindingRecord, fingerprint: string): JwtVerifier {
    const cached = cache.get(binding.binding_id);
    if (cached !== undefined && cached.fingerprint === fingerprint) return cached.verifier;
    const jwks =
      binding.jwks_url === null
        ? ({ keys: binding.jwks?.keys ?? [] } as unknown as JSONWebKeySet)
        : { url: binding.jwks_url, fetch: keySetFetch };
    const verifier = createJwtVerifier({
      issuer: binding.issuer,
      audience: binding.audience,
      jwks,
      algorithms: binding.algorithms,
      requireTokenUse: "access",
      tenantClaim: binding.tenant_claim,
      tenant: binding.tenant_value,
      clockToleranceSec,
      ...(options.now === undefined ? {} : { now: options.now }),
    });
    cache.set(binding.binding_id, { fingerprint, verifier });
    return verifier;
  }

  return {
    async verify(binding, token) {
      if (token === undefined || token.length === 0) {
        throw tokenErrorToAuthorityError(undefined, "invalid_user_assertion");
      }
      const fingerprint = fingerprintOf(binding);
      const cacheKey = `${fingerprint}\u0000${createHash("sha256").update(token).digest("base64url")}`;
      const at = now().getTime();
      const hit = verified.get(cacheKey);
      if (hit !== undefined && at < hit.until) return hit.token;
      let verifier: JwtVerifier;
      try {
        verifier = verifierFor(binding, fingerprint);
      } catch (error) {
        // A binding whose settings cannot make a verifier accepts nobody.
        throw tokenErrorToAuthorityError(error, "invalid_user_assertion");
      }
      let result: VerifiedToken;
      try {
        result = await verifier.verify(token);
      } catch (error) {
        throw egressRefusal(error) ?? tokenErrorToAuthorityError(error, "invalid_user_assertion");
      }
      const until = Math.min(result.expiresAt.getTime(), at + VERIFIED_CACHE_MAX_AGE_MS);
      if (until > at) verified.set(cacheKey, { token: result, until });
      return result;
    },
  };
}
