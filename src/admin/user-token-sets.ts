/**
 * Users' OAuth token sets at rest: sealed like auth-profile secrets (to the partner's
 * auth-profile key ring, or by the crypto service's SecretBox in crypto custody), with
 * associated data naming the grant key, so a sealed set copied onto another user's key does
 * not open. The store holds no token in the clear.
 */
import type { TokenSet, TokenSetStore } from "../execute/auth-profiles.ts";
import { isTokenSet } from "../execute/token-set-store.ts";
import { authProfileSecretOwner, collections } from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";
import { openWithAad, SecretSealError, sealWithAad } from "./secret-seal.ts";

interface SealedTokenSetRecord {
  readonly sealed: string;
  readonly updated_at: string;
}

const aadOf = (key: string): string => `authority/oauth-user-token-set/v1\n${key}`;

/** `<partner>/<profile>/<subject>`: the partner names the key ring. */
function ownerOf(key: string): string {
  const partnerId = key.slice(0, key.indexOf("/"));
  if (partnerId.length === 0) throw new TypeError("a grant key starts with its partner");
  return authProfileSecretOwner(partnerId);
}

export function createSealedTokenSetStore(
  deps: Pick<AdminDeps, "store" | "secretKeyRings" | "now">,
): TokenSetStore {
  return {
    async get(key) {
      const record = await deps.store.get<SealedTokenSetRecord>(collections.userTokenSets, key);
      if (typeof record?.sealed !== "string") return undefined;
      let plaintext: string;
      try {
        plaintext = await openWithAad(deps.secretKeyRings, ownerOf(key), aadOf(key), record.sealed);
      } catch (error) {
        // Moved, altered or sealed under a lost key: absent, so the user is asked to connect again.
        if (error instanceof SecretSealError && error.code === "secret_unreadable") return undefined;
        throw error;
      }
      let value: unknown;
      try {
        value = JSON.parse(plaintext);
      } catch {
        return undefined;
      }
      return isTokenSet(value) ? value : undefined;
    },
    async put(key, tokenSet: TokenSet) {
      const sealed = await sealWithAad(
        deps.secretKeyRings,
        ownerOf(key),
        aadOf(key),
        JSON.stringify(tokenSet),
      );
      const record: SealedTokenSetRecord = { sealed, updated_at: deps.now().toISOString() };
      await deps.store.put(collections.userTokenSets, key, record);
    },
    async delete(key) {
      await deps.store.delete(collections.userTokenSets, key);
    },
  };
}
