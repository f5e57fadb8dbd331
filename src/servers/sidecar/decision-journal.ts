import {
  closeSync,
  fdatasync,
  fdatasyncSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { positiveIntOption, SidecarConfigError } from "./errors.ts";

/**
 * The sidecar's write-ahead journal of decision records (docs/decisions/2501-decision-records-written-ahead.md,
 * 2612-a-bounded-journal-written-in-groups.md).
 *
 * A record is written to a local file before the decision it records is answered, so a
 * request that was let through keeps its record whatever happens to the process next
 * (uncaught exception, OOM kill, SIGKILL). The records of one event-loop turn are written
 * together, with one `write(2)` at the end of the turn (group commit): `append` queues the
 * line, `written(ticket)` resolves once the kernel has it — the decision is answered only then.
 * The kernel keeps written bytes when the process dies; `fdatasync` every `syncIntervalMs` (in
 * libuv's thread pool: a slow disk does not stall the event loop; on rotation and close in
 * line) covers a crash of the machine up to that interval. Records the
 * authority has taken are released; a segment whose records are all released is deleted. On the
 * next start, the records of a previous process that were never released are read back
 * (`recovered`, streamed from disk) and shipped again: the authority's log may then hold a record
 * twice with the same `id` (as after a lost reply), never not at all.
 *
 * Bounded: at most `maxBytes` on disk, segments of at most `segmentBytes` (64 MiB at most, well
 * below what one read can hold). A record that would pass the cap is not written
 * (`JournalFullError`): the caller fails closed — no allow is answered without its line.
 *
 * Files, in `dir`: `decisions-<n>.jsonl` (one JSON record per line; a record written twice —
 * an allow, then what became of it — is read back as its last line) and `lock` (the pid of the
 * process that owns the directory: one sidecar per journal).
 */

export interface JournalTicket {
  readonly segment: object;
}

export interface RecoveredRecord {
  readonly json: string;
  readonly ticket: JournalTicket;
}

export interface DecisionJournal {
  /** How many records of an earlier process `recovered` yields. */
  readonly recoveredCount: number;
  /**
   * Records of an earlier process never confirmed delivered: each once (its last line), oldest
   * first, read from disk as they are iterated (once).
   */
  readonly recovered: Iterable<RecoveredRecord>;
  /**
   * Queues one record (a JSON text without newlines) for this turn's write; throws when it
   * cannot be (the cap reached: `JournalFullError`; closed).
   */
  append(json: string): JournalTicket;
  /**
   * Undefined once the record's line is with the kernel; else a promise that resolves when it
   * is, and rejects when its write failed (its line is then not in the journal).
   */
  written(ticket: JournalTicket): Promise<void> | undefined;
  /** The record is with the authority (or was set aside): its line may go. */
  release(ticket: JournalTicket): void;
  /** Bytes the journal's segments take on disk (and those queued for this turn's write). */
  bytes(): number;
  /** Writes what is queued, flushes to disk and closes; segments still holding unreleased records stay for the next start. */
  close(): void;
}

export interface DecisionJournalOptions {
  readonly dir: string;
  /** The journal's segments never take more than this on disk (default 32 MiB; at least 64 KiB). */
  readonly maxBytes?: number;
  /** A segment is closed and a new one started past this size (default 4 MiB, at most 64 MiB, at most an eighth of `maxBytes`). */
  readonly segmentBytes?: number;
  /** fdatasync of the current segment when written to, at most this often (default 1000 ms). */
  readonly syncIntervalMs?: number;
}

/** A record that would take the journal past its cap: not written, so its decision must not allow. */
export class JournalFullError extends Error {
  readonly code = "journal_full";

  constructor(maxBytes: number) {
    super(`the decision journal holds its maximum (${maxBytes} bytes) of records not yet delivered`);
    this.name = "JournalFullError";
  }
}

export const JOURNAL_MAX_BYTES_DEFAULT = 32 * 1024 * 1024;
const MIN_MAX_BYTES = 64 * 1024;
const MAX_SEGMENT_BYTES = 64 * 1024 * 1024;
const READ_CHUNK_BYTES = 1024 * 1024;
/** A record line is a few hundred bytes (its fields are bounded): a longer one is damage, skipped. */
const MAX_LINE_BYTES = 1024 * 1024;
const NEWLINE = 0x0a;

interface Segment {
  readonly paths: readonly string[];
  fd: number | undefined;
  /** Bytes on disk (and queued for it). */
  bytes: number;
  /** Lines not yet released. */
  open: number;
  /** A periodic fdatasync runs in the thread pool: the file is closed once it is done. */
  syncing: boolean;
  closeWhenSynced: boolean;
}

/** The lines queued in one turn, written with one write to one segment. */
interface Batch {
  readonly segment: Segment;
  /** The lines, as one text: encoded once, when written, and dropped then. */
  text: string;
  tickets: Ticket[];
  state: "queued" | "written" | "failed";
  readonly done: Promise<void>;
  settle(error?: unknown): void;
}

interface Ticket extends JournalTicket {
  readonly segment: Segment;
  /** Until its batch is written (kept when the write failed: the ticket counts for nothing then). */
  batch: Batch | undefined;
  released: boolean;
}

const SEGMENT = /^decisions-(\d{1,15})\.jsonl$/;

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as { code?: unknown }).code === "EPERM";
  }
}

