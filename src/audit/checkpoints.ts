/**
 * Signed checkpoints of the decision chains (docs/decisions/2681). A checkpoint states, for one
 * stream (replica), the newest stored head of each chained log, signed with ML-DSA-65 by the
 * service identity wherever its key lives (the crypto service in custody modes, the key ring in
 * the embedded mode: the `CheckpointSigner` the composition root passes). It is appended to
 * log `audit_checkpoints`, and the stream's heads (with their store seqs) are kept in collection
 * `audit_chain_heads` — in one `writeAll` — so a restart continues the chain from there.
 *
 * Checkpoints are taken every `intervalMs` when a head moved, on shutdown, and by retention
 * (reason `retention`: the new start of a stream after old records were trimmed).
 */
import { canonicalJson } from "../core/canonical-json.ts";
import { collections, logs } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import {
  CHAINED_LOGS,
  type ChainedLog,
  type ChainHead,
  type ChainLinker,
  chainOf,
  EMPTY_HEAD,
  recordHash,
} from "./chain.ts";
import { newRecordId } from "./records.ts";

/** The purpose every checkpoint signature names: no policy or secret passes as one. */
export const CHECKPOINT_PURPOSE = "authority-audit-checkpoint";
export const CHECKPOINT_TYPE = "authority.audit-checkpoint.v1";

/** Signs a checkpoint payload as the service identity; resolves to a base64 signed blob. */
export interface CheckpointSigner {
  sign(payload: string): Promise<string>;
}

/** `demand`: an operator sealed the heads now (POST /admin/audit/checkpoints), e.g. before an export. */
export type CheckpointReason = "start" | "interval" | "shutdown" | "retention" | "demand";

/** A stream's place in one log as a checkpoint seals it. */
export interface SealedHead {
  readonly n: number;
  readonly hash: string;
}

/** What is signed (canonical JSON). */
export interface CheckpointPayload {
  readonly typ: typeof CHECKPOINT_TYPE;
  readonly stream: string;
  readonly reason: CheckpointReason;
  readonly time: string;
  /** Per chained log: the stream's record n has this hash (n 0: nothing yet). */
  readonly heads: Readonly<Partial<Record<ChainedLog, SealedHead>>>;
}

/** The entry of log `audit_checkpoints`: the payload's fields for reading, and the signed blob. */
export interface CheckpointRecord extends CheckpointPayload {
  readonly kind: "checkpoint";
  readonly id: string;
  readonly signed_blob: string;
}

interface StoredHeads {
  readonly stream: string;
  readonly time: string;
  readonly heads: Readonly<Record<ChainedLog, ChainHead>>;
}

const PAGE = 1000;

/** Follows the stream's records after `head.seq`: the newest stored one is the head. */
async function headAfter(store: Store, log: ChainedLog, stream: string, head: ChainHead): Promise<ChainHead> {
  let current = head;
  let after = head.seq;
  for (;;) {
    const entries = await store.readLog(log, { afterSeq: after, limit: PAGE });
    for (const entry of entries) {
      const link = chainOf(entry.value);
      if (link?.stream === stream && link.n > current.n) {
        current = { n: link.n, hash: recordHash(entry.value), seq: entry.seq };
      }
    }
    const last = entries.at(-1);
    if (last === undefined || entries.length < PAGE) return current;
    after = last.seq;
  }
}

/**
 * The stream's heads at start: the checkpointed ones, moved past records stored after that
 * checkpoint (a process that ended without its shutdown checkpoint). A stream seen for the first
 * time starts at the logs' current ends, stored at once, so a crash before its first checkpoint
 * never makes a later start scan the whole log or begin the stream again.
 */
export async function recoverChainHeads(
  store: Store,
  stream: string,
  now: Date,
): Promise<Record<ChainedLog, ChainHead>> {
  const saved = await store.get<StoredHeads>(collections.auditChainHeads, stream);
  const heads: Partial<Record<ChainedLog, ChainHead>> = {};
  for (const log of CHAINED_LOGS) {
    const from = saved?.heads[log] ?? {
      ...EMPTY_HEAD,
      seq: saved === undefined ? await store.logLength(log) : 0,
    };
    heads[log] = await headAfter(store, log, stream, from);
  }
  const recovered = heads as Record<ChainedLog, ChainHead>;
  if (saved === undefined) {
    await store.create<StoredHeads>(collections.auditChainHeads, stream, {
      stream,
      time: now.toISOString(),
      heads: recovered,
    });
  }
  return recovered;
}

