/**
 * Per-owner key rings: versions of (ML-KEM-768, ML-DSA-65) key pairs, one of them current.
 * Rotation adds a new current version and retires the old one, which still opens and
 * verifies what was made with it. Pure: no I/O (wrapping for storage is in kek.ts).
 */

import { type KeyObject, randomBytes } from "node:crypto";
import { isRecord } from "../core/own-property.ts";
import { toBase64 } from "./bytes.ts";
import { assertKeyId } from "./envelope.ts";
import { CryptoError } from "./errors.ts";
import {
  assertKey,
  assertPublicKeyLength,
  exportRawPublicKey,
  generateKemKeyPair,
  generateSigKeyPair,
  importPublicKey,
  KEM_ALGORITHM,
  type KeyPair,
  SIG_ALGORITHM,
} from "./keys.ts";

export type KeyStatus = "active" | "retired";

export interface KeyVersion {
  readonly keyId: string;
  readonly createdAt: Date;
  readonly kem: KeyPair;
  readonly sig: KeyPair;
  readonly status: KeyStatus;
}

/** What sign-encrypt needs from the signing side. */
export interface Signer {
  readonly id: string;
  readonly keyId: string;
  readonly privateKey: KeyObject;
}

/** What seal needs from the receiving side. */
export interface Recipient {
  readonly keyId: string;
  readonly publicKey: KeyObject;
}

export type RecipientKeyLookup = (keyId: string) => KeyObject | undefined;
export type SignerKeyLookup = (signerId: string, keyId: string) => KeyObject | undefined;

function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** Owner (signer) ids are shown to callers as `signed_by`: printable, bounded, well-formed. */
export function assertOwner(owner: unknown): asserts owner is string {
  if (
    typeof owner !== "string" ||
    owner.length === 0 ||
    owner.length > 256 ||
    hasControlCharacter(owner) ||
    !owner.isWellFormed()
  ) {
    throw new CryptoError("crypto_invalid_argument", {
      detail: "owner must be 1-256 characters without control characters",
    });
  }
}

/** A fresh key id: random, so it reveals nothing about the owner or the rotation count. */
export function newKeyId(): string {
  return `pq1-${randomBytes(8).toString("hex")}`;
}

function assertDate(value: unknown, what: string): asserts value is Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new CryptoError("crypto_invalid_argument", { detail: `${what} must be a valid Date` });
  }
}

export function generateKeyVersion(options: { now?: Date; keyId?: string } = {}): KeyVersion {
  const createdAt = options.now ?? new Date();
  assertDate(createdAt, "now");
  const keyId = options.keyId ?? newKeyId();
  assertKeyId(keyId);
  return Object.freeze({
    keyId,
    createdAt: new Date(createdAt.getTime()),
    kem: generateKemKeyPair(),
    sig: generateSigKeyPair(),
    status: "active",
  });
}

function validateVersions(versions: readonly KeyVersion[]): void {
  if (versions.length === 0)
    throw new CryptoError("crypto_invalid_argument", { detail: "a ring needs a version" });
  const ids = new Set<string>();
  let active = 0;
  for (const version of versions) {
    assertKeyId(version.keyId);
    assertDate(version.createdAt, "createdAt");
    if (ids.has(version.keyId))
      throw new CryptoError("crypto_invalid_argument", { detail: "duplicate key id" });
    ids.add(version.keyId);
    if (version.status === "active") active++;
    else if (version.status !== "retired")
      throw new CryptoError("crypto_invalid_argument", { detail: "status" });
    assertKey(version.kem.publicKey, KEM_ALGORITHM, "public");
    assertKey(version.kem.privateKey, KEM_ALGORITHM, "private");
    assertKey(version.sig.publicKey, SIG_ALGORITHM, "public");
    assertKey(version.sig.privateKey, SIG_ALGORITHM, "private");
  }
  if (active !== 1)
    throw new CryptoError("crypto_invalid_argument", { detail: "exactly one version must be active" });
}

export class KeyRing {
  readonly owner: string;
  #versions: KeyVersion[];
  #byId: Map<string, KeyVersion>;

  private constructor(owner: string, versions: readonly KeyVersion[]) {
    assertOwner(owner);
    validateVersions(versions);
    this.owner = owner;
    this.#versions = versions.map((version) => Object.freeze({ ...version }));
    this.#byId = new Map(this.#versions.map((version) => [version.keyId, version]));
  }

