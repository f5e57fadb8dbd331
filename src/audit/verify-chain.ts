/**
 * Offline verification of an export of the decision chains (`authority audit verify`), with the
 * service identity's public keys only. An export (export-chain.ts) is JSON lines: a header, the
 * signed checkpoints, then the records of each chained log in store order. The verifier:
 *
 * 1. checks every checkpoint's ML-DSA-65 signature, signer and purpose, and that its readable
 *    fields are the signed ones — any other is a forged checkpoint;
 * 2. follows each stream (log, replica) in file order: record n must carry the hash of record
 *    n-1; a stream starts at n = 1 from the genesis hash, or right after a head a checkpoint
 *    seals (retention's new start);
 * 3. compares each checkpoint's head with the record it names: a checkpoint beyond the last
 *    record is a truncated tail.
 *
 * It names the first (by line) record that was modified, removed, inserted or reordered.
 * An exact twin of an earlier record (a retried write) is counted, not refused. Records after a
 * stream's newest checkpoint are "unsealed": their order is checked, but removing them from the
 * end cannot be told from their never having been written.
 */
import { canonicalJson } from "../core/canonical-json.ts";
import { isCryptoError, type PublicKeyRing, verifySignedBlob } from "../crypto/index.ts";
import { chainOf, GENESIS_HASH, isChainedLog, recordHash } from "./chain.ts";
import { CHECKPOINT_PURPOSE, CHECKPOINT_TYPE, type CheckpointPayload } from "./checkpoints.ts";
import { namesRecord, recordNameOf } from "./receipts.ts";

export const EXPORT_TYPE = "authority.audit-export.v1";

export type TamperKind =
  | "modified"
  | "removed"
  | "inserted"
  | "reordered"
  | "truncated"
  | "forged_checkpoint"
  /** A seal the caller required (VerifyOptions.sealed) is missing: not tampering shown, but not provable either. */
  | "unsealed";

/**
 * What must be sealed by a checkpoint, beyond what the export shows: records after their
 * stream's newest checkpoint can be cut from the end undetected, so a caller that must know
 * nothing was cut requires them sealed — all of them, those up to a time (and a checkpoint
 * at or after it), or one record (an id or its receipt) and everything before it in its stream.
 */
export type SealRequirement =
  | { readonly all: true }
  | { readonly through: number }
  | { readonly record: string };

export interface VerifyOptions {
  readonly sealed?: SealRequirement;
}

export interface ChainFailure {
  readonly kind: TamperKind;
  /** 1-based line of the export the failure names. */
  readonly line: number;
  readonly log?: string;
  readonly stream?: string;
  readonly n?: number;
  readonly message: string;
}

export interface ChainVerification {
  readonly ok: boolean;
  readonly records: number;
  readonly checkpoints: number;
  readonly streams: number;
  /** Twins of records already seen (retried writes). */
  readonly duplicates: number;
  /** Records no chain covers (written before chains, user-grant events, changes written without an admin chain). */
  readonly unchained: number;
  /** Records after their stream's newest checkpoint. */
  readonly unsealed: number;
  /** The same per stream (`<log>/<stream>`), streams with none left out. */
  readonly unsealedByStream: Readonly<Record<string, number>>;
  /** The first failure by line. */
  readonly failure?: ChainFailure;
}

interface Line {
  readonly line: number;
  readonly value: Record<string, unknown>;
}

interface ChainedRecord {
  readonly line: number;
  readonly n: number;
  readonly prev: string;
  readonly hash: string;
  /** The record's own id and time (ms; NaN when it shows none): what a seal requirement names. */
  readonly id: unknown;
  readonly time: number;
}

interface SealedAt {
  readonly line: number;
  readonly n: number;
  readonly hash: string;
  readonly reason: string;
}

const streamKey = (log: string, stream: string): string => `${log}\u0000${stream}`;

function parseLines(text: string, failures: ChainFailure[]): Line[] {
  const lines: Line[] = [];
  text.split("\n").forEach((raw, at) => {
    if (raw.trim().length === 0) return;
    try {
      const value: unknown = JSON.parse(raw);
      if (typeof value !== "object" || value === null || Array.isArray(value))
        throw new Error("not an object");
      lines.push({ line: at + 1, value: value as Record<string, unknown> });
    } catch {
      failures.push({ kind: "modified", line: at + 1, message: `line ${at + 1} is not a JSON object` });
    }
  });
  return lines;
}