/** Takes the directory for this process; another live process holding it is a configuration error. */
function lock(dir: string): string {
  const path = join(dir, "lock");
  let holder: number | undefined;
  try {
    holder = Number.parseInt(readFileSync(path, "utf8"), 10);
  } catch {
    holder = undefined;
  }
  if (holder !== undefined && Number.isSafeInteger(holder) && holder !== process.pid && isAlive(holder)) {
    throw new SidecarConfigError(`the decision journal ${dir} is in use by process ${holder}`);
  }
  writeFileSync(path, String(process.pid), { mode: 0o600 });
  return path;
}

/**
 * Calls `visit` with each whole line of a regular file and its offset, read in chunks (a file
 * of any size: no whole-file string); lines longer than MAX_LINE_BYTES and a last line without
 * its newline (cut short when a process died writing it: nothing was answered for it) are
 * skipped. Returns the file's size (0 when it is not a regular file, which is not read).
 */
function forEachLine(path: string, visit: (line: Buffer, offset: number) => void): number {
  const fd = openSync(path, "r");
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return 0;
    const { size } = stat;
    const chunk = Buffer.allocUnsafe(READ_CHUNK_BYTES);
    let carry: Buffer[] = [];
    let carried = 0;
    let overlong = false;
    for (let position = 0; position < size; ) {
      const read = readSync(fd, chunk, 0, Math.min(chunk.length, size - position), position);
      if (read === 0) break;
      position += read;
      const data = chunk.subarray(0, read);
      const chunkAt = position - read;
      let start = 0;
      for (let end = data.indexOf(NEWLINE, start); end !== -1; end = data.indexOf(NEWLINE, start)) {
        const part = data.subarray(start, end);
        if (!overlong && carried + part.length <= MAX_LINE_BYTES) {
          visit(carried === 0 ? part : Buffer.concat([...carry, part]), chunkAt + start - carried);
        }
        carry = [];
        carried = 0;
        overlong = false;
        start = end + 1;
      }
      const rest = data.subarray(start);
      if (overlong || carried + rest.length > MAX_LINE_BYTES) {
        overlong = true;
        carry = [];
        carried = 0;
      } else if (rest.length > 0) {
        carry.push(Buffer.from(rest));
        carried += rest.length;
      }
    }
    return size;
  } finally {
    closeSync(fd);
  }
}

