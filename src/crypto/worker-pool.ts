/**
 * Sign-encrypt and decrypt-verify on a pool of worker threads: the whole operation (ML-KEM,
 * HKDF, AES-GCM, SHA-512 and the ML-DSA-65 signature) runs off the event loop, which only
 * checks arguments, looks keys up and passes messages. The async forms of sign-encrypt.ts
 * move only the ML-DSA call to the libuv thread pool; a server whose event loop is the
 * bottleneck (the crypto service) gains several times more from this.
 *
 * Same results and the same `CryptoError` codes as `signEncrypt` / `decryptVerify`, checked
 * in the same order. What differs:
 * - the steps before the first byte is decrypted or signed (envelope form, expected
 *   recipient, recipient key lookup; argument checks and the signed document) run on the
 *   caller's thread, the rest on a worker;
 * - `signerKeys` is still called on the caller's thread, with the signer name and key id
 *   the worker found in the decrypted document (one extra message round trip), unless the
 *   caller named a `likelySigner`: its keys, looked up with `signerKeys` before the job is
 *   sent, go with the job, and a document signed by it is verified without asking back;
 * - a failure that is not a `CryptoError` arrives as a plain `Error` with its message;
 * - bytes cross threads in buffers of their own (never a shared Buffer pool slab), moved
 *   rather than copied where they already fill one: the verified blob comes back whole, and
 *   `plaintext`, `signedDocument` and `signature` are views into it (`signedBlob`), as
 *   `decryptVerify`'s are into its decrypted blob.
 *
 * Threads start at the first call (or `start()`), hold the process open only while a call
 * is pending, and a thread that dies fails its pending calls and is replaced on next use.
 */

import type { KeyObject } from "node:crypto";
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import type { ParsedEnvelope } from "./envelope.ts";
import { CryptoError, type CryptoErrorCode, cryptoErrorMessages } from "./errors.ts";
import type { SignerKeyLookup } from "./key-ring.ts";
import { assertKey, KEM_ALGORITHM, SIG_ALGORITHM } from "./keys.ts";
import {
  addressedEnvelope,
  type DecryptVerifyOptions,
  prepareSignature,
  type SignEncryptOptions,
  type VerifiedMessage,
} from "./sign-encrypt.ts";
import { decodeSignedBlob } from "./signed-blob.ts";
import type { FromWorker, LikelySignerKeys, ToWorker } from "./worker-pool-thread.ts";

export interface CryptoWorkerPoolOptions {
  /** Worker threads (default: the machine's available parallelism, at most 4). */
  readonly size?: number;
}

/**
 * `decryptVerify`'s options, plus the signer the caller expects (a partner decrypting what it
 * signed itself): `signerKeys(id, keyId)` for each of `keyIds` is asked on the caller's thread
 * before the job is sent, and what it answers goes with the job. A document signed by anyone
 * else, or with another key id, is asked back as without it. Only a shortcut: the lookup's
 * answers are the same, asked earlier.
 */
export interface PoolDecryptVerifyOptions extends DecryptVerifyOptions {
  readonly likelySigner?: { readonly id: string; readonly keyIds: readonly string[] };
}

export interface CryptoWorkerPool {
  readonly size: number;
  /** `signEncrypt` on a worker thread. */
  signEncrypt(options: SignEncryptOptions): Promise<string>;
  /** `decryptVerify` on a worker thread; the result's bytes share a buffer no other call holds. */
  decryptVerify(
    envelope: string | Uint8Array | ParsedEnvelope,
    options: PoolDecryptVerifyOptions,
  ): Promise<VerifiedMessage>;
  /** Starts the threads now rather than at the first call. */
  start(): void;
  /** Stops the threads; pending and later calls fail. */
  close(): Promise<void>;
}

const THREAD_URL = new URL("./worker-pool-thread.ts", import.meta.url);
const MAX_DEFAULT_SIZE = 4;

interface Slot {
  readonly worker: Worker;
  pending: number;
  alive: boolean;
}

interface Job {
  readonly slot: Slot;
  readonly resolve: (value: never) => void;
  readonly reject: (error: unknown) => void;
  readonly signerKeys?: SignerKeyLookup;
}