function sealed(
  heads: Readonly<Partial<Record<ChainedLog, ChainHead>>>,
): Partial<Record<ChainedLog, SealedHead>> {
  const out: Partial<Record<ChainedLog, SealedHead>> = {};
  for (const log of CHAINED_LOGS) {
    const head = heads[log];
    if (head !== undefined) out[log] = { n: head.n, hash: head.hash };
  }
  return out;
}

/** Signs a payload and builds its `audit_checkpoints` entry. */
export async function signedCheckpoint(
  signer: CheckpointSigner,
  payload: CheckpointPayload,
): Promise<CheckpointRecord> {
  const signed_blob = await signer.sign(canonicalJson(payload));
  return { kind: "checkpoint", id: newRecordId("ckp"), ...payload, signed_blob };
}

/** Seals this replica's stream now, once its queued records are stored (the admin call). */
export interface AuditSeal {
  sealNow(): Promise<CheckpointPayload>;
}

export interface Checkpointer {
  /**
   * Signs and stores the stream's stored heads now (an interval checkpoint only when one moved:
   * undefined when it did not); the signed payload.
   */
  checkpoint(reason: Exclude<CheckpointReason, "retention">): Promise<CheckpointPayload | undefined>;
  /**
   * Before retention removes records: seals, per stream, the last record it removes — the
   * new start from which the verifier follows each stream.
   */
  sealTrimmed(log: ChainedLog, removed: readonly { readonly value: unknown }[]): Promise<void>;
  /** Stops the interval timer (the shutdown checkpoint is the caller's, after the last record). */
  stop(): void;
}

export interface CheckpointerOptions {
  readonly store: Store;
  readonly linker: ChainLinker;
  readonly signer: CheckpointSigner;
  /** Between two interval checkpoints (AUTHORITY_AUDIT_CHECKPOINT_INTERVAL). */
  readonly intervalMs: number;
  readonly now: () => Date;
  readonly onError: (error: unknown) => void;
}

export function startCheckpoints(options: CheckpointerOptions): Checkpointer {
  const { store, linker, signer, now } = options;
  if (!Number.isSafeInteger(options.intervalMs) || options.intervalMs < 1000) {
    throw new TypeError("intervalMs must be an integer of at least 1000");
  }
  const stream = linker.stream;
  let lastSealed = "";
  let running: Promise<unknown> = Promise.resolve();

  async function write(reason: CheckpointReason): Promise<CheckpointPayload | undefined> {
    const heads = linker.storedHeads();
    const key = canonicalJson(sealed(heads));
    if (reason === "interval" && key === lastSealed) return undefined;
    const time = now().toISOString();
    const payload: CheckpointPayload = { typ: CHECKPOINT_TYPE, stream, reason, time, heads: sealed(heads) };
    const record = await signedCheckpoint(signer, payload);
    await store.writeAll([
      { op: "append", log: logs.auditCheckpoints, value: record },
      { op: "put", collection: collections.auditChainHeads, id: stream, value: { stream, time, heads } },
    ]);
    lastSealed = key;
    return payload;
  }

  /** One checkpoint at a time, in order. */
  const serial = <T>(task: () => Promise<T>): Promise<T> => {
    const next = running.then(task);
    running = next.catch(() => undefined);
    return next;
  };

  const timer = setInterval(() => {
    serial(() => write("interval")).catch(options.onError);
  }, options.intervalMs);
  timer.unref();

  return {
    checkpoint: (reason) => serial(() => write(reason)),
    async sealTrimmed(log, removed) {
      const lastOf = new Map<string, { n: number; hash: string }>();
      for (const entry of removed) {
        const link = chainOf(entry.value);
        if (link === undefined) continue;
        const seen = lastOf.get(link.stream);
        if (seen === undefined || link.n > seen.n)
          lastOf.set(link.stream, { n: link.n, hash: recordHash(entry.value) });
      }
      const time = now().toISOString();
      const records = await Promise.all(
        [...lastOf].map(([trimmed, head]) =>
          signedCheckpoint(signer, {
            typ: CHECKPOINT_TYPE,
            stream: trimmed,
            reason: "retention",
            time,
            heads: { [log]: head },
          }),
        ),
      );
      for (let at = 0; at < records.length; at += 100) {
        await store.writeAll(
          records
            .slice(at, at + 100)
            .map((value) => ({ op: "append" as const, log: logs.auditCheckpoints, value })),
        );
      }
    },
    stop() {
      clearInterval(timer);
    },
  };
}