  /** A new ring with one active version. */
  static generate(options: { owner: string; now?: Date; keyId?: string }): KeyRing {
    return new KeyRing(options.owner, [generateKeyVersion(options)]);
  }

  /** A ring from existing versions (oldest first); exactly one must be active. */
  static fromVersions(owner: string, versions: readonly KeyVersion[]): KeyRing {
    return new KeyRing(owner, versions);
  }

  /** The version new ciphertexts and signatures use. */
  get current(): KeyVersion {
    const active = this.#versions.find((version) => version.status === "active");
    if (active === undefined) throw new CryptoError("crypto_unknown_key", { detail: "no active version" });
    return active;
  }

  /** All versions, oldest first. */
  get versions(): readonly KeyVersion[] {
    return [...this.#versions];
  }

  get(keyId: string): KeyVersion | undefined {
    return this.#byId.get(keyId);
  }

  require(keyId: string): KeyVersion {
    const version = this.#byId.get(keyId);
    if (version === undefined) throw new CryptoError("crypto_unknown_key");
    return version;
  }

  /** Makes a new current version; the previous one becomes retired (still opens and verifies). */
  rotate(options: { now?: Date; keyId?: string } = {}): KeyVersion {
    const next = generateKeyVersion(options);
    if (this.#byId.has(next.keyId))
      throw new CryptoError("crypto_invalid_argument", { detail: "duplicate key id" });
    this.#versions = [
      ...this.#versions.map((version) =>
        version.status === "active" ? Object.freeze({ ...version, status: "retired" as const }) : version,
      ),
      next,
    ];
    this.#byId = new Map(this.#versions.map((version) => [version.keyId, version]));
    return next;
  }

  /** The current signing identity: signer id is the ring's owner. */
  signer(): Signer {
    const current = this.current;
    return { id: this.owner, keyId: current.keyId, privateKey: current.sig.privateKey };
  }

  /** The current encryption target. */
  recipient(): Recipient {
    const current = this.current;
    return { keyId: current.keyId, publicKey: current.kem.publicKey };
  }

  /** Lookup of KEM private keys by key id, for decrypt and decrypt-verify. */
  readonly recipientKeys: RecipientKeyLookup = (keyId) => this.#byId.get(keyId)?.kem.privateKey;

  /** Lookup of this owner's verification keys, for decrypt-verify. */
  readonly signerKeys: SignerKeyLookup = (signerId, keyId) =>
    signerId === this.owner ? this.#byId.get(keyId)?.sig.publicKey : undefined;

  /** Public keys only, as raw bytes in base64: safe to publish and to hand to other processes. */
  exportPublic(): PublicKeyRingJson {
    return {
      format: PUBLIC_KEYS_FORMAT,
      owner: this.owner,
      keys: this.#versions.map((version) => ({
        keyId: version.keyId,
        createdAt: version.createdAt.toISOString(),
        status: version.status,
        kemPublicKey: toBase64(exportRawPublicKey(version.kem.publicKey)),
        sigPublicKey: toBase64(exportRawPublicKey(version.sig.publicKey)),
      })),
    };
  }
}

export const PUBLIC_KEYS_FORMAT = "authority.public-keys.v1";

/**
 * Exported public keys. `kemPublicKey` is the 1184-byte ML-KEM-768 encapsulation key and
 * `sigPublicKey` the 1952-byte ML-DSA-65 public key, both standard base64 (FIPS 203/204
 * encodings, as `@noble/post-quantum` uses them).
 */
export interface PublicKeyJson {
  readonly keyId: string;
  readonly createdAt: string;
  readonly status: KeyStatus;
  readonly kemPublicKey: string;
  readonly sigPublicKey: string;
}

export interface PublicKeyRingJson {
  readonly format: typeof PUBLIC_KEYS_FORMAT;
  readonly owner: string;
  readonly keys: readonly PublicKeyJson[];
}

export interface PublicKeyVersion {
  readonly keyId: string;
  readonly createdAt: Date;
  readonly status: KeyStatus;
  readonly kemPublicKey: KeyObject;
  readonly sigPublicKey: KeyObject;
}

export function parseTimestamp(value: unknown, what: string): Date {
  const date = typeof value === "string" ? new Date(value) : undefined;
  if (date === undefined || Number.isNaN(date.getTime())) {
    throw new CryptoError("crypto_malformed", { detail: `${what} is not a timestamp` });
  }
  return date;
}

