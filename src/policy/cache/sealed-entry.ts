import { createCipheriv, createDecipheriv, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { CacheKeys } from "./cache-key.ts";

/**
 * Entries the sidecars put in Redis: encrypt (AES-256-GCM), then MAC (HMAC-SHA256) over
 * the version, the entry's own name and the ciphertext. The name is bound in, so an entry
 * copied under another subject's key does not verify. Opening checks the MAC in constant
 * time before decrypting; anything wrong is "not an entry" — the caller reloads from the
 * source of truth and never trusts what it read.
 *
 * Format: `v1.<iv>.<ciphertext+gcm tag>.<hmac>` (base64url parts).
 */

const VERSION = "v1";
const IV_BYTES = 12;
const GCM_TAG_BYTES = 16;
const MAC_BYTES = 32;
/** Bigger entries are refused unread: a policy of this size is not a policy. */
export const MAX_SEALED_ENTRY_CHARS = 4 * 1024 * 1024;
const PART = /^[A-Za-z0-9_-]+$/;

export type OpenFailure = "malformed" | "bad_mac" | "undecryptable";

export type OpenResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly failure: OpenFailure };

function macOf(keys: CacheKeys, name: string, iv: string, body: string): Buffer {
  return createHmac("sha256", keys.mac).update(`${VERSION}\n${name}\n${iv}.${body}`).digest();
}

function aad(name: string): Buffer {
  return Buffer.from(`authority-sidecar-cache ${VERSION}\n${name}`);
}

/** `name` is the entry's identity (e.g. `policy:<subject>`); it is authenticated, not stored. */
export function sealEntry(keys: CacheKeys, name: string, value: unknown): string {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv("aes-256-gcm", keys.encryption, iv);
  cipher.setAAD(aad(name));
  const plaintext = Buffer.from(JSON.stringify(value), "utf8");
  const body = Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
  const ivText = iv.toString("base64url");
  const bodyText = body.toString("base64url");
  return `${VERSION}.${ivText}.${bodyText}.${macOf(keys, name, ivText, bodyText).toString("base64url")}`;
}

export function openEntry(keys: CacheKeys, name: string, text: unknown): OpenResult {
  if (typeof text !== "string" || text.length > MAX_SEALED_ENTRY_CHARS)
    return { ok: false, failure: "malformed" };
  const parts = text.split(".");
  if (parts.length !== 4 || parts[0] !== VERSION) return { ok: false, failure: "malformed" };
  const [, ivText = "", bodyText = "", macText = ""] = parts;
  if (!PART.test(ivText) || !PART.test(bodyText) || !PART.test(macText))
    return { ok: false, failure: "malformed" };
  const mac = Buffer.from(macText, "base64url");
  if (mac.length !== MAC_BYTES) return { ok: false, failure: "bad_mac" };
  if (!timingSafeEqual(mac, macOf(keys, name, ivText, bodyText))) return { ok: false, failure: "bad_mac" };
  const iv = Buffer.from(ivText, "base64url");
  const body = Buffer.from(bodyText, "base64url");
  if (iv.length !== IV_BYTES || body.length < GCM_TAG_BYTES) return { ok: false, failure: "malformed" };
  try {
    const decipher = createDecipheriv("aes-256-gcm", keys.encryption, iv);
    decipher.setAAD(aad(name));
    decipher.setAuthTag(body.subarray(body.length - GCM_TAG_BYTES));
    const plaintext = Buffer.concat([
      decipher.update(body.subarray(0, body.length - GCM_TAG_BYTES)),
      decipher.final(),
    ]);
    return { ok: true, value: JSON.parse(plaintext.toString("utf8")) };
  } catch {
    return { ok: false, failure: "undecryptable" };
  }
}
