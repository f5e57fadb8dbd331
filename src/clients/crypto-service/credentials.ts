/**
 * Partner credentials of an owner: `api_key`, `access_key` and `secret_key`, shown once at
 * provisioning and stored only as digests.
 *
 * Digests are HMAC-SHA-256 under a secret "pepper" (itself stored wrapped under the KEK),
 * not scrypt: the values are 256-bit random strings, so a slow password hash adds no
 * strength, and it would cost tens of milliseconds on every crypto call. A leaked store
 * without the KEK yields digests that cannot even be checked against guesses.
 */

import { createHmac, type KeyObject, randomBytes, timingSafeEqual } from "node:crypto";
import type { PartnerHeader } from "./wire.ts";

export interface PartnerCredentials {
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
}

export interface CredentialDigests {
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
}

export const PEPPER_BYTES = 32;
/** Visible ASCII only: the values travel as HTTP header values. */
const CREDENTIAL_VALUE = /^[\x21-\x7E]{16,256}$/;
/** Presented values longer than this are refused before any hashing. */
export const MAX_PRESENTED_LENGTH = 512;

export function isCredentialValue(value: unknown): value is string {
  return typeof value === "string" && CREDENTIAL_VALUE.test(value);
}

/** Fresh random credentials; the prefixes let secret scanners recognise leaked values. */
export function generateCredentials(): PartnerCredentials {
  return {
    apiKey: `apk_${randomBytes(32).toString("base64url")}`,
    accessKey: `ak_${randomBytes(20).toString("base64url")}`,
    secretKey: `sk_${randomBytes(32).toString("base64url")}`,
  };
}

/**
 * Domain-separated per header, so a value presented under the wrong header never matches.
 * The pepper is a KeyObject: Node re-validates a Buffer key on every createHmac, which costs
 * five times the HMAC itself.
 */
export function credentialDigest(pepper: KeyObject, header: PartnerHeader, value: string): string {
  return createHmac("sha256", pepper)
    .update(header)
    .update("\u0000")
    .update(value, "utf8")
    .digest("base64url");
}

export function digestCredentials(pepper: KeyObject, credentials: PartnerCredentials): CredentialDigests {
  return {
    apiKey: credentialDigest(pepper, "api_key", credentials.apiKey),
    accessKey: credentialDigest(pepper, "access_key", credentials.accessKey),
    secretKey: credentialDigest(pepper, "secret_key", credentials.secretKey),
  };
}

function equalDigest(a: string, b: string): boolean {
  const x = Buffer.from(a, "base64url");
  const y = Buffer.from(b, "base64url");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Constant time in the values: all three comparisons always run. */
export function digestsMatch(stored: CredentialDigests, presented: CredentialDigests): boolean {
  const api = equalDigest(stored.apiKey, presented.apiKey);
  const access = equalDigest(stored.accessKey, presented.accessKey);
  const secret = equalDigest(stored.secretKey, presented.secretKey);
  return api && access && secret;
}
