/**
 * Owners (partners, subject credential sets, the platform service identity) and their
 * key rings, persisted in the Store with every private key wrapped under the KEK and the
 * partner credentials kept only as digests. Unwrapped rings are cached in memory: a ring
 * is imported once, not on every call (key import costs more than the crypto itself).
 *
 * Store layout:
 *   crypto_owners/<owner id>          authority.crypto-owner.v1 (kind, digests, wrapped ring)
 *   crypto_access_keys/<digest>       { ownerId } — finds the owner from its access key
 *   crypto_meta/credential-pepper     the HMAC key of the digests, wrapped under the KEK
 */

import { createSecretKey, type KeyObject, randomBytes } from "node:crypto";
import { LRUCache } from "lru-cache";
import {
  type CredentialDigests,
  digestCredentials,
  digestsMatch,
  generateCredentials,
  isCredentialValue,
  MAX_PRESENTED_LENGTH,
  type PartnerCredentials,
  PEPPER_BYTES,
} from "../../clients/crypto-service/credentials.ts";
import { CryptoServiceError } from "../../clients/crypto-service/reasons.ts";
import { OWNER_ID } from "../../clients/crypto-service/wire.ts";
import { isRecord } from "../../core/own-property.ts";
import { type Kek, KeyRing, unwrapKeyRing, type WrappedKeyRing, wrapKeyRing } from "../../crypto/index.ts";
import type { Store } from "../../store/store.ts";

export const OWNER_KINDS = ["partner", "subject", "service"] as const;
export type OwnerKind = (typeof OWNER_KINDS)[number];

const SUBJECT = /^[\x21-\x7E]{1,256}$/;

const OWNERS = "crypto_owners";
const ACCESS_KEYS = "crypto_access_keys";
const META = "crypto_meta";
const PEPPER_ID = "credential-pepper";
const PEPPER_AAD = Buffer.from("authority.crypto.credential-pepper.v1", "utf8");
export const OWNER_FORMAT = "authority.crypto-owner.v1";

interface StoredOwner {
  readonly format: typeof OWNER_FORMAT;
  readonly id: string;
  readonly kind: OwnerKind;
  readonly createdAt: string;
  readonly rotatedAt: string | null;
  readonly allowedSubjects: readonly string[] | null;
  /** The service owner that provisioned this owner and alone may act for it (absent in older records). */
  readonly delegate?: string | null;
  readonly credentials: CredentialDigests;
  readonly ring: WrappedKeyRing;
}

interface StoredPepper {
  readonly kekId: string;
  readonly wrapped: string;
}

/** An owner as loaded: its ring unwrapped, ready to use. */
export interface Owner {
  readonly id: string;
  readonly kind: OwnerKind;
  readonly createdAt: string;
  readonly rotatedAt: string | undefined;
  /** When set, only tokens with one of these subjects may use the owner's credentials. */
  readonly allowedSubjects: readonly string[] | undefined;
  /**
   * The service owner that provisioned this owner through the delegation routes and alone may
   * act for it (`act_as`); nobody holds this owner's own credentials.
   */
  readonly delegate: string | undefined;
  readonly credentials: CredentialDigests;
  readonly ring: KeyRing;
}

export interface ProvisionOwnerInput {
  readonly id: string;
  readonly kind?: OwnerKind;
  readonly allowedSubjects?: readonly string[];
  /** The service owner allowed to act for this one (delegation routes only). */
  readonly delegate?: string;
  /** Fixed credentials (development seeding); random ones are generated when absent. */
  readonly credentials?: PartnerCredentials;
}

export interface OwnerRegistryOptions {
  readonly store: Store;
  readonly kek: Kek;
  readonly now: () => Date;
  /** How long a cached owner is trusted before it is re-read (other replicas may rotate). */
  readonly cacheTtlMs?: number;
  readonly maxCachedOwners?: number;
}

/** What ensureService did (logged; never the credentials). */
export type EnsuredService = "provisioned" | "unchanged" | "updated";

export interface EnsureServiceInput {
  readonly id: string;
  readonly allowedSubjects: readonly string[];
  readonly credentials: PartnerCredentials;
}

