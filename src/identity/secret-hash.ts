import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";

/**
 * Password and client-secret hashes (scrypt, RFC 7914), stored as
 * `scrypt$<log2 N>$<r>$<p>$<salt b64url>$<hash b64url>` so the cost can rise later
 * without invalidating stored hashes. Comparison is constant-time.
 */

export interface ScryptCost {
  readonly log2N: number;
  readonly r: number;
  readonly p: number;
}

export const defaultScryptCost: ScryptCost = { log2N: 14, r: 8, p: 1 };

const KEY_LENGTH = 32;
const SALT_LENGTH = 16;
const HASH_PATTERN = /^scrypt\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9_-]{16,})\$([A-Za-z0-9_-]{32,})$/;

export class SecretHashError extends Error {
  readonly code = "secret_hash_invalid";

  constructor(message: string) {
    super(message);
    this.name = "SecretHashError";
  }
}

function derive(secret: string, salt: Buffer, cost: ScryptCost, keyLength: number): Promise<Buffer> {
  const N = 2 ** cost.log2N;
  return new Promise((resolve, reject) => {
    scrypt(
      secret.normalize("NFC"),
      salt,
      keyLength,
      { N, r: cost.r, p: cost.p, maxmem: 256 * N * cost.r },
      (error, key) => (error ? reject(error) : resolve(key)),
    );
  });
}

function checkCost(cost: ScryptCost): void {
  const ok =
    Number.isInteger(cost.log2N) &&
    cost.log2N >= 10 &&
    cost.log2N <= 20 &&
    Number.isInteger(cost.r) &&
    cost.r >= 1 &&
    cost.r <= 32 &&
    Number.isInteger(cost.p) &&
    cost.p >= 1 &&
    cost.p <= 16;
  if (!ok) throw new SecretHashError("scrypt cost parameters are out of range");
}

export async function hashSecret(secret: string, cost: ScryptCost = defaultScryptCost): Promise<string> {
  checkCost(cost);
  const salt = randomBytes(SALT_LENGTH);
  const key = await derive(secret, salt, cost, KEY_LENGTH);
  return `scrypt$${cost.log2N}$${cost.r}$${cost.p}$${salt.toString("base64url")}$${key.toString("base64url")}`;
}

interface ParsedHash {
  readonly cost: ScryptCost;
  readonly salt: Buffer;
  readonly key: Buffer;
}

function parseHash(stored: string): ParsedHash {
  const match = HASH_PATTERN.exec(stored);
  if (match === null) throw new SecretHashError("not a scrypt secret hash");
  const [, log2N, r, p, salt, key] = match;
  const cost = { log2N: Number(log2N), r: Number(r), p: Number(p) };
  checkCost(cost);
  return { cost, salt: Buffer.from(salt ?? "", "base64url"), key: Buffer.from(key ?? "", "base64url") };
}

/** Validates a stored hash's shape without deriving anything. */
export function isSecretHash(stored: string): boolean {
  try {
    parseHash(stored);
    return true;
  } catch {
    return false;
  }
}

export async function verifySecret(secret: string, stored: string): Promise<boolean> {
  const { cost, salt, key } = parseHash(stored);
  const candidate = await derive(secret, salt, cost, key.length);
  return timingSafeEqual(candidate, key);
}

let dummyHash: Promise<string> | undefined;

/**
 * Spends the same work as a real check and returns false: used for unknown usernames or
 * clients so response time does not reveal which ones exist.
 */
export async function verifyAgainstDummy(secret: string): Promise<false> {
  dummyHash ??= hashSecret("dummy-secret-for-timing");
  await verifySecret(secret, await dummyHash);
  return false;
}
