/**
 * Runs one parsed action for an authenticated owner: loads whatever other key material
 * the action needs (a recipient's public keys, a signer's verification keys) and calls the
 * pure actions. A key id or signer missing from the cache is looked up in the store once
 * before the ciphertext is refused, so rotations made by another replica are seen at once.
 */

import { CryptoServiceError } from "../../clients/crypto-service/reasons.ts";
import type {
  ActionRequest,
  DecryptPayload,
  EncryptPayload,
  SignEncryptPayload,
  UnwrapPayload,
} from "../../clients/crypto-service/wire.ts";
import { CryptoError, type SignerKeyLookup } from "../../crypto/index.ts";
import {
  type DecryptVerifyAnswer,
  type DecryptVerifyInput,
  decryptAction,
  decryptVerifyAction,
  encryptAction,
  type SignatureEngine,
  signEncryptAction,
  threadPoolEngine,
  unwrapAction,
} from "./actions.ts";
import type { Owner, OwnerRegistry } from "./owner-registry.ts";

type LikelySigner = NonNullable<DecryptVerifyInput["likelySigner"]>;

export type ActionPayload =
  | EncryptPayload
  | DecryptPayload
  | SignEncryptPayload
  | DecryptVerifyAnswer
  | UnwrapPayload;

export interface ActionService {
  run(owner: Owner, request: ActionRequest): Promise<ActionPayload>;
}

function causeCode(error: unknown): string | undefined {
  return error instanceof CryptoServiceError && error.cause instanceof CryptoError
    ? error.cause.code
    : undefined;
}

export interface ActionServiceOptions {
  readonly registry: OwnerRegistry;
  readonly now: () => Date;
  /** Where sign-encrypt runs (default: ML-DSA on the libuv thread pool). */
  readonly signEngine?: SignatureEngine;
  /** Where decrypt-verify runs (default: ML-DSA on the libuv thread pool). */
  readonly verifyEngine?: SignatureEngine;
}

export function createActionService(options: ActionServiceOptions): ActionService {
  const { registry, now } = options;
  const signEngine = options.signEngine ?? threadPoolEngine;
  const verifyEngine = options.verifyEngine ?? threadPoolEngine;

  /** Retries `run` once with a freshly loaded caller when the envelope names a key we lack. */
  async function withCallerRefresh<T>(owner: Owner, run: (owner: Owner) => T | Promise<T>): Promise<T> {
    try {
      return await run(owner);
    } catch (error) {
      if (causeCode(error) !== "crypto_unknown_key") throw error;
      const fresh = await registry.refresh(owner.id);
      if (fresh === undefined || fresh.ring.current.keyId === owner.ring.current.keyId) throw error;
      return run(fresh);
    }
  }

  async function decryptVerify(
    owner: Owner,
    encryptedData: string | Uint8Array,
    purpose: string | undefined,
    signedBlob: boolean,
  ) {
    const misses: Array<{ signer: string; keyId: string }> = [];
    const signerKeys: SignerKeyLookup = (signer, keyId) => {
      const ring = signer === owner.id ? owner.ring : registry.cached(signer)?.ring;
      const key = ring?.signerKeys(signer, keyId);
      if (key === undefined) misses.push({ signer, keyId });
      return key;
    };
    const attempt = (caller: Owner, lookup: SignerKeyLookup, likelySigner?: LikelySigner) =>
      decryptVerifyAction(
        {
          ring: caller.ring,
          encryptedData,
          signerKeys: lookup,
          ...(likelySigner === undefined ? {} : { likelySigner }),
          expectedPurpose: purpose,
          signedBlob,
        },
        verifyEngine,
      );
    // Most blobs a partner opens it signed itself: its keys go with the job (keys `signerKeys`
    // finds, so no miss is recorded for them).
    const self: LikelySigner = { id: owner.id, keyIds: owner.ring.versions.map((version) => version.keyId) };
    try {
      return await withCallerRefresh(owner, (caller) => attempt(caller, signerKeys, self));
    } catch (error) {
      const miss = misses[0];
      if (causeCode(error) !== "crypto_unknown_signer" || miss === undefined) throw error;
      // The signer id is unverified here: it only selects which owner's public keys to try.
      const signer = await registry.refresh(miss.signer);
      if (signer === undefined) throw error;
      const lookup: SignerKeyLookup = (id, keyId) =>
        id === signer.id ? signer.ring.signerKeys(id, keyId) : undefined;
      return withCallerRefresh(owner, (caller) => attempt(caller, lookup));
    }
  }

  return {
    async run(owner, request) {
      switch (request.kind) {
        case "encrypt":
          return encryptAction(owner.ring, request.data);
        case "decrypt":
          return withCallerRefresh(owner, (caller) => decryptAction(caller.ring, request.encryptedData));
        case "sign-encrypt": {
          let recipient = owner;
          if (request.recipient !== undefined && request.recipient !== owner.id) {
            const found = await registry.get(request.recipient);
            if (found === undefined)
              throw new CryptoServiceError("unknown_recipient", { fields: ["recipient"] });
            recipient = found;
          }
          return signEncryptAction(
            {
              signer: owner.ring,
              recipient: recipient.ring.recipient(),
              data: request.data,
              purpose: request.purpose,
              now: now(),
            },
            signEngine,
          );
        }
        case "decrypt-verify":
          return decryptVerify(owner, request.encryptedData, request.purpose, request.signedBlob);
        case "unwrap":
          return withCallerRefresh(owner, (caller) => unwrapAction(caller.ring, request.envelopeHeader));
      }
    },
  };
}
