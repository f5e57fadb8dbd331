/**
 * The development environment's secret store: generated passwords, client secrets and
 * crypto-service credential sets, kept in the Store wrapped under the KEK (AES-256-GCM,
 * associated data = the entry's name), so re-running `authority dev` on the same state
 * directory reuses them and a copied database without the KEK reveals none of them.
 *
 * In production these live in a secret manager; this is the dev server's equivalent of
 * printing its root token.
 */
import { randomBytes } from "node:crypto";
import type { Kek } from "../crypto/index.ts";
import type { Store } from "../store/store.ts";

export const DEV_VAULT_COLLECTION = "dev_vault";

const FORMAT = "authority.dev-vault.v1";

interface StoredEntry {
  readonly format: typeof FORMAT;
  readonly kek_id: string;
  readonly wrapped: string;
}

export class DevVaultError extends Error {
  readonly code = "dev_vault_unreadable";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "DevVaultError";
  }
}

export interface DevVault {
  /** The stored value, or undefined. */
  get<T>(name: string): Promise<T | undefined>;
  /** The stored value; when absent, `create()` is stored (first writer wins) and returned. */
  getOrCreate<T>(name: string, create: () => T | Promise<T>): Promise<T>;
  put<T>(name: string, value: T): Promise<void>;
}

const aad = (name: string): Buffer => Buffer.from(`${FORMAT}\0${name}`, "utf8");

/** A random secret of `bytes` bytes, base64url, with an optional readable prefix. */
export function randomSecret(prefix = "", bytes = 24): string {
  return `${prefix}${randomBytes(bytes).toString("base64url")}`;
}

export function createDevVault(options: { readonly store: Store; readonly kek: Kek }): DevVault {
  const { store, kek } = options;
  if (store === undefined || kek === undefined) throw new TypeError("store and kek are required");

  const wrap = (name: string, value: unknown): StoredEntry => ({
    format: FORMAT,
    kek_id: kek.id,
    wrapped: kek.wrap(Buffer.from(JSON.stringify(value), "utf8"), aad(name)).toString("base64"),
  });

  const unwrap = <T>(name: string, entry: StoredEntry): T => {
    if (entry.format !== FORMAT) throw new DevVaultError(`vault entry ${name} has an unknown format`);
    if (entry.kek_id !== kek.id) {
      throw new DevVaultError(
        `vault entry ${name} was written under another key-encryption key; remove the state directory to start over`,
      );
    }
    try {
      return JSON.parse(kek.unwrap(Buffer.from(entry.wrapped, "base64"), aad(name)).toString("utf8")) as T;
    } catch (cause) {
      throw new DevVaultError(`vault entry ${name} cannot be opened`, { cause });
    }
  };

  return {
    async get<T>(name: string) {
      const entry = await store.get<StoredEntry>(DEV_VAULT_COLLECTION, name);
      return entry === undefined ? undefined : unwrap<T>(name, entry);
    },
    async getOrCreate<T>(name: string, create: () => T | Promise<T>) {
      const existing = await store.get<StoredEntry>(DEV_VAULT_COLLECTION, name);
      if (existing !== undefined) return unwrap<T>(name, existing);
      const value = await create();
      if (await store.create(DEV_VAULT_COLLECTION, name, wrap(name, value))) return value;
      const winner = await store.get<StoredEntry>(DEV_VAULT_COLLECTION, name);
      if (winner === undefined)
        throw new DevVaultError(`vault entry ${name} vanished after a concurrent create`);
      return unwrap<T>(name, winner);
    },
    async put<T>(name: string, value: T) {
      await store.put(DEV_VAULT_COLLECTION, name, wrap(name, value));
    },
  };
}