/** A record's chain hash; undefined when its JSON cannot be hashed (too deep, a non-integer number). */
function hashOf(record: unknown): string | undefined {
  try {
    return recordHash(record);
  } catch {
    return undefined;
  }
}

const PAYLOAD_FIELDS = ["typ", "stream", "reason", "time", "heads"] as const;

/** The signed payload of a checkpoint line, or why it is forged. */
async function verifiedCheckpoint(value: unknown, keys: PublicKeyRing): Promise<CheckpointPayload | string> {
  const record = value as Partial<Record<string, unknown>> | null;
  if (typeof record?.signed_blob !== "string") return "it has no signed blob";
  let payload: Uint8Array;
  try {
    ({ payload } = await verifySignedBlob(Buffer.from(record.signed_blob, "base64"), {
      signerKeys: (signer, keyId) => (signer === keys.owner ? keys.signerKeys(signer, keyId) : undefined),
      expectedPurpose: CHECKPOINT_PURPOSE,
    }));
  } catch (error) {
    return `its signature does not verify (${isCryptoError(error) ? error.code : "malformed"})`;
  }
  const signed = JSON.parse(Buffer.from(payload).toString("utf8")) as CheckpointPayload;
  const shown = Object.fromEntries(PAYLOAD_FIELDS.map((field) => [field, record[field]]));
  if (signed.typ !== CHECKPOINT_TYPE || canonicalJson(shown) !== canonicalJson(signed)) {
    return "its fields differ from what was signed";
  }
  return signed;
}

/** Walks one stream in file order; the first break, if any. */
function walkStream(
  log: string,
  stream: string,
  records: readonly ChainedRecord[],
  anchors: ReadonlySet<string>,
  counts: { duplicates: number },
): ChainFailure | undefined {
  const at = (record: ChainedRecord, kind: TamperKind, message: string): ChainFailure => ({
    kind,
    line: record.line,
    log,
    stream,
    n: record.n,
    message,
  });
  const first = records[0];
  if (first === undefined) return undefined;
  const genesis = first.n === 1 && first.prev === GENESIS_HASH;
  if (!genesis && !anchors.has(`${first.n - 1}:${first.prev}`)) {
    return at(
      first,
      "removed",
      `records before n=${first.n} of ${log}/${stream} are missing: no checkpoint marks this start`,
    );
  }
  const seen = new Map<number, ChainedRecord>();
  let head = { n: first.n - 1, hash: first.prev, line: 0 };
  for (let i = 0; i < records.length; i++) {
    const record = records[i] as ChainedRecord;
    const earlier = seen.get(record.n);
    if (earlier !== undefined && earlier.hash === record.hash) {
      counts.duplicates++;
      continue;
    }
    const expected = head.n + 1;
    if (record.n === expected) {
      if (record.prev !== head.hash) {
        return head.line === 0
          ? at(record, "modified", `record n=${record.n} of ${log}/${stream} does not follow its start`)
          : {
              kind: "modified",
              line: head.line,
              log,
              stream,
              n: head.n,
              message: `record n=${head.n} of ${log}/${stream} (line ${head.line}) was modified: record n=${record.n} (line ${record.line}) carries another hash for it`,
            };
      }
      seen.set(record.n, record);
      head = { n: record.n, hash: record.hash, line: record.line };
      continue;
    }
    if (record.n > expected) {
      const later = records.slice(i + 1).find((other) => other.n === expected);
      return later === undefined
        ? at(
            record,
            "removed",
            `record n=${expected} of ${log}/${stream} is missing before line ${record.line}`,
          )
        : at(
            record,
            "reordered",
            `record n=${record.n} of ${log}/${stream} (line ${record.line}) comes before n=${expected} (line ${later.line})`,
          );
    }
    return at(
      record,
      "inserted",
      `record n=${record.n} of ${log}/${stream} (line ${record.line}) conflicts with the record n=${record.n} before it${earlier === undefined ? "" : ` (line ${earlier.line})`}: one was inserted or changed`,
    );
  }
  return undefined;
}

/**
 * The kinds the recorder writes, each chained since chains exist (decision 2681): one without
 * a chain among chained records of its log — after the first in the export, or dated at or
 * after it — was never written by a replica. Older records (before chains) come first and are
 * older; admin changes and user-grant events may be unchained (decision 2771) and are counted.
 */
const RECORDER_KINDS: ReadonlySet<unknown> = new Set(["decision", "mcp_call", "evidence"]);

const isRecorderKind = (value: unknown): boolean =>
  typeof value === "object" && value !== null && RECORDER_KINDS.has((value as { kind?: unknown }).kind);