function idOf(line: Buffer): string | undefined {
  try {
    const id = (JSON.parse(line.toString("utf8")) as { id?: unknown } | null)?.id;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
}

/** Where a line to replay is: its file (index in the paths), offset and length. */
interface LineAt {
  readonly file: number;
  readonly offset: number;
  readonly length: number;
}

/**
 * The earlier process's segments, read once: their size, and where the lines to replay are —
 * the last line of each record id, in the order of those lines. Only ids and positions are held
 * while they are found; the lines are read again, one by one, as they are replayed.
 */
function scanEarlier(paths: readonly string[]): { bytes: number; replay: LineAt[] } {
  const lastLineOf = new Map<string, LineAt>();
  let bytes = 0;
  paths.forEach((path, file) => {
    bytes += forEachLine(path, (line, offset) => {
      const id = idOf(line);
      if (id === undefined) return;
      lastLineOf.delete(id);
      lastLineOf.set(id, { file, offset, length: line.length });
    });
  });
  return { bytes, replay: [...lastLineOf.values()] };
}

/** The lines, read from their files in order. */
function* readLines(paths: readonly string[], lines: readonly LineAt[]): Generator<string> {
  let file = -1;
  let fd: number | undefined;
  try {
    for (const at of lines) {
      if (at.file !== file) {
        if (fd !== undefined) closeSync(fd);
        fd = undefined;
        file = at.file;
        fd = openSync(paths[file] as string, "r");
      }
      const line = Buffer.allocUnsafe(at.length);
      readSync(fd as number, line, 0, at.length, at.offset);
      yield line.toString("utf8");
    }
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

export function openDecisionJournal(options: DecisionJournalOptions): DecisionJournal {
  const { dir } = options;
  if (typeof dir !== "string" || dir === "") throw new SidecarConfigError("the journal needs a directory");
  const maxBytes = positiveIntOption(options.maxBytes, JOURNAL_MAX_BYTES_DEFAULT, "maxBytes");
  if (maxBytes < MIN_MAX_BYTES) throw new SidecarConfigError(`maxBytes must be at least ${MIN_MAX_BYTES}`);
  // Several segments fit under the cap: a segment is deleted only once all its records are delivered.
  const segmentBytes = Math.min(
    positiveIntOption(options.segmentBytes, 4 * 1024 * 1024, "segmentBytes", MAX_SEGMENT_BYTES),
    Math.floor(maxBytes / 8),
  );
  const syncIntervalMs = positiveIntOption(options.syncIntervalMs, 1000, "syncIntervalMs");
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw new SidecarConfigError(`cannot create the decision journal ${dir}`, { cause: error });
  }
  const lockPath = lock(dir);

  const found = readdirSync(dir)
    .map((name) => ({ name, match: SEGMENT.exec(name) }))
    .filter((entry) => entry.match !== null)
    .map((entry) => ({ path: join(dir, entry.name), seq: Number(entry.match?.[1]) }))
    .sort((a, b) => a.seq - b.seq);
  let nextSeq = (found.at(-1)?.seq ?? 0) + 1;
  /** Bytes of every segment on disk, and of the lines queued for this turn's write. */
  let total = 0;

  const remove = (segment: Segment): void => {
    for (const path of segment.paths) {
      try {
        unlinkSync(path);
      } catch {
        // Already gone: nothing to replay from it.
      }
    }
    total -= segment.bytes;
    segment.bytes = 0;
  };

  // The earlier process's records: one segment standing for all its files, removed once all are delivered.
  const earlier: Segment = {
    paths: found.map((f) => f.path),
    fd: undefined,
    bytes: 0,
    open: 0,
    syncing: false,
    closeWhenSynced: false,
  };
  const scanned = scanEarlier(earlier.paths);
  earlier.bytes = scanned.bytes;
  earlier.open = scanned.replay.length;
  total += earlier.bytes;
  if (earlier.open === 0) remove(earlier);

  function* replay(): Generator<RecoveredRecord> {
    for (const json of readLines(earlier.paths, scanned.replay)) {
      const ticket: Ticket = { segment: earlier, batch: undefined, released: false };
      yield { json, ticket };
    }
  }

  let current: Segment | undefined;
  let queued: Batch | undefined;
  let writeScheduled: NodeJS.Immediate | undefined;
  let dirty = false;
  let closed = false;
  /** The periodic sync runs only while there are written bytes to sync: an idle sidecar has no timer here. */
  let syncTimer: NodeJS.Timeout | undefined;

  /** Closes the segment's file (once a periodic sync in the thread pool is done with it). */
  const closeFile = (segment: Segment): void => {
    if (segment.syncing) {
      segment.closeWhenSynced = true;
      return;
    }
    try {
      if (segment.fd !== undefined) closeSync(segment.fd);
    } catch {
      // Closing a broken file can fail too.
    }
    segment.fd = undefined;
    if (segment.open === 0) remove(segment);
  };

  const finish = (segment: Segment): void => {
    try {
      if (segment.fd !== undefined) fdatasyncSync(segment.fd);
    } finally {
      closeFile(segment);
    }
  };

  const start = (): Segment => {
    const path = join(dir, `decisions-${nextSeq++}.jsonl`);
    const fd = openSync(path, "a", 0o600);
    const segment: Segment = { paths: [path], fd, bytes: 0, open: 0, syncing: false, closeWhenSynced: false };
    current = segment;
    return segment;
  };

  /** The segment is broken (a write failed): the next record starts a new one. */
  const abandon = (segment: Segment): void => {
    if (current === segment) current = undefined;
    closeFile(segment);
  };

  /** Writes the lines queued in this turn, with one write. */
  const writeQueued = (): void => {
    if (writeScheduled !== undefined) clearImmediate(writeScheduled);
    writeScheduled = undefined;
    const batch = queued;
    queued = undefined;
    if (batch === undefined) return;
    const { segment } = batch;
    const data = Buffer.from(batch.text, "utf8");
    // The tickets keep their batch until the shipper releases them (a flush interval or more):
    // the text would outlive several scavenges and be promoted, to be swept by a full collection.
    batch.text = "";
    try {
      for (let written = 0; written < data.length; ) {
        written += writeSync(segment.fd as number, data, written, data.length - written);
      }
    } catch (error) {
      // Some lines may be cut short or missing (the reader skips a cut line): none of them counts.
      batch.state = "failed";
      for (const ticket of batch.tickets) if (!ticket.released) segment.open--;
      abandon(segment);
      batch.settle(error);
      return;
    }
    batch.state = "written";
    // A written ticket needs nothing of its batch; held by tickets until the shipper releases
    // them (a flush interval or more), the batch, its promise and its list would be promoted.
    for (const ticket of batch.tickets) ticket.batch = undefined;
    batch.tickets = [];
    dirty = true;
    armSync();
    batch.settle();
  };

  const queue = (segment: Segment): Batch => {
    if (queued !== undefined) return queued;
    let settle: (error?: unknown) => void = () => undefined;
    const done = new Promise<void>((resolve, reject) => {
      settle = (error) => (error === undefined ? resolve() : reject(error));
    });
    // Whoever waits on it handles a failure; nobody waiting is no unhandled rejection.
    done.catch(() => undefined);
    queued = { segment, text: "", tickets: [], state: "queued", done, settle };
    writeScheduled = setImmediate(writeQueued);
    return queued;
  };

  const syncTick = (): void => {
    const segment = current;
    if (!dirty || segment?.fd === undefined) {
      // Nothing written since the last sync: the timer stops until the next write.
      clearInterval(syncTimer);
      syncTimer = undefined;
      return;
    }
    if (segment.syncing) return;
    dirty = false;
    segment.syncing = true;
    fdatasync(segment.fd, (error) => {
      segment.syncing = false;
      // A broken disk shows in the next write; the sync is retried on the next tick (the timer
      // may have stopped while this one ran: nothing was written meanwhile).
      if (error !== null && segment === current) {
        dirty = true;
        armSync();
      }
      if (segment.closeWhenSynced) closeFile(segment);
    });
  };
  function armSync(): void {
    if (syncTimer !== undefined || closed) return;
    syncTimer = setInterval(syncTick, syncIntervalMs).unref();
  }

  return {
    recoveredCount: earlier.open,
    recovered: replay(),
    append(json) {
      if (closed) throw new Error("the decision journal is closed");
      const length = Buffer.byteLength(json, "utf8") + 1;
      if (total + length > maxBytes) throw new JournalFullError(maxBytes);
      let segment = current ?? start();
      if (segment.bytes >= segmentBytes) {
        writeQueued();
        if (current === segment) {
          current = undefined;
          finish(segment);
        }
        segment = start();
      }
      const batch = queue(segment);
      const ticket: Ticket = { segment, batch, released: false };
      batch.text += `${json}\n`;
      batch.tickets.push(ticket);
      segment.bytes += length;
      total += length;
      segment.open++;
      return ticket;
    },
    written(ticket) {
      const { batch } = ticket as Ticket;
      return batch === undefined || batch.state === "written" ? undefined : batch.done;
    },
    release(ticket) {
      const own = ticket as Ticket;
      if (own.released || own.batch?.state === "failed") return;
      own.released = true;
      const { segment } = own;
      segment.open--;
      if (segment.open === 0 && segment !== current && segment.fd === undefined) remove(segment);
    },
    bytes: () => total,
    close() {
      if (closed) return;
      writeQueued();
      closed = true;
      clearInterval(syncTimer);
      syncTimer = undefined;
      const last = current;
      current = undefined;
      if (last !== undefined) finish(last);
      try {
        unlinkSync(lockPath);
      } catch {
        // Already gone.
      }
    },
  };
}