export interface OwnerRegistry {
  /**
   * A service owner as the operator's mounted secret says (decision 2601): provisioned when
   * absent; its credentials and allowed subjects replaced when they differ (keys kept). An owner
   * of that id that is not an undelegated service owner is `owner_exists`, never taken over.
   */
  ensureService(input: EnsureServiceInput): Promise<EnsuredService>;
  provision(input: ProvisionOwnerInput): Promise<{ owner: Owner; credentials: PartnerCredentials }>;
  rotate(id: string): Promise<{ owner: Owner; previousKeyId: string }>;
  get(id: string): Promise<Owner | undefined>;
  /** Re-reads an owner from the store (at most once a second per owner), e.g. on an unknown key id. */
  refresh(id: string): Promise<Owner | undefined>;
  /** The cached owner, without I/O: for synchronous signer lookups. */
  cached(id: string): Owner | undefined;
  /** The owner these credentials belong to; `invalid_credentials` otherwise. */
  authenticate(presented: PartnerCredentials): Promise<Owner>;
  /** Deletes an owner and its keys (a retired subject); its ciphertexts no longer open. */
  retire(id: string): Promise<void>;
}

export function assertOwnerId(id: unknown): asserts id is string {
  if (typeof id !== "string" || !OWNER_ID.test(id)) {
    throw new CryptoServiceError("invalid_request", {
      message: "Owner id must be 1-128 characters of [A-Za-z0-9._:@~-], starting alphanumeric.",
      fields: ["id"],
    });
  }
}

interface CheckedInput {
  readonly id: string;
  readonly kind: OwnerKind;
  readonly allowedSubjects: readonly string[] | undefined;
  readonly delegate: string | undefined;
  readonly credentials: PartnerCredentials | undefined;
}

function checkInput(input: ProvisionOwnerInput): CheckedInput {
  if (!isRecord(input))
    throw new CryptoServiceError("invalid_request", { message: "Owner input must be an object." });
  assertOwnerId(input.id);
  const kind = input.kind ?? "partner";
  if (!OWNER_KINDS.includes(kind)) {
    throw new CryptoServiceError("invalid_request", {
      message: "Owner kind must be partner, subject or service.",
      fields: ["kind"],
    });
  }
  const subjects = input.allowedSubjects;
  if (
    subjects !== undefined &&
    (!Array.isArray(subjects) || !subjects.every((s) => typeof s === "string" && SUBJECT.test(s)))
  ) {
    throw new CryptoServiceError("invalid_request", {
      message: "allowed_subjects must be an array of 1-256 visible ASCII characters each.",
      fields: ["allowed_subjects"],
    });
  }
  const credentials = input.credentials;
  if (
    credentials !== undefined &&
    !(
      isCredentialValue(credentials.apiKey) &&
      isCredentialValue(credentials.accessKey) &&
      isCredentialValue(credentials.secretKey)
    )
  ) {
    throw new CryptoServiceError("invalid_request", {
      message: "Fixed credentials must each be 16-256 visible ASCII characters.",
      fields: ["credentials"],
    });
  }
  if (input.delegate !== undefined) assertOwnerId(input.delegate);
  return {
    id: input.id,
    kind,
    allowedSubjects: subjects === undefined || subjects.length === 0 ? undefined : [...new Set(subjects)],
    delegate: input.delegate,
    credentials,
  };
}

/** Loads the pepper, creating it on first start; a second process racing us gets the same one. */
async function loadPepper(store: Store, kek: Kek): Promise<KeyObject> {
  let stored = await store.get<StoredPepper>(META, PEPPER_ID);
  if (stored === undefined) {
    const pepper = randomBytes(PEPPER_BYTES);
    const candidate: StoredPepper = {
      kekId: kek.id,
      wrapped: kek.wrap(pepper, PEPPER_AAD).toString("base64"),
    };
    if (await store.create(META, PEPPER_ID, candidate)) {
      const key = createSecretKey(pepper);
      pepper.fill(0);
      return key;
    }
    stored = await store.get<StoredPepper>(META, PEPPER_ID);
    if (stored === undefined) throw new Error("credential pepper vanished while being created");
  }
  if (!isRecord(stored) || typeof stored.wrapped !== "string")
    throw new Error("credential pepper record is malformed");
  // Kek.unwrap fails (crypto_unwrap_failed) under a different KEK: the service refuses to start.
  const bytes = kek.unwrap(Buffer.from(stored.wrapped, "base64"), PEPPER_AAD);
  const key = createSecretKey(bytes);
  bytes.fill(0);
  return key;
}