/** A record's own time (ms), NaN when it shows none. */
function timeOf(value: unknown): number {
  const time = (value as { time?: unknown } | null)?.time;
  return typeof time === "string" ? Date.parse(time) : Number.NaN;
}

/** Where a log's chained records begin: the first line with one, and the earliest time among them. */
interface ChainStart {
  readonly line: number;
  readonly time: number;
}

interface LooseRecord {
  readonly line: number;
  readonly log: string;
  readonly time: number;
}

function chainStart(known: ChainStart | undefined, line: number, time: number): ChainStart {
  if (known === undefined) return { line, time };
  return Number.isNaN(time) || time >= known.time ? known : { line: known.line, time };
}

/** An unchained recorder record that is not older than its log's chains. */
function insertedAmongChains(record: LooseRecord, began: ChainStart | undefined): boolean {
  if (began === undefined) return false;
  return record.line > began.line || Number.isNaN(record.time) || record.time >= began.time;
}

/** Whether a record's id is the one a requirement names: an id, or a receipt (audit/receipts.ts). */
function requiredRecord(named: string): (id: unknown) => boolean {
  const name = recordNameOf(named) ?? { id: named };
  return (id) => namesRecord(name, id);
}

/** The first record a seal requirement finds unsealed (or missing), as a failure. */
function unsealedFailure(
  requirement: SealRequirement,
  unsealed: readonly (ChainedRecord & { readonly key: string })[],
  all: readonly ChainedRecord[],
  newestCheckpoint: number,
  lastLine: number,
): ChainFailure | undefined {
  const named = (record: ChainedRecord & { readonly key: string }, why: string): ChainFailure => ({
    kind: "unsealed",
    line: record.line,
    n: record.n,
    message: `record n=${record.n} of ${record.key.replace("\u0000", "/")} (line ${record.line}) ${why}`,
  });
  if ("all" in requirement) {
    const first = unsealed[0];
    return first === undefined ? undefined : named(first, "is after its stream's newest checkpoint");
  }
  if ("through" in requirement) {
    const at = new Date(requirement.through).toISOString();
    const early = unsealed.find((record) => record.time <= requirement.through);
    if (early !== undefined) return named(early, `is not sealed, and was written by ${at}`);
    if (newestCheckpoint < requirement.through) {
      return {
        kind: "unsealed",
        line: lastLine,
        message: `no checkpoint at or after ${at} (the newest is ${Number.isFinite(newestCheckpoint) ? new Date(newestCheckpoint).toISOString() : "none"})`,
      };
    }
    return undefined;
  }
  const required = requiredRecord(requirement.record);
  if (!all.some((record) => required(record.id))) {
    return {
      kind: "unsealed",
      line: lastLine,
      message: `no record ${JSON.stringify(requirement.record)} in the export`,
    };
  }
  const open = unsealed.find((record) => required(record.id));
  return open === undefined ? undefined : named(open, "is after its stream's newest checkpoint");
}