/** The caller's side of a worker failure: a CryptoError again when it was one. */
function workerError(code: CryptoErrorCode | undefined, message: string): Error {
  if (code === undefined || !Object.hasOwn(cryptoErrorMessages, code)) return new Error(message);
  const base = cryptoErrorMessages[code];
  const prefix = `${base} (`;
  return message.startsWith(prefix) && message.endsWith(")")
    ? new CryptoError(code, { detail: message.slice(prefix.length, -1) })
    : new CryptoError(code);
}

/** A copy in an exact-size buffer of its own, safe to transfer. */
function ownCopy(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(bytes);
}

/** The likely signer's keys, as its lookup answers them (none it does not know). */
function likelySignerKeys(options: PoolDecryptVerifyOptions): LikelySignerKeys | undefined {
  const likely = options.likelySigner;
  if (likely === undefined) return undefined;
  const keys: Array<{ keyId: string; publicKey: KeyObject }> = [];
  for (const keyId of likely.keyIds) {
    const publicKey = options.signerKeys(likely.id, keyId);
    if (publicKey !== undefined) keys.push({ keyId, publicKey });
  }
  return keys.length === 0 ? undefined : { signer: likely.id, keys };
}

function envelopeBytes(parsed: ParsedEnvelope): Uint8Array {
  // header and body are adjacent views of the decoded envelope.
  const bytes = new Uint8Array(parsed.header.length + parsed.body.length);
  bytes.set(parsed.header, 0);
  bytes.set(parsed.body, parsed.header.length);
  return bytes;
}

