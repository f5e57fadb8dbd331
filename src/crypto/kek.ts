/**
 * Keys at rest: a key ring's private seeds wrapped by a key-encryption key (KEK) with
 * AES-256-GCM, each under associated data naming the owner, key id and purpose, so a
 * wrapped key cannot be moved to another owner, version or use. `loadKek` is the only I/O.
 */

import { createCipheriv, createDecipheriv, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";
import { link, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { isRecord } from "../core/own-property.ts";
import { concatBytes, fromBase64, toBase64, utf8 } from "./bytes.ts";
import { assertKeyId } from "./envelope.ts";
import { CryptoError } from "./errors.ts";
import { assertOwner, KeyRing, type KeyStatus, type KeyVersion, parseTimestamp } from "./key-ring.ts";
import {
  exportPrivateSeed,
  exportRawPublicKey,
  importPrivateSeed,
  KEM_ALGORITHM,
  type KeyAlgorithm,
  publicKeyOf,
  SIG_ALGORITHM,
} from "./keys.ts";

export const KEK_BYTES = 32;
export const WRAPPED_KEY_RING_FORMAT = "authority.wrapped-key-ring.v1";
const WRAP_LABEL = "authority.key-wrap.v1";
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

/**
 * A loaded KEK. The raw bytes never leave this object: only two subkeys derived with
 * HKDF-SHA256 are kept, one to wrap, one to compute the public `id` that tells a wrong
 * KEK apart from a tampered wrapped key.
 */
export class Kek {
  readonly id: string;
  readonly #wrapKey: Buffer;

  private constructor(bytes: Uint8Array) {
    const salt = Buffer.alloc(0);
    this.#wrapKey = Buffer.from(hkdfSync("sha256", bytes, salt, "authority/kek/wrap/v1", 32));
    this.id = Buffer.from(hkdfSync("sha256", bytes, salt, "authority/kek/id/v1", 8)).toString("hex");
  }

  static fromBytes(bytes: Uint8Array): Kek {
    if (!(bytes instanceof Uint8Array) || bytes.length !== KEK_BYTES)
      throw new CryptoError("crypto_kek_invalid");
    return new Kek(bytes);
  }

  static fromBase64(text: string): Kek {
    let bytes: Buffer;
    try {
      bytes = fromBase64(text.trim(), "KEK");
    } catch {
      throw new CryptoError("crypto_kek_invalid");
    }
    const kek = Kek.fromBytes(bytes);
    bytes.fill(0);
    return kek;
  }

  /** A new random KEK and its base64 form (to be stored by the caller as a secret). */
  static generate(): { kek: Kek; base64: string } {
    const bytes = randomBytes(KEK_BYTES);
    const result = { kek: new Kek(bytes), base64: bytes.toString("base64") };
    bytes.fill(0);
    return result;
  }

  wrap(plaintext: Uint8Array, aad: Uint8Array): Buffer {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.#wrapKey, nonce, { authTagLength: TAG_BYTES });
    cipher.setAAD(aad);
    return concatBytes([nonce, cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
  }

  unwrap(wrapped: Uint8Array, aad: Uint8Array): Buffer {
    if (wrapped.length < NONCE_BYTES + TAG_BYTES) throw new CryptoError("crypto_unwrap_failed");
    const nonce = wrapped.subarray(0, NONCE_BYTES);
    const tagStart = wrapped.length - TAG_BYTES;
    const decipher = createDecipheriv("aes-256-gcm", this.#wrapKey, nonce, { authTagLength: TAG_BYTES });
    decipher.setAAD(aad);
    decipher.setAuthTag(wrapped.subarray(tagStart));
    const head = decipher.update(wrapped.subarray(NONCE_BYTES, tagStart));
    try {
      return concatBytes([head, decipher.final()]);
    } catch (cause) {
      throw new CryptoError("crypto_unwrap_failed", { cause });
    } finally {
      // The result is a copy; the unauthenticated head must not outlive this call.
      head.fill(0);
    }
  }

  toJSON(): { id: string } {
    return { id: this.id };
  }
}

export interface LoadKekOptions {
  /** The KEK itself, base64 of 32 bytes (e.g. from AUTHORITY_KEK). Wins over `kekFile`. */
  readonly kek?: string;
  /** A file holding the base64 KEK (e.g. AUTHORITY_KEK_FILE). */
  readonly kekFile?: string;
  /**
   * Create the file (mode 0600, parent directory 0700) with a random KEK when it is absent.
   * Only an explicit init asks for this (`--init-kek`, `authority dev`): a new master key
   * makes everything wrapped under the old one unreadable, so a missing file is otherwise
   * an error that names the path.
   */
  readonly createIfMissing?: boolean;
}

function hasCode(error: unknown, code: string): boolean {
  return typeof error === "object" && error !== null && "code" in error && error.code === code;
}

export async function loadKek(options: LoadKekOptions): Promise<Kek> {
  if (options.kek !== undefined && options.kek !== "") return Kek.fromBase64(options.kek);
  const file = options.kekFile;
  if (file === undefined || file === "") throw new CryptoError("crypto_kek_missing");
  try {
    return Kek.fromBase64(await readFile(file, "utf8"));
  } catch (error) {
    if (!hasCode(error, "ENOENT")) throw error instanceof CryptoError ? error : kekFileError(error);
    if (options.createIfMissing !== true)
      throw new CryptoError("crypto_kek_missing", {
        detail: `no file at ${file}; create one once with --init-kek, or fix the path`,
      });
  }
  return createKekFile(file);
}

/**
 * Creates a new KEK file (the explicit init); an existing file is never replaced
 * (`crypto_kek_exists`). Returns the new KEK.
 */
export async function initKek(file: string): Promise<Kek> {
  if (typeof file !== "string" || file === "") throw new CryptoError("crypto_kek_missing");
  return createKekFile(file, { failIfExists: true });
}

async function createKekFile(file: string, options: { failIfExists?: boolean } = {}): Promise<Kek> {
  const { kek, base64 } = Kek.generate();
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  // Written whole under a private name, then linked into place: link() fails if the file
  // exists, so two processes starting together end up with one KEK, and neither can read the
  // other's file before it is complete (an exclusive create of the file itself could be read empty).
  const draft = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    await writeFile(draft, `${base64}\n`, { mode: 0o600, flag: "wx" });
    await link(draft, file);
    return kek;
  } catch (error) {
    if (hasCode(error, "EEXIST")) {
      if (options.failIfExists === true) throw new CryptoError("crypto_kek_exists", { detail: file });
      return Kek.fromBase64(await readFile(file, "utf8"));
    }
    throw kekFileError(error);
  } finally {
    await rm(draft, { force: true });
  }
}

function kekFileError(cause: unknown): CryptoError {
  return new CryptoError("crypto_kek_missing", { detail: "KEK file cannot be read or written", cause });
}

/** One wrapped version. Public keys are stored in clear and checked against the unwrapped seeds. */
export interface WrappedKeyVersion {
  readonly keyId: string;
  readonly createdAt: string;
  readonly status: KeyStatus;
  readonly kemPublicKey: string;
  readonly sigPublicKey: string;
  /** base64(nonce(12) || AES-256-GCM(ML-KEM-768 seed, 64 bytes) || tag(16)) */
  readonly kemPrivateKey: string;
  /** base64(nonce(12) || AES-256-GCM(ML-DSA-65 seed, 32 bytes) || tag(16)) */
  readonly sigPrivateKey: string;
}

export interface WrappedKeyRing {
  readonly format: typeof WRAPPED_KEY_RING_FORMAT;
  readonly owner: string;
  readonly kekId: string;
  readonly versions: readonly WrappedKeyVersion[];
}

type Purpose = "kem" | "sig";

/**
 * AAD = UTF-8 of the JSON array [label, owner, key id, purpose, created at, status]:
 * JSON quoting keeps the fields unambiguous whatever characters the owner contains.
 */
function wrapAad(
  owner: string,
  keyId: string,
  purpose: Purpose,
  createdAt: string,
  status: KeyStatus,
): Uint8Array {
  return utf8(JSON.stringify([WRAP_LABEL, owner, keyId, purpose, createdAt, status]));
}

export function wrapKeyRing(ring: KeyRing, kek: Kek): WrappedKeyRing {
  return {
    format: WRAPPED_KEY_RING_FORMAT,
    owner: ring.owner,
    kekId: kek.id,
    versions: ring.versions.map((version) => {
      const createdAt = version.createdAt.toISOString();
      const wrapSeed = (purpose: Purpose, seed: Uint8Array): string => {
        const wrapped = kek.wrap(
          seed,
          wrapAad(ring.owner, version.keyId, purpose, createdAt, version.status),
        );
        seed.fill(0);
        return toBase64(wrapped);
      };
      return {
        keyId: version.keyId,
        createdAt,
        status: version.status,
        kemPublicKey: toBase64(exportRawPublicKey(version.kem.publicKey)),
        sigPublicKey: toBase64(exportRawPublicKey(version.sig.publicKey)),
        kemPrivateKey: wrapSeed("kem", exportPrivateSeed(version.kem.privateKey)),
        sigPrivateKey: wrapSeed("sig", exportPrivateSeed(version.sig.privateKey)),
      };
    }),
  };
}

function unwrapPair(
  kek: Kek,
  algorithm: KeyAlgorithm,
  wrapped: unknown,
  publicKey: unknown,
  aad: Uint8Array,
): KeyVersion["kem"] {
  if (typeof wrapped !== "string" || typeof publicKey !== "string") {
    throw new CryptoError("crypto_malformed", { detail: "wrapped key" });
  }
  const seed = kek.unwrap(fromBase64(wrapped, "wrapped key"), aad);
  try {
    const privateKey = importPrivateSeed(algorithm, seed);
    const derived = publicKeyOf(privateKey);
    // The stored public key is not under the tag: it must equal the one the seed gives.
    if (!timingSafeEqualBytes(exportRawPublicKey(derived), fromBase64(publicKey, "public key"))) {
      throw new CryptoError("crypto_unwrap_failed", { detail: "public key does not match" });
    }
    return { publicKey: derived, privateKey };
  } finally {
    seed.fill(0);
  }
}

function timingSafeEqualBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Restores a ring wrapped by `wrapKeyRing`; accepts the parsed JSON as stored. */
export function unwrapKeyRing(wrapped: unknown, kek: Kek): KeyRing {
  const malformed = (detail: string) => new CryptoError("crypto_malformed", { detail });
  if (!isRecord(wrapped) || wrapped.format !== WRAPPED_KEY_RING_FORMAT || !Array.isArray(wrapped.versions)) {
    throw malformed(`not an ${WRAPPED_KEY_RING_FORMAT} document`);
  }
  const { owner } = wrapped;
  assertOwner(owner);
  if (wrapped.kekId !== kek.id) throw new CryptoError("crypto_wrong_kek");
  const versions = wrapped.versions.map((entry: unknown): KeyVersion => {
    if (!isRecord(entry)) throw malformed("version entry");
    const { keyId, createdAt, status } = entry;
    assertKeyId(keyId);
    if (typeof createdAt !== "string") throw malformed("createdAt");
    if (status !== "active" && status !== "retired") throw malformed("status");
    const aad = (purpose: Purpose) => wrapAad(owner, keyId, purpose, createdAt, status);
    return {
      keyId,
      createdAt: parseTimestamp(createdAt, "createdAt"),
      status,
      kem: unwrapPair(kek, KEM_ALGORITHM, entry.kemPrivateKey, entry.kemPublicKey, aad("kem")),
      sig: unwrapPair(kek, SIG_ALGORITHM, entry.sigPrivateKey, entry.sigPublicKey, aad("sig")),
    };
  });
  try {
    return KeyRing.fromVersions(owner, versions);
  } catch (cause) {
    throw malformed(cause instanceof CryptoError ? cause.message : "key ring");
  }
}