export async function verifyChainExport(
  text: string,
  keys: PublicKeyRing,
  options: VerifyOptions = {},
): Promise<ChainVerification> {
  const failures: ChainFailure[] = [];
  const lines = parseLines(text, failures);
  const sealed = new Map<string, SealedAt[]>();
  const streams = new Map<string, { log: string; stream: string; records: ChainedRecord[] }>();
  let newestCheckpoint = Number.NEGATIVE_INFINITY;
  let checkpoints = 0;
  let unchained = 0;
  let records = 0;
  const looseRecords: LooseRecord[] = [];
  const chainsBegan = new Map<string, ChainStart>();
  for (const { line, value } of lines) {
    if (value.type === "checkpoint") {
      checkpoints++;
      const signed = await verifiedCheckpoint(value.value, keys);
      if (typeof signed === "string") {
        failures.push({
          kind: "forged_checkpoint",
          line,
          message: `the checkpoint at line ${line} is forged: ${signed}`,
        });
        continue;
      }
      newestCheckpoint = Math.max(newestCheckpoint, Date.parse(signed.time) || Number.NEGATIVE_INFINITY);
      for (const [log, head] of Object.entries(signed.heads)) {
        if (head === undefined) continue;
        const key = streamKey(log, signed.stream);
        const list = sealed.get(key) ?? [];
        list.push({ line, n: head.n, hash: head.hash, reason: signed.reason });
        sealed.set(key, list);
      }
    } else if (value.type === "record") {
      records++;
      const log = typeof value.log === "string" ? value.log : "";
      const link = chainOf(value.value);
      if (link === undefined || !isChainedLog(log)) {
        unchained++;
        if (isChainedLog(log) && isRecorderKind(value.value))
          looseRecords.push({ line, log, time: timeOf(value.value) });
        continue;
      }
      const hash = hashOf(value.value);
      if (hash === undefined) {
        failures.push({ kind: "modified", line, message: `the record at line ${line} cannot be hashed` });
        continue;
      }
      const key = streamKey(log, link.stream);
      const entry = streams.get(key) ?? { log, stream: link.stream, records: [] };
      const time = timeOf(value.value);
      entry.records.push({
        line,
        n: link.n,
        prev: link.prev,
        hash,
        id: (value.value as { id?: unknown }).id,
        time,
      });
      streams.set(key, entry);
      chainsBegan.set(log, chainStart(chainsBegan.get(log), line, time));
    } else if (value.type !== EXPORT_TYPE) {
      failures.push({ kind: "inserted", line, message: `line ${line} is neither a record nor a checkpoint` });
    }
  }
  const loose = looseRecords.find((record) => insertedAmongChains(record, chainsBegan.get(record.log)));
  if (loose !== undefined)
    failures.push({
      kind: "inserted",
      line: loose.line,
      log: loose.log,
      message: `the ${loose.log} record at line ${loose.line} has no chain, yet the log's records are chained from line ${chainsBegan.get(loose.log)?.line} (${new Date(chainsBegan.get(loose.log)?.time ?? 0).toISOString()}) on: it was inserted`,
    });
  const counts = { duplicates: 0 };
  const unsealed: (ChainedRecord & { readonly key: string })[] = [];
  const unsealedByStream: Record<string, number> = {};
  const keysOf = new Set([...streams.keys(), ...sealed.keys()]);
  for (const key of keysOf) {
    const [log = "", stream = ""] = key.split("\u0000");
    const chain = streams.get(key)?.records ?? [];
    const seals = sealed.get(key) ?? [];
    // Only retention starts a stream after n = 1: it seals the last record it removes. Any
    // other checkpoint marks no start, else removing records up to it would pass.
    const trimmed = seals.filter((seal) => seal.reason === "retention");
    const anchors = new Set(trimmed.map((seal) => `${seal.n}:${seal.hash}`));
    const broken = walkStream(log, stream, chain, anchors, counts);
    if (broken !== undefined) failures.push(broken);
    const byN = new Map(chain.map((record) => [record.n, record]));
    // A stream without records starts after its newest retention seal: a later seal names
    // records that were removed (every record of a replica dropped, its checkpoints kept).
    const first = chain[0];
    const start = first === undefined ? Math.max(0, ...trimmed.map((seal) => seal.n)) : first.n - 1;
    const last = chain.at(-1);
    let newest = 0;
    for (const seal of seals) {
      newest = Math.max(newest, seal.n);
      if (seal.n === 0 || seal.n <= start) continue;
      const record = byN.get(seal.n);
      if (record === undefined) {
        failures.push({
          kind: "truncated",
          line: last?.line ?? seal.line,
          log,
          stream,
          n: seal.n,
          message: `${log}/${stream} ends at n=${last?.n ?? 0} but the checkpoint at line ${seal.line} seals n=${seal.n}: the tail was removed`,
        });
      } else if (record.hash !== seal.hash) {
        failures.push({
          kind: "modified",
          line: record.line,
          log,
          stream,
          n: seal.n,
          message: `record n=${seal.n} of ${log}/${stream} (line ${record.line}) does not match the checkpoint at line ${seal.line}`,
        });
      }
    }
    const open = chain.filter((record) => record.n > newest);
    if (open.length > 0) unsealedByStream[`${log}/${stream}`] = open.length;
    unsealed.push(...open.map((record) => ({ ...record, key })));
  }
  if (options.sealed !== undefined) {
    unsealed.sort((a, b) => a.line - b.line);
    const all = [...streams.values()].flatMap((entry) => entry.records);
    const lastLine = lines.at(-1)?.line ?? 0;
    const missing = unsealedFailure(options.sealed, unsealed, all, newestCheckpoint, lastLine);
    if (missing !== undefined) failures.push(missing);
  }
  failures.sort((a, b) => a.line - b.line);
  const failure = failures[0];
  return {
    ok: failure === undefined,
    records,
    checkpoints,
    streams: streams.size,
    duplicates: counts.duplicates,
    unchained,
    unsealed: unsealed.length,
    unsealedByStream,
    ...(failure === undefined ? {} : { failure }),
  };
}
