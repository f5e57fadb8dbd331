/**
 * Authority envelopes of the `partner-profile-v2` profile (pure: no keys, no I/O).
 *
 * On an allowed binding invoke the service issues a short-lived envelope naming the
 * binding, operation, permission, decision and a digest of the arguments, and injects it
 * into the upstream request (`X-Authority-Envelope`). The upstream cannot read it (it is
 * sealed to the service identity); it asks `POST /v1/authority/verify` whether the
 * request it received is the one that was allowed. docs/bindings.md has the format.
 */
import { randomBytes } from "node:crypto";
import { hashCanonical, type Sha256Ref } from "../core/canonical-json.ts";
import { isRecord } from "../core/own-property.ts";

export const ENVELOPE_HEADER = "x-authority-envelope";

export interface AuthorityProfile {
  readonly id: string;
  /** Lifetime of the envelopes the service issues. */
  readonly lifetimeSec: number;
  /** Longest lifetime (exp − iat) verify accepts. */
  readonly maxLifetimeSec: number;
  /** Tolerated clock difference for iat and exp. */
  readonly clockSkewSec: number;
  /** Purpose named inside the signature: no other signed message passes as an envelope. */
  readonly purpose: string;
}

export const PARTNER_PROFILE_V2: AuthorityProfile = {
  id: "partner-profile-v2",
  lifetimeSec: 60,
  maxLifetimeSec: 300,
  clockSkewSec: 5,
  purpose: "authority-envelope/partner-profile-v2",
};

/** Profiles verify accepts; only one initially (spec: Versioning). */
export const authorityProfiles: ReadonlyMap<string, AuthorityProfile> = new Map([
  [PARTNER_PROFILE_V2.id, PARTNER_PROFILE_V2],
]);

export interface EnvelopeClaims {
  readonly profile: string;
  /** The authority's public URL. */
  readonly iss: string;
  /** `partner:<partner_id>`: the binding's partner services. */
  readonly aud: string;
  readonly binding_id: string;
  readonly operation_id: string;
  readonly permission_id: string;
  readonly decision: "allow";
  readonly args_digest: Sha256Ref;
  readonly iat: number;
  readonly exp: number;
  readonly jti: string;
}

export const envelopeAudience = (partnerId: string): string => `partner:${partnerId}`;
export const partnerSigner = (partnerId: string): string => `partner:${partnerId}`;

/**
 * The profile's canonical arguments: what the upstream can observe in the request it
 * receives, independent of how the caller typed it. Path and query values become the
 * strings they are on the wire (numbers in their shortest form, booleans as
 * "true"/"false"), a repeated query parameter stays an array, the JSON body stays JSON.
 * Headers are not covered (proxies and the auth injection change them).
 */
export interface ProfileArguments {
  readonly path: Readonly<Record<string, string>>;
  readonly query: Readonly<Record<string, string | readonly string[]>>;
  readonly body: unknown;
}

export class ProfileArgumentsError extends Error {
  readonly code = "invalid_arguments";
  /** Where (never what). */
  readonly location: string;

  constructor(location: string) {
    super(`invalid arguments at ${location}`);
    this.name = "ProfileArgumentsError";
    this.location = location;
  }
}

const ARGUMENT_KEYS: ReadonlySet<string> = new Set(["path", "query", "headers", "body"]);

function wireString(value: unknown, location: string): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  if (typeof value === "boolean") return value ? "true" : "false";
  throw new ProfileArgumentsError(location);
}

function stringMap(value: unknown, location: string): Record<string, string> {
  if (value === undefined) return {};
  if (!isRecord(value)) throw new ProfileArgumentsError(location);
  const out: Record<string, string> = {};
  for (const [name, v] of Object.entries(value)) {
    if (v === undefined) continue;
    out[name] = wireString(v, `${location}/${name}`);
  }
  return out;
}

function queryMap(value: unknown): Record<string, string | string[]> {
  if (value === undefined) return {};
  if (!isRecord(value)) throw new ProfileArgumentsError("query");
  const out: Record<string, string | string[]> = {};
  for (const [name, v] of Object.entries(value)) {
    if (v === undefined) continue;
    out[name] = Array.isArray(v)
      ? v.map((item, i) => wireString(item, `query/${name}/${i}`))
      : wireString(v, `query/${name}`);
  }
  return out;
}

/** Normalizes `{ path?, query?, headers?, body? }`; throws ProfileArgumentsError. */
export function profileArguments(args: unknown): ProfileArguments {
  if (args === undefined || args === null) return { path: {}, query: {}, body: null };
  if (!isRecord(args)) throw new ProfileArgumentsError("(root)");
  for (const key of Object.keys(args)) if (!ARGUMENT_KEYS.has(key)) throw new ProfileArgumentsError(key);
  if (args.headers !== undefined && !isRecord(args.headers)) throw new ProfileArgumentsError("headers");
  return {
    path: stringMap(args.path, "path"),
    query: queryMap(args.query),
    body: args.body === undefined ? null : args.body,
  };
}