function toOwner(stored: StoredOwner, kek: Kek): Owner {
  if (!isRecord(stored) || stored.format !== OWNER_FORMAT)
    throw new Error("stored owner record is malformed");
  return {
    id: stored.id,
    kind: stored.kind,
    createdAt: stored.createdAt,
    rotatedAt: stored.rotatedAt ?? undefined,
    allowedSubjects: stored.allowedSubjects ?? undefined,
    delegate: stored.delegate ?? undefined,
    credentials: stored.credentials,
    ring: unwrapKeyRing(stored.ring, kek),
  };
}

function toStored(owner: Owner, kek: Kek): StoredOwner {
  return {
    format: OWNER_FORMAT,
    id: owner.id,
    kind: owner.kind,
    createdAt: owner.createdAt,
    rotatedAt: owner.rotatedAt ?? null,
    allowedSubjects: owner.allowedSubjects ?? null,
    delegate: owner.delegate ?? null,
    credentials: owner.credentials,
    ring: wrapKeyRing(owner.ring, kek),
  };
}

export async function createOwnerRegistry(options: OwnerRegistryOptions): Promise<OwnerRegistry> {
  const { store, kek, now } = options;
  const pepper = await loadPepper(store, kek);
  const ttl = options.cacheTtlMs ?? 30_000;
  const owners = new LRUCache<string, Owner>({
    max: options.maxCachedOwners ?? 10_000,
    ttl,
    ttlAutopurge: false,
  });
  const accessIndex = new LRUCache<string, string>({ max: options.maxCachedOwners ?? 10_000 });
  // Hand-written, not lru-cache fetch(): an unknown owner (undefined) must not be cached and the
  // owners cache is also filled by rotations and the access-key index (decision 1801).
  const loading = new Map<string, Promise<Owner | undefined>>();
  const lastRefresh = new Map<string, number>();
  const locks = new Map<string, Promise<unknown>>();
  // A digest no real access key has: unknown access keys still cost one full comparison.
  const dummy = digestCredentials(pepper, generateCredentials());

  function load(id: string): Promise<Owner | undefined> {
    let pending = loading.get(id);
    if (pending === undefined) {
      pending = (async () => {
        const stored = await store.get<StoredOwner>(OWNERS, id);
        if (stored === undefined) return undefined;
        const owner = toOwner(stored, kek);
        owners.set(id, owner);
        return owner;
      })().finally(() => loading.delete(id));
      loading.set(id, pending);
    }
    return pending;
  }

  /** Serializes rotations of one owner within this process. */
  async function withLock<T>(id: string, task: () => Promise<T>): Promise<T> {
    const previous = locks.get(id) ?? Promise.resolve();
    const run = previous.then(task, task);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    locks.set(id, settled);
    try {
      return await run;
    } finally {
      if (locks.get(id) === settled) locks.delete(id);
    }
  }

  const registry: OwnerRegistry = {
    ensureService(input) {
      const checked = checkInput({ ...input, kind: "service" });
      const credentials = checked.credentials;
      if (credentials === undefined) {
        throw new CryptoServiceError("invalid_request", { message: "Credentials are required." });
      }
      return withLock(checked.id, async () => {
        const stored = await store.get<StoredOwner>(OWNERS, checked.id);
        if (stored === undefined) {
          await registry.provision({
            id: checked.id,
            kind: "service",
            allowedSubjects: checked.allowedSubjects ?? [],
            credentials,
          });
          return "provisioned";
        }
        const current = toOwner(stored, kek);
        if (current.kind !== "service" || current.delegate !== undefined) {
          throw new CryptoServiceError("owner_exists", {
            message: "An owner of this id exists and is not an undelegated service owner.",
          });
        }
        const digests = digestCredentials(pepper, credentials);
        const sameCredentials = digestsMatch(current.credentials, digests);
        const subjects = checked.allowedSubjects;
        const sameSubjects =
          JSON.stringify([...(current.allowedSubjects ?? [])].sort()) ===
          JSON.stringify([...(subjects ?? [])].sort());
        if (sameCredentials && sameSubjects) return "unchanged";
        // The new access key's index entry is claimed first: a key another owner uses is refused.
        const newAccessKey = digests.accessKey !== current.credentials.accessKey;
        if (newAccessKey && !(await store.create(ACCESS_KEYS, digests.accessKey, { ownerId: checked.id }))) {
          throw new CryptoServiceError("owner_exists", { message: "These credentials are already in use." });
        }
        const updated: Owner = { ...current, allowedSubjects: subjects, credentials: digests };
        await store.put(OWNERS, checked.id, toStored(updated, kek));
        owners.set(checked.id, updated);
        if (newAccessKey) {
          await store.delete(ACCESS_KEYS, current.credentials.accessKey);
          accessIndex.delete(current.credentials.accessKey);
          accessIndex.set(digests.accessKey, checked.id);
        }
        return "updated";
      });
    },

    async provision(input) {
      const { id, kind, allowedSubjects, delegate, credentials: fixed } = checkInput(input);
      const credentials = fixed ?? generateCredentials();
      const digests = digestCredentials(pepper, credentials);
      const createdAt = now().toISOString();
      const owner: Owner = {
        id,
        kind,
        createdAt,
        rotatedAt: undefined,
        allowedSubjects,
        delegate,
        credentials: digests,
        ring: KeyRing.generate({ owner: id, now: now() }),
      };
      // The access-key index is claimed first, so a failed owner write can be undone.
      if (!(await store.create(ACCESS_KEYS, digests.accessKey, { ownerId: id }))) {
        throw new CryptoServiceError("owner_exists", { message: "These credentials are already in use." });
      }
      if (!(await store.create(OWNERS, id, toStored(owner, kek)))) {
        await store.delete(ACCESS_KEYS, digests.accessKey);
        throw new CryptoServiceError("owner_exists");
      }
      owners.set(id, owner);
      accessIndex.set(digests.accessKey, id);
      return { owner, credentials };
    },

    rotate(id) {
      assertOwnerId(id);
      return withLock(id, async () => {
        const stored = await store.get<StoredOwner>(OWNERS, id);
        if (stored === undefined) throw new CryptoServiceError("owner_not_found");
        const current = toOwner(stored, kek);
        const previousKeyId = current.ring.current.keyId;
        current.ring.rotate({ now: now() });
        const rotated: Owner = { ...current, rotatedAt: now().toISOString() };
        await store.put(OWNERS, id, toStored(rotated, kek));
        owners.set(id, rotated);
        return { owner: rotated, previousKeyId };
      });
    },

    async get(id) {
      if (!OWNER_ID.test(id)) return undefined;
      return owners.get(id) ?? load(id);
    },

    async refresh(id) {
      if (!OWNER_ID.test(id)) return undefined;
      const at = Date.now();
      const last = lastRefresh.get(id);
      if (last !== undefined && at - last < 1000) return owners.get(id) ?? load(id);
      lastRefresh.set(id, at);
      if (lastRefresh.size > 10_000) lastRefresh.clear();
      owners.delete(id);
      return load(id);
    },

    cached(id) {
      return owners.get(id);
    },

    retire(id) {
      assertOwnerId(id);
      return withLock(id, async () => {
        const stored = await store.get<StoredOwner>(OWNERS, id);
        if (stored === undefined) throw new CryptoServiceError("owner_not_found");
        await store.delete(OWNERS, id);
        if (isRecord(stored.credentials) && typeof stored.credentials.accessKey === "string") {
          await store.delete(ACCESS_KEYS, stored.credentials.accessKey);
          accessIndex.delete(stored.credentials.accessKey);
        }
        owners.delete(id);
      });
    },

    async authenticate(presented) {
      const values = [presented.apiKey, presented.accessKey, presented.secretKey];
      if (
        !values.every(
          (value) => typeof value === "string" && value.length > 0 && value.length <= MAX_PRESENTED_LENGTH,
        )
      ) {
        throw new CryptoServiceError("invalid_credentials");
      }
      const digests = digestCredentials(pepper, presented);
      let ownerId = accessIndex.get(digests.accessKey);
      if (ownerId === undefined) {
        const entry = await store.get<{ ownerId: string }>(ACCESS_KEYS, digests.accessKey);
        if (entry !== undefined && typeof entry.ownerId === "string") {
          ownerId = entry.ownerId;
          accessIndex.set(digests.accessKey, ownerId);
        }
      }
      const owner = ownerId === undefined ? undefined : await registry.get(ownerId);
      const ok = digestsMatch(owner?.credentials ?? dummy, digests);
      if (owner === undefined || !ok) throw new CryptoServiceError("invalid_credentials");
      return owner;
    },
  };
  return registry;
}