/** Another owner's public keys, imported once (KeyObjects kept) for encrypting and verifying. */
export class PublicKeyRing {
  readonly owner: string;
  readonly #versions: readonly PublicKeyVersion[];
  readonly #byId: ReadonlyMap<string, PublicKeyVersion>;

  private constructor(owner: string, versions: readonly PublicKeyVersion[]) {
    this.owner = owner;
    this.#versions = versions;
    this.#byId = new Map(versions.map((version) => [version.keyId, version]));
  }

  /**
   * `verifying`: the ring is only verified with (a sidecar's policy signers): its ML-KEM keys
   * are checked for their length here and imported when first used, which a verifier never
   * does (the same error then). Its ML-DSA keys are imported, and checked, here either way.
   */
  static import(json: unknown, options: { readonly verifying?: boolean } = {}): PublicKeyRing {
    const malformed = (detail: string) => new CryptoError("crypto_malformed", { detail });
    if (!isRecord(json) || json.format !== PUBLIC_KEYS_FORMAT || !Array.isArray(json.keys)) {
      throw malformed("not an authority.public-keys.v1 document");
    }
    assertOwner(json.owner);
    const ids = new Set<string>();
    let active = 0;
    const versions = json.keys.map((entry: unknown): PublicKeyVersion => {
      if (!isRecord(entry)) throw malformed("key entry");
      const { keyId, status, kemPublicKey, sigPublicKey } = entry;
      assertKeyId(keyId);
      if (ids.has(keyId)) throw malformed("duplicate key id");
      ids.add(keyId);
      if (status !== "active" && status !== "retired") throw malformed("status");
      if (status === "active") active++;
      if (typeof kemPublicKey !== "string" || typeof sigPublicKey !== "string") throw malformed("public key");
      const createdAt = parseTimestamp(entry.createdAt, "createdAt");
      if (options.verifying !== true) {
        const kemKey = importPublicKey(KEM_ALGORITHM, kemPublicKey);
        const sigKey = importPublicKey(SIG_ALGORITHM, sigPublicKey);
        return Object.freeze({ keyId, createdAt, status, kemPublicKey: kemKey, sigPublicKey: sigKey });
      }
      // The raw bytes are held, in a buffer of their own: a sidecar holds one ring per signer (one
      // per subject for v1 policies). 10,000 base64 texts were 24 MB of V8 heap that every major
      // collection marked; a slice of Node's shared 8 KiB buffer pool kept its whole slab alive
      // (decision 3132).
      const kemBytes = new Uint8Array(assertPublicKeyLength(KEM_ALGORITHM, kemPublicKey));
      const sigKey = importPublicKey(SIG_ALGORITHM, sigPublicKey);
      let kemKey: KeyObject | undefined;
      return Object.freeze({
        keyId,
        createdAt,
        status,
        get kemPublicKey(): KeyObject {
          kemKey ??= importPublicKey(KEM_ALGORITHM, kemBytes);
          return kemKey;
        },
        sigPublicKey: sigKey,
      });
    });
    if (active !== 1) throw malformed("exactly one key must be active");
    return new PublicKeyRing(json.owner, versions);
  }

  get current(): PublicKeyVersion {
    const active = this.#versions.find((version) => version.status === "active");
    if (active === undefined) throw new CryptoError("crypto_unknown_key", { detail: "no active version" });
    return active;
  }

  get versions(): readonly PublicKeyVersion[] {
    return [...this.#versions];
  }

  get(keyId: string): PublicKeyVersion | undefined {
    return this.#byId.get(keyId);
  }

  recipient(): Recipient {
    const current = this.current;
    return { keyId: current.keyId, publicKey: current.kemPublicKey };
  }

  readonly signerKeys: SignerKeyLookup = (signerId, keyId) =>
    signerId === this.owner ? this.#byId.get(keyId)?.sigPublicKey : undefined;
}

/** One signer lookup over several owners' rings (private or public). */
export function signerKeyLookup(rings: Iterable<KeyRing | PublicKeyRing>): SignerKeyLookup {
  const byOwner = new Map<string, KeyRing | PublicKeyRing>();
  for (const ring of rings) byOwner.set(ring.owner, ring);
  return (signerId, keyId) => byOwner.get(signerId)?.signerKeys(signerId, keyId);
}