/** `args_digest`: hashCanonical of the profile's canonical arguments. */
export function argumentsDigest(args: unknown): Sha256Ref {
  const normalized = profileArguments(args);
  try {
    return hashCanonical(normalized);
  } catch {
    throw new ProfileArgumentsError("body");
  }
}

export interface EnvelopeClaimsInput {
  readonly profile: AuthorityProfile;
  readonly issuer: string;
  readonly partnerId: string;
  readonly bindingId: string;
  readonly operationId: string;
  readonly permissionId: string;
  readonly argsDigest: Sha256Ref;
  readonly now: Date;
}

export function buildEnvelopeClaims(input: EnvelopeClaimsInput): EnvelopeClaims {
  const iat = Math.floor(input.now.getTime() / 1000);
  const lifetime = Math.min(input.profile.lifetimeSec, input.profile.maxLifetimeSec);
  return {
    profile: input.profile.id,
    iss: input.issuer,
    aud: envelopeAudience(input.partnerId),
    binding_id: input.bindingId,
    operation_id: input.operationId,
    permission_id: input.permissionId,
    decision: "allow",
    args_digest: input.argsDigest,
    iat,
    exp: iat + lifetime,
    jti: randomBytes(16).toString("base64url"),
  };
}

const CLAIM_TYPES: Readonly<Record<keyof EnvelopeClaims, "string" | "number">> = {
  profile: "string",
  iss: "string",
  aud: "string",
  binding_id: "string",
  operation_id: "string",
  permission_id: "string",
  decision: "string",
  args_digest: "string",
  iat: "number",
  exp: "number",
  jti: "string",
};

/**
 * Parses the signed plaintext; undefined when it is not exactly an envelope claim set.
 * `decision` is kept as any string here so a signed non-allow is reported as a denied
 * decision, not as a malformed envelope.
 */
export function parseEnvelopeClaims(
  text: string,
): (Omit<EnvelopeClaims, "decision"> & { decision: string }) | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isRecord(value)) return undefined;
  const keys = Object.keys(value);
  if (keys.length !== Object.keys(CLAIM_TYPES).length) return undefined;
  for (const [name, type] of Object.entries(CLAIM_TYPES)) {
    const v = value[name];
    if (type === "number" ? typeof v !== "number" || !Number.isSafeInteger(v) : typeof v !== "string") {
      return undefined;
    }
  }
  return value as unknown as Omit<EnvelopeClaims, "decision"> & { decision: string };
}

/** Why verify refuses an opened envelope; each is a 403 with this code. */
export type EnvelopeClaimFailure =
  | "profile_mismatch"
  | "issuer_mismatch"
  | "audience_mismatch"
  | "binding_mismatch"
  | "operation_mismatch"
  | "permission_mismatch"
  | "decision_denied"
  | "lifetime_exceeded"
  | "envelope_expired"
  | "digest_mismatch";

export interface EnvelopeExpectation {
  readonly profile: AuthorityProfile;
  readonly issuer: string;
  readonly partnerId: string;
  readonly bindingId: string;
  readonly operationId: string;
  /** Permission ids the operation has in the binding partner's catalogs. */
  readonly permissionIds: ReadonlySet<string>;
  readonly argsDigest: Sha256Ref;
  readonly now: Date;
}

/** The first profile check an envelope fails, or undefined when it passes them all (pure). */
export function checkEnvelopeClaims(
  claims: Omit<EnvelopeClaims, "decision"> & { decision: string },
  expected: EnvelopeExpectation,
): EnvelopeClaimFailure | undefined {
  const { profile } = expected;
  if (claims.profile !== profile.id) return "profile_mismatch";
  if (claims.iss !== expected.issuer) return "issuer_mismatch";
  if (claims.aud !== envelopeAudience(expected.partnerId)) return "audience_mismatch";
  if (claims.binding_id !== expected.bindingId) return "binding_mismatch";
  if (claims.operation_id !== expected.operationId) return "operation_mismatch";
  if (!expected.permissionIds.has(claims.permission_id)) return "permission_mismatch";
  if (claims.decision !== "allow") return "decision_denied";
  if (claims.exp <= claims.iat || claims.exp - claims.iat > profile.maxLifetimeSec)
    return "lifetime_exceeded";
  const nowSec = Math.floor(expected.now.getTime() / 1000);
  if (claims.iat > nowSec + profile.clockSkewSec) return "envelope_expired";
  if (nowSec > claims.exp + profile.clockSkewSec) return "envelope_expired";
  if (claims.args_digest !== expected.argsDigest) return "digest_mismatch";
  return undefined;
}
