/**
 * Server-side derivation of an external subject's identity (pure). The authority subject
 * id and the hashes bound into its v2 policy come only from the binding, the verified
 * token's issuer and the verified token's subject — never from anything the caller picks.
 */
import { createHash, randomBytes } from "node:crypto";
import { canonicalJson, type Sha256Ref, sha256Hex } from "../core/canonical-json.ts";
import type { ExternalSubjectContext } from "../core/decision.ts";

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/** RFC 4648 base32, lower case, without padding. */
export function base32(bytes: Uint8Array): string {
  let out = "";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(buffer >>> (bits - 5)) & 31];
      bits -= 5;
    }
    buffer &= (1 << bits) - 1;
  }
  if (bits > 0) out += BASE32[(buffer << (5 - bits)) & 31];
  return out;
}

export const sha256Ref = (text: string): Sha256Ref => `sha256:${sha256Hex(text)}`;

/** `sha256:<hex>` of the issuer string exactly as it appears in `iss`. */
export const issuerHash = (issuer: string): Sha256Ref => sha256Ref(issuer);

/** `sha256:<hex>` of the external `sub` exactly as the issuer sends it. */
export const externalSubjectHash = (externalSubject: string): Sha256Ref => sha256Ref(externalSubject);

/**
 * `ext_` + 32 base32 characters (160 bits) of sha256(canonical [binding, issuer, sub]).
 * The canonical array keeps the three parts apart whatever characters they hold.
 */
export function deriveSubjectId(bindingId: string, issuer: string, externalSubject: string): string {
  const digest = createHash("sha256")
    .update(canonicalJson([bindingId, issuer, externalSubject]))
    .digest();
  return `ext_${base32(digest).slice(0, 32)}`;
}

/** The v2 context with its hashes typed as `sha256:` references. */
export interface DerivedContext extends ExternalSubjectContext {
  readonly issuerHash: Sha256Ref;
  readonly externalSubjectHash: Sha256Ref;
}

export interface DerivedSubject {
  readonly subjectId: string;
  readonly context: DerivedContext;
}

/** The subject and the v2 context `decide()` compares the signed policy with. */
export function deriveExternalSubject(
  binding: { readonly binding_id: string; readonly partner_id: string; readonly mapping_version: string },
  issuer: string,
  externalSubject: string,
): DerivedSubject {
  return {
    subjectId: deriveSubjectId(binding.binding_id, issuer, externalSubject),
    context: {
      partnerId: binding.partner_id,
      bindingId: binding.binding_id,
      issuerHash: issuerHash(issuer),
      externalSubjectHash: externalSubjectHash(externalSubject),
      mappingVersion: binding.mapping_version,
    },
  };
}

/** A fresh random id such as `bnd_3kq…` (96 random bits, URL- and key-safe). */
export function randomId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString("base64url")}`;
}

/** A workload client secret: 256 random bits, shown once. */
export function newClientSecret(): string {
  return `wcs_${randomBytes(32).toString("base64url")}`;
}

/**
 * Evidence ids sort by creation time (so an invocation list pages in time order) and
 * stay unique across replicas through their random tail.
 */
export function newEvidenceId(now: Date): string {
  return `ev_${now.getTime().toString(36).padStart(10, "0")}${randomBytes(8).toString("hex")}`;
}
