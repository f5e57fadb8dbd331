/**
 * The authority service's own ES256 key for workload tokens. With a key-ring source the
 * private key is kept in the store sealed (ML-KEM) to the ring `workload-token-signing`,
 * written with `store.create` so every replica signs and verifies with the same key.
 * Without one (tests, single-process development) it lives only in this process.
 */
import { createPrivateKey, generateKeyPairSync, type JsonWebKey, type KeyObject } from "node:crypto";
import { calculateJwkThumbprint, type JSONWebKeySet, type JWK } from "jose";
import { isSecretBox, type SecretKeys } from "../admin/secret-box.ts";
import { decrypt, encrypt } from "../crypto/index.ts";
import { bindingCollections } from "../store/binding-model.ts";
import type { Store } from "../store/store.ts";

export const TOKEN_SIGNING_ALG = "ES256";
export const TOKEN_KEY_RING_OWNER = "workload-token-signing";
const KEY_ID = "signing";
/** What a secret box seals the private key under: it opens as nothing else. */
const TOKEN_KEY_AAD = "authority/workload-token-signing-key/v1";

export interface TokenSigningKey {
  readonly kid: string;
  readonly privateKey: KeyObject;
  readonly publicJwk: JWK;
}

export interface TokenKeys {
  current(): Promise<TokenSigningKey>;
  jwks(): Promise<JSONWebKeySet>;
}

interface StoredTokenKey {
  readonly kid: string;
  readonly public_jwk: JWK;
  /** The private JWK, sealed to the token key ring; never stored in the clear. */
  readonly sealed_private_jwk: string;
  readonly created_at: string;
}

export class TokenKeyError extends Error {
  readonly code = "token_keys_unavailable";
  readonly authorityCode = "upstream_unavailable" as const;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TokenKeyError";
  }
}

function publicPart(jwk: JsonWebKey, kid: string): JWK {
  return { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y, kid, alg: TOKEN_SIGNING_ALG, use: "sig" };
}

async function generate(): Promise<{ key: TokenSigningKey; privateJwk: JsonWebKey }> {
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const privateJwk = privateKey.export({ format: "jwk" });
  const kid = await calculateJwkThumbprint({
    kty: "EC",
    crv: privateJwk.crv,
    x: privateJwk.x,
    y: privateJwk.y,
  });
  return { key: { kid, privateKey, publicJwk: publicPart(privateJwk, kid) }, privateJwk };
}

export interface TokenKeysOptions {
  readonly store: Store;
  /** Seals the private key at rest; absent: a per-process key. */
  readonly keyRings?: SecretKeys;
  readonly now?: () => Date;
}

export function createTokenKeys(options: TokenKeysOptions): TokenKeys {
  if (options?.store === undefined) throw new TypeError("store is required");
  const { store, keyRings } = options;
  const now = options.now ?? (() => new Date());
  let loading: Promise<TokenSigningKey> | undefined;

  async function fromStored(stored: StoredTokenKey): Promise<TokenSigningKey> {
    if (keyRings === undefined) throw new TokenKeyError("no key rings to open the stored token key");
    const text = isSecretBox(keyRings)
      ? await keyRings.open(TOKEN_KEY_AAD, stored.sealed_private_jwk)
      : Buffer.from(
          decrypt(await keyRings.keyRing(TOKEN_KEY_RING_OWNER), stored.sealed_private_jwk),
        ).toString("utf8");
    const jwk = JSON.parse(text) as JsonWebKey;
    const privateKey = createPrivateKey({ key: jwk, format: "jwk" });
    return { kid: stored.kid, privateKey, publicJwk: stored.public_jwk };
  }

  async function load(): Promise<TokenSigningKey> {
    if (keyRings === undefined) return (await generate()).key;
    const existing = await store.get<StoredTokenKey>(bindingCollections.tokenKeys, KEY_ID);
    if (existing !== undefined) return fromStored(existing);
    const { key, privateJwk } = await generate();
    const sealed = isSecretBox(keyRings)
      ? await keyRings.seal(TOKEN_KEY_AAD, JSON.stringify(privateJwk))
      : encrypt(await keyRings.keyRing(TOKEN_KEY_RING_OWNER), JSON.stringify(privateJwk));
    const record: StoredTokenKey = {
      kid: key.kid,
      public_jwk: key.publicJwk,
      sealed_private_jwk: sealed,
      created_at: now().toISOString(),
    };
    if (await store.create(bindingCollections.tokenKeys, KEY_ID, record)) return key;
    // Another replica created it first: everyone uses that one.
    const winner = await store.get<StoredTokenKey>(bindingCollections.tokenKeys, KEY_ID);
    if (winner === undefined) throw new TokenKeyError("token key vanished after a concurrent create");
    return fromStored(winner);
  }

  function current(): Promise<TokenSigningKey> {
    if (loading === undefined) {
      const pending = load().catch((error: unknown) => {
        // Not remembered: the next call tries again (store or keys may come back).
        loading = undefined;
        throw error instanceof TokenKeyError
          ? error
          : new TokenKeyError("workload token keys are unavailable", { cause: error });
      });
      loading = pending;
    }
    return loading;
  }

  return {
    current,
    async jwks() {
      const key = await current();
      return { keys: [key.publicJwk] };
    },
  };
}
