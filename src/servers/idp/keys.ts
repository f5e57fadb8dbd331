import { createPrivateKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { chmod, mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { calculateJwkThumbprint, type JSONWebKeySet, type JWK } from "jose";
import { IdpConfigError } from "./errors.ts";

/**
 * The IdP's ES256 signing keys. One key signs. The next key is published before it signs,
 * so verifiers that fetched the JWKS since the last rotation already hold it when a
 * rotation makes it current (no window in which their refetch cooldown rejects new
 * tokens). After a rotation the previous public key stays published for a grace period
 * so tokens it signed keep verifying, then drops out.
 *
 * Persistence (optional `keysDir`): `signing-keys.json` holds the private JWKs in plain
 * JSON, protected only by file mode 0600 in a 0700 directory. They are not wrapped under
 * a key-encryption key: this is a development IdP, and a production deployment uses its
 * own OIDC issuer instead.
 */

export const SIGNING_ALG = "ES256";
const KEYS_FILE = "signing-keys.json";

interface KeyRecord {
  readonly kid: string;
  readonly privateJwk: JWK;
  readonly createdAt: number;
  /** Set when the key starts signing; unset for the pre-published next key. */
  activatedAt?: number;
  retiredAt?: number;
}

interface LoadedKey extends KeyRecord {
  readonly privateKey: KeyObject;
  readonly publicJwk: JWK;
}

export interface SigningKey {
  readonly kid: string;
  readonly privateKey: KeyObject;
}

export interface KeyRing {
  /** The key that signs new tokens. */
  current(): SigningKey;
  /** Public keys of the current key and of retired keys still within the grace period. */
  jwks(): JSONWebKeySet;
  /** Makes a new current key; returns its kid. */
  rotate(): Promise<string>;
  readonly graceMs: number;
}

export interface KeyRingOptions {
  readonly graceMs: number;
  readonly keysDir?: string;
  readonly now: () => Date;
}

function publicPart(jwk: JWK, kid: string): JWK {
  const { kty, crv, x, y } = jwk;
  return { kty, crv, x, y, kid, alg: SIGNING_ALG, use: "sig" };
}

async function loadRecord(record: KeyRecord): Promise<LoadedKey> {
  const jwk = record.privateJwk;
  if (jwk.kty !== "EC" || jwk.crv !== "P-256" || typeof jwk.d !== "string") {
    throw new IdpConfigError(`signing key ${record.kid} is not a P-256 private key`);
  }
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: { ...jwk }, format: "jwk" });
  } catch {
    throw new IdpConfigError(`signing key ${record.kid} cannot be imported`);
  }
  const publicJwk = publicPart(jwk, record.kid);
  if ((await calculateJwkThumbprint(publicJwk)) !== record.kid) {
    throw new IdpConfigError(`signing key ${record.kid} does not match its key id`);
  }
  return { ...record, privateKey, publicJwk };
}

async function generate(now: number): Promise<LoadedKey> {
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const privateJwk = privateKey.export({ format: "jwk" }) as JWK;
  // The kid is the RFC 7638 thumbprint: stable, unique, and says nothing else.
  const kid = await calculateJwkThumbprint(publicPart(privateJwk, ""));
  return { kid, privateJwk, createdAt: now, privateKey, publicJwk: publicPart(privateJwk, kid) };
}

function isKeyRecord(value: unknown): value is KeyRecord {
  if (typeof value !== "object" || value === null) return false;
  const r = value as Record<string, unknown>;
  return (
    typeof r.kid === "string" &&
    typeof r.privateJwk === "object" &&
    r.privateJwk !== null &&
    typeof r.createdAt === "number" &&
    (r.activatedAt === undefined || typeof r.activatedAt === "number") &&
    (r.retiredAt === undefined || typeof r.retiredAt === "number")
  );
}

async function readKeysFile(dir: string): Promise<KeyRecord[] | undefined> {
  const path = join(dir, KEYS_FILE);
  let text: string;
  try {
    const info = await stat(path);
    if ((info.mode & 0o077) !== 0) {
      throw new IdpConfigError(`${path} is readable by group or others; chmod 600 it`);
    }
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new IdpConfigError(`${path} is not valid JSON`);
  }
  const keys = (parsed as { keys?: unknown }).keys;
  if (!Array.isArray(keys) || !keys.every(isKeyRecord)) {
    throw new IdpConfigError(`${path} does not hold signing key records`);
  }
  return keys;
}

async function writeKeysFile(dir: string, keys: readonly LoadedKey[]): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  const records: KeyRecord[] = keys.map(({ kid, privateJwk, createdAt, activatedAt, retiredAt }) => ({
    kid,
    privateJwk,
    createdAt,
    ...(activatedAt === undefined ? {} : { activatedAt }),
    ...(retiredAt === undefined ? {} : { retiredAt }),
  }));
  const path = join(dir, KEYS_FILE);
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify({ version: 1, keys: records }, null, 2)}\n`, { mode: 0o600 });
  await rename(temp, path);
}

export async function createKeyRing(options: KeyRingOptions): Promise<KeyRing> {
  const { graceMs, keysDir, now } = options;
  let keys: LoadedKey[] = [];
  if (keysDir !== undefined) {
    const records = await readKeysFile(keysDir);
    if (records !== undefined) keys = await Promise.all(records.map(loadRecord));
  }

  const live = (key: LoadedKey, at: number) => key.retiredAt === undefined || at < key.retiredAt + graceMs;
  const prune = () => {
    const at = now().getTime();
    keys = keys.filter((key) => live(key, at));
  };
  const persist = async () => {
    if (keysDir !== undefined) await writeKeysFile(keysDir, keys);
  };
  const currentKey = (): LoadedKey | undefined =>
    keys.find((key) => key.activatedAt !== undefined && key.retiredAt === undefined);
  const nextKey = (): LoadedKey | undefined => keys.find((key) => key.activatedAt === undefined);

  /** Retires the current key, promotes the next one (or a fresh one), and pre-publishes another. */
  const promote = async (at: number) => {
    for (const key of keys)
      if (key.activatedAt !== undefined && key.retiredAt === undefined) key.retiredAt = at;
    const next = nextKey() ?? (await generate(at));
    if (!keys.includes(next)) keys.push(next);
    next.activatedAt = at;
    keys.push(await generate(at));
    prune();
  };

  prune();
  if (currentKey() === undefined) {
    await promote(now().getTime());
    await persist();
  } else if (nextKey() === undefined) {
    keys.push(await generate(now().getTime()));
    await persist();
  }

  const current = (): SigningKey => {
    const key = currentKey();
    if (key === undefined) throw new IdpConfigError("no current signing key");
    return { kid: key.kid, privateKey: key.privateKey };
  };

  return {
    graceMs,
    current,
    jwks(): JSONWebKeySet {
      const at = now().getTime();
      return { keys: keys.filter((key) => live(key, at)).map((key) => ({ ...key.publicJwk })) };
    },
    async rotate(): Promise<string> {
      await promote(now().getTime());
      await persist();
      return current().kid;
    },
  };
}