export function createCryptoWorkerPool(options: CryptoWorkerPoolOptions = {}): CryptoWorkerPool {
  const size = positiveIntegerOption(
    options.size,
    Math.max(1, Math.min(MAX_DEFAULT_SIZE, availableParallelism())),
    "size",
  );
  const slots: Slot[] = [];
  const jobs = new Map<number, Job>();
  let nextId = 0;
  let closed = false;

  function settle(id: number): Job | undefined {
    const job = jobs.get(id);
    if (job === undefined) return undefined;
    jobs.delete(id);
    job.slot.pending -= 1;
    if (job.slot.pending === 0 && job.slot.alive) job.slot.worker.unref();
    return job;
  }

  function retire(slot: Slot, error: Error): void {
    if (!slot.alive) return;
    slot.alive = false;
    const index = slots.indexOf(slot);
    if (index >= 0) slots.splice(index, 1);
    for (const [id, job] of jobs) {
      if (job.slot === slot) {
        settle(id);
        job.reject(error);
      }
    }
    void slot.worker.terminate().catch(() => undefined);
  }

  function post(slot: Slot, message: ToWorker, transfer: ArrayBuffer[] = []): void {
    slot.worker.postMessage(message, transfer);
  }

  function onMessage(slot: Slot, message: FromWorker): void {
    switch (message.kind) {
      case "need-signer": {
        const job = jobs.get(message.id);
        if (job?.signerKeys === undefined) {
          post(slot, { kind: "drop", id: message.id });
          return;
        }
        let publicKey: ReturnType<SignerKeyLookup>;
        try {
          publicKey = job.signerKeys(message.signer, message.keyId);
          post(slot, { kind: "signer-key", id: message.id, publicKey });
        } catch (error) {
          post(slot, { kind: "drop", id: message.id });
          settle(message.id)?.reject(error);
        }
        return;
      }
      case "signed":
        (settle(message.id)?.resolve as ((value: string) => void) | undefined)?.(message.envelope);
        return;
      case "verified": {
        const job = settle(message.id);
        if (job === undefined) {
          message.blob.fill(0);
          return;
        }
        // The worker verified this blob; its parts are views into it, as decryptVerify's are.
        const parts = decodeSignedBlob(message.blob);
        const verified: VerifiedMessage = {
          plaintext: parts.payload,
          signer: message.signer,
          signerKeyId: message.signerKeyId,
          signedAt: message.signedAt,
          recipientKeyId: message.recipientKeyId,
          purpose: message.purpose,
          signedDocument: parts.document,
          signature: parts.signature,
          signedBlob: message.blob,
        };
        (job.resolve as (value: VerifiedMessage) => void)(verified);
        return;
      }
      case "failed":
        settle(message.id)?.reject(workerError(message.code, message.message));
        return;
    }
  }

  function spawn(): Slot {
    // No inherited flags (test runners, profilers): the thread only runs this module.
    const worker = new Worker(THREAD_URL, { execArgv: [] });
    worker.unref();
    const slot: Slot = { worker, pending: 0, alive: true };
    worker.on("message", (message: FromWorker) => onMessage(slot, message));
    worker.on("error", (error) => retire(slot, new Error("crypto worker failed", { cause: error })));
    // A message that cannot be read belongs to some pending call: fail them all, start afresh.
    worker.on("messageerror", (error) => retire(slot, new Error("crypto worker failed", { cause: error })));
    worker.on("exit", (code) => retire(slot, new Error(`crypto worker stopped (exit code ${code})`)));
    slots.push(slot);
    return slot;
  }

  function start(): void {
    if (closed) return;
    while (slots.length < size) spawn();
  }

  /** The least busy live thread. */
  function pick(): Slot {
    start();
    let best = slots[0];
    for (const slot of slots) if (best === undefined || slot.pending < best.pending) best = slot;
    if (best === undefined) throw new Error("crypto worker pool has no threads");
    return best;
  }

  function run<T>(
    build: (id: number) => { message: ToWorker; transfer: ArrayBuffer[] },
    signerKeys?: SignerKeyLookup,
  ): Promise<T> {
    if (closed) return Promise.reject(new Error("crypto worker pool is closed"));
    const slot = pick();
    const id = ++nextId;
    return new Promise<T>((resolve, reject) => {
      jobs.set(id, {
        slot,
        resolve: resolve as (value: never) => void,
        reject,
        ...(signerKeys === undefined ? {} : { signerKeys }),
      });
      if (slot.pending === 0) slot.worker.ref();
      slot.pending += 1;
      try {
        const { message, transfer } = build(id);
        post(slot, message, transfer);
      } catch (error) {
        settle(id);
        reject(error);
      }
    });
  }

  return {
    size,
    start,

    async signEncrypt(signOptions) {
      const prepared = prepareSignature(signOptions);
      // The key checks of `sign` and of the seal, in their order, before anything is sent.
      assertKey(prepared.signOptions.privateKey, SIG_ALGORITHM, "private");
      assertKey(prepared.recipient.publicKey, KEM_ALGORITHM, "public");
      return run<string>((id) => {
        const document = ownCopy(prepared.document);
        const payload = ownCopy(prepared.payload);
        return {
          message: {
            kind: "sign-encrypt",
            id,
            document,
            payload,
            privateKey: prepared.signOptions.privateKey,
            recipientPublicKey: prepared.recipient.publicKey,
            recipientKeyId: prepared.recipient.keyId,
          },
          transfer: [document.buffer as ArrayBuffer, payload.buffer as ArrayBuffer],
        };
      });
    },

    async decryptVerify(envelope, verifyOptions) {
      const { parsed, privateKey } = addressedEnvelope(envelope, verifyOptions);
      assertKey(privateKey, KEM_ALGORITHM, "private");
      const likely = likelySignerKeys(verifyOptions);
      return run<VerifiedMessage>((id) => {
        const bytes = envelopeBytes(parsed);
        return {
          message: {
            kind: "decrypt-verify",
            id,
            envelope: bytes,
            privateKey,
            expectedPurpose: verifyOptions.expectedPurpose,
            ...(likely === undefined ? {} : { likely }),
          },
          transfer: [bytes.buffer as ArrayBuffer],
        };
      }, verifyOptions.signerKeys);
    },

    async close() {
      if (closed) return;
      closed = true;
      const stopping = [...slots];
      for (const slot of stopping) retire(slot, new Error("crypto worker pool is closed"));
      await Promise.all(stopping.map((slot) => slot.worker.terminate().catch(() => undefined)));
    },
  };
}
