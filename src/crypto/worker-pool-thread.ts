/**
 * One thread of the crypto worker pool (worker-pool.ts). It runs the synchronous
 * sign-encrypt and decrypt-verify steps on keys and bytes the pool sends, so the event
 * loop of the process that owns the pool only passes messages. Nothing here decides
 * trust: the signer's verification key comes from the owner of the pool, asked for by
 * the (still unverified) signer name and key id, exactly as `decryptVerify` asks its
 * `signerKeys` lookup.
 */

import type { KeyObject } from "node:crypto";
import { parentPort } from "node:worker_threads";
import { parseEnvelope } from "./envelope.ts";
import { type CryptoErrorCode, isCryptoError } from "./errors.ts";
import {
  type DecryptedSigned,
  decryptSigned,
  SIGN_ENCRYPT_CONTEXT,
  signPrepared,
  type VerifiedMessage,
  verifyOpened,
  withSignerKey,
} from "./sign-encrypt.ts";

/** Verification keys of the signer the caller expects, as its lookup answered them. */
export interface LikelySignerKeys {
  readonly signer: string;
  readonly keys: ReadonlyArray<{ readonly keyId: string; readonly publicKey: KeyObject }>;
}

/** Messages to a worker. Byte arrays are transferred: each is a fresh, exact-size buffer. */
export type ToWorker =
  | {
      readonly kind: "sign-encrypt";
      readonly id: number;
      /** The canonical signed document and the payload it binds (prepared by the pool's owner). */
      readonly document: Uint8Array;
      readonly payload: Uint8Array;
      readonly privateKey: KeyObject;
      readonly recipientPublicKey: KeyObject;
      readonly recipientKeyId: string;
    }
  | {
      readonly kind: "decrypt-verify";
      readonly id: number;
      /** The envelope bytes, already parsed once and addressed to `privateKey`. */
      readonly envelope: Uint8Array;
      readonly privateKey: KeyObject;
      readonly expectedPurpose: string | undefined;
      /** When the document names this signer and one of these key ids, no need to ask. */
      readonly likely?: LikelySignerKeys;
    }
  | { readonly kind: "signer-key"; readonly id: number; readonly publicKey: KeyObject | undefined }
  | { readonly kind: "drop"; readonly id: number };

export type FromWorker =
  | { readonly kind: "signed"; readonly id: number; readonly envelope: string }
  | { readonly kind: "need-signer"; readonly id: number; readonly signer: string; readonly keyId: string }
  | ({
      readonly kind: "verified";
      readonly id: number;
      /** The verified signed blob (signed-blob.ts), in a buffer of its own, transferred. */
      readonly blob: Uint8Array;
    } & Omit<VerifiedMessage, "plaintext" | "signedDocument" | "signature" | "signedBlob">)
  | {
      readonly kind: "failed";
      readonly id: number;
      /** Undefined for a failure that is not a CryptoError. */
      readonly code: CryptoErrorCode | undefined;
      readonly message: string;
    };

const port = parentPort;
if (port === null) throw new Error("worker-pool-thread.ts runs only as a worker thread");

/** Decrypted blobs waiting for their signer's key, by job id. */
const waiting = new Map<number, { decrypted: DecryptedSigned; expectedPurpose: string | undefined }>();

function post(message: FromWorker, transfer: ArrayBuffer[] = []): void {
  port?.postMessage(message, transfer);
}

function fail(id: number, error: unknown): void {
  post({
    kind: "failed",
    id,
    code: isCryptoError(error) ? error.code : undefined,
    message: error instanceof Error ? error.message : "crypto worker failure",
  });
}

/** `bytes` if they fill their buffer alone (safe to transfer), else a copy of them, the original wiped. */
function ownBuffer(bytes: Uint8Array): Uint8Array {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) return bytes;
  const copy = new Uint8Array(bytes);
  bytes.fill(0);
  return copy;
}

/** Verifies with the signer's key (undefined: unknown signer) and posts the result. */
function verifyAndAnswer(
  id: number,
  decrypted: DecryptedSigned,
  signerKey: KeyObject | undefined,
  expectedPurpose: string | undefined,
): void {
  try {
    const verified = verifyOpened(withSignerKey(decrypted, signerKey), { expectedPurpose });
    // The verified blob goes to the owner whole (its parts are views into it), moved rather
    // than copied when it fills a buffer of its own; otherwise one copy, and this one is wiped.
    const blob = ownBuffer(decrypted.blob);
    post(
      {
        kind: "verified",
        id,
        blob,
        signer: verified.signer,
        signerKeyId: verified.signerKeyId,
        signedAt: verified.signedAt,
        recipientKeyId: verified.recipientKeyId,
        purpose: verified.purpose,
      },
      [blob.buffer as ArrayBuffer],
    );
  } catch (error) {
    fail(id, error);
  }
}

function onMessage(message: ToWorker): void {
  switch (message.kind) {
    case "sign-encrypt": {
      try {
        const envelope = signPrepared({
          recipient: { keyId: message.recipientKeyId, publicKey: message.recipientPublicKey },
          document: message.document,
          payload: message.payload,
          signOptions: {
            privateKey: message.privateKey,
            message: message.document,
            context: SIGN_ENCRYPT_CONTEXT,
          },
        });
        post({ kind: "signed", id: message.id, envelope });
      } catch (error) {
        fail(message.id, error);
      } finally {
        message.payload.fill(0);
      }
      return;
    }
    case "decrypt-verify": {
      let decrypted: DecryptedSigned;
      try {
        decrypted = decryptSigned({
          parsed: parseEnvelope(message.envelope),
          privateKey: message.privateKey,
        });
      } catch (error) {
        fail(message.id, error);
        return;
      }
      const { document } = decrypted;
      const known =
        document.signer === message.likely?.signer
          ? message.likely.keys.find((key) => key.keyId === document.signer_key_id)
          : undefined;
      if (known !== undefined) {
        verifyAndAnswer(message.id, decrypted, known.publicKey, message.expectedPurpose);
        return;
      }
      waiting.set(message.id, { decrypted, expectedPurpose: message.expectedPurpose });
      post({ kind: "need-signer", id: message.id, signer: document.signer, keyId: document.signer_key_id });
      return;
    }
    case "signer-key": {
      const job = waiting.get(message.id);
      if (job === undefined) return;
      waiting.delete(message.id);
      verifyAndAnswer(message.id, job.decrypted, message.publicKey, job.expectedPurpose);
      return;
    }
    case "drop": {
      waiting.get(message.id)?.decrypted.blob.fill(0);
      waiting.delete(message.id);
      return;
    }
  }
}

port.on("message", onMessage);
