/**
 * Hash chains of decision records (docs/decisions/2681): every record the recorder writes to
 * a chained log carries `chain: { stream, n, prev }` — its stream (this replica), its place in
 * the stream (1, 2, …) and the hash of the stream's previous record (the genesis hash for the
 * first). A record's hash is the SHA-256 of its canonical JSON, chain included, so changing,
 * removing, inserting or moving a record breaks the link of the record after it; signed
 * checkpoints (checkpoints.ts) seal the newest link of each stream.
 *
 * One stream per (log, replica): replicas writing to one store never share a head, so no
 * coordination is needed between them. Pure: no I/O.
 */
import { hashCanonical, type Sha256Ref } from "../core/canonical-json.ts";
import { logs } from "../store/model.ts";

/** The logs whose records are chained: the decision records of every path. */
export const CHAINED_LOGS = [logs.audit, logs.mcpAudit, logs.evidence] as const;
export type ChainedLog = (typeof CHAINED_LOGS)[number];

/** What `prev` says for a stream's first record. */
export const GENESIS_HASH: Sha256Ref = `sha256:${"0".repeat(64)}`;

export interface ChainLink {
  /** The replica that wrote the record (the stream within its log). */
  readonly stream: string;
  /** 1-based place in the stream. */
  readonly n: number;
  /** Hash of the stream's record n-1 (GENESIS_HASH for n = 1). */
  readonly prev: Sha256Ref;
}

/** The newest link of a stream: its place and hash, and (once stored) the store's seq. */
export interface ChainHead {
  readonly n: number;
  readonly hash: Sha256Ref;
  /** The store's seq of record n (0 before any record). */
  readonly seq: number;
}

export const EMPTY_HEAD: ChainHead = { n: 0, hash: GENESIS_HASH, seq: 0 };

/** The hash the next record of the stream carries as `prev`. */
export function recordHash(record: unknown): Sha256Ref {
  return hashCanonical(record);
}

export function isChainedLog(log: string): log is ChainedLog {
  return (CHAINED_LOGS as readonly string[]).includes(log);
}

/** The chain field of a stored value, when it has a well-formed one. */
export function chainOf(value: unknown): ChainLink | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const chain = (value as { chain?: unknown }).chain;
  if (typeof chain !== "object" || chain === null) return undefined;
  const { stream, n, prev } = chain as Partial<Record<keyof ChainLink, unknown>>;
  if (typeof stream !== "string" || !Number.isSafeInteger(n) || (n as number) < 1) return undefined;
  if (typeof prev !== "string" || !/^sha256:[0-9a-f]{64}$/.test(prev)) return undefined;
  return { stream, n: n as number, prev: prev as Sha256Ref };
}

export interface ChainLinker {
  readonly stream: string;
  /** The record with its link, advancing the stream's head (call once per accepted record). */
  link(log: string, record: unknown): unknown;
  /** Told that a record was stored at `seq`: the stored head moves (checkpoints seal stored heads). */
  stored(log: string, record: unknown, seq: number): void;
  /** The newest stored head of each chained log. */
  storedHeads(): Readonly<Record<ChainedLog, ChainHead>>;
}

export interface ChainLinkerOptions {
  /** This replica's stream id (AUTHORITY_REPLICA_ID). */
  readonly stream: string;
  /** Heads recovered from the store at start (checkpoints.ts recoverChainHeads). */
  readonly heads: Readonly<Record<ChainedLog, ChainHead>>;
}

export function createChainLinker(options: ChainLinkerOptions): ChainLinker {
  const { stream } = options;
  // A replica id (1-128) and, for its admin stream, a suffix (admin-chain.ts).
  if (typeof stream !== "string" || stream.length === 0 || stream.length > 160) {
    throw new TypeError("stream must be 1-160 characters");
  }
  /** Linked (maybe not yet stored) heads, and stored heads, per log. */
  const linked = new Map<string, { n: number; hash: Sha256Ref }>();
  const stored = new Map<string, ChainHead>();
  // Each record's hash as computed when it was linked: `stored` moves the head without hashing it again.
  const hashes = new WeakMap<object, Sha256Ref>();
  for (const log of CHAINED_LOGS) {
    const head = options.heads[log] ?? EMPTY_HEAD;
    linked.set(log, { n: head.n, hash: head.hash });
    stored.set(log, head);
  }
  return {
    stream,
    link(log, record) {
      const head = linked.get(log);
      if (head === undefined || typeof record !== "object" || record === null) return record;
      const chained = { ...record, chain: { stream, n: head.n + 1, prev: head.hash } };
      const hash = recordHash(chained);
      hashes.set(chained, hash);
      linked.set(log, { n: head.n + 1, hash });
      return chained;
    },
    stored(log, record, seq) {
      const link = chainOf(record);
      const head = stored.get(log);
      // A retried write may store a record twice: the head only moves forward.
      if (link === undefined || head === undefined || link.stream !== stream || link.n <= head.n) return;
      const hash =
        (typeof record === "object" && record !== null && hashes.get(record)) || recordHash(record);
      stored.set(log, { n: link.n, hash, seq });
    },
    storedHeads() {
      const heads: Partial<Record<ChainedLog, ChainHead>> = {};
      for (const log of CHAINED_LOGS) heads[log] = stored.get(log) ?? EMPTY_HEAD;
      return heads as Record<ChainedLog, ChainHead>;
    },
  };
}
