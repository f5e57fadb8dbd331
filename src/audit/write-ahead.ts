/**
 * The write-ahead file of one replica's decision records, in front of a SQLite store
 * (docs/decisions/2931). A decision record is appended here — one `write(2)`, handed to the
 * kernel, which keeps it when the process dies in any way — before its answer; the store
 * commit then goes with the records of the next few calls in one transaction (writer.ts,
 * `writeAhead`). Once everything appended is stored, the file is emptied.
 *
 * A process that died with records appended and not yet stored leaves them here: the next
 * start of the same replica stores them (`openStoreWriteAhead`) before its chains continue. Replay is idempotent: only records with an `id` are appended here, and
 * the store keeps one entry per id and log (decision 2751).
 *
 * One process per file: a `.lock` file holds the owner's pid and start; a live other owner refuses the
 * open. `fdatasync` runs at most once a second, in the thread pool, for a crash of the machine
 * (the store's own commits are not synced either: SQLite WAL with synchronous = NORMAL).
 */
import { createHash } from "node:crypto";
import {
  closeSync,
  constants,
  fdatasync,
  fdatasyncSync,
  fstatSync,
  ftruncateSync,
  openSync,
  readdirSync,
  readSync,
  rmSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Store } from "../store/store.ts";
import { isChainedLog } from "./chain.ts";

interface WriteAheadRecord {
  readonly log: string;
  readonly value: unknown;
}

export interface WriteAhead {
  /** Hands one record to the kernel; throws when it could not be written whole. */
  append(log: string, value: unknown): void;
  /** Everything appended so far is stored: the file is emptied. */
  settled(): void;
  /** Syncs and closes the file and releases the lock (the file stays when records remain). */
  close(): void;
}

export class WriteAheadLockedError extends Error {
  constructor(path: string, pid: number) {
    super(`the decision write-ahead file ${path} is held by process ${pid}`);
    this.name = "WriteAheadLockedError";
  }
}

/** At most one `fdatasync` a second while records are appended. */
const SYNC_INTERVAL_MS = 1000;

/** The write-ahead file of `stream` (a replica id) beside a SQLite file. */
export function writeAheadPathFor(sqlitePath: string, stream: string): string {
  const tag = createHash("sha256").update(stream).digest("hex").slice(0, 16);
  return `${sqlitePath}-decisions-${tag}.wal`;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * A lock names its owner by pid and the process's start (`performance.timeOrigin`): a lock with
 * this pid but another start was left by an earlier process that had the same pid (pid 1 in a
 * restarted container); one with this pid and this start is held by another writer of this process.
 */
const OWNER = `${process.pid} ${performance.timeOrigin}`;

/** Owner only: the records name partners and subjects. */
const FILE_MODE = 0o600;
/** Never through a symlink, never a FIFO or device that blocks or never ends. */
const NO_FOLLOW = constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** Creates the lock naming this process; false when it exists. */
function createLock(lock: string): boolean {
  let fd: number;
  try {
    fd = openSync(lock, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | NO_FOLLOW, FILE_MODE);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  }
  try {
    writeSync(fd, OWNER);
  } finally {
    closeSync(fd);
  }
  return true;
}

/** What a lock says of its owner; undefined for one that is not a small regular file (left damaged). */
function lockContent(lock: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(lock, constants.O_RDONLY | NO_FOLLOW);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ELOOP") return undefined;
    throw error;
  }
  try {
    if (!fstatSync(fd).isFile()) return undefined;
    const bytes = Buffer.alloc(64);
    return bytes.toString("utf8", 0, readSync(fd, bytes, 0, bytes.length, 0));
  } finally {
    closeSync(fd);
  }
}

function takeLock(path: string): string {
  const lock = `${path}.lock`;
  if (!createLock(lock)) {
    const held = lockContent(lock);
    const owner = Number.parseInt(held ?? "", 10);
    if (held === OWNER) throw new WriteAheadLockedError(path, owner);
    if (Number.isSafeInteger(owner) && owner !== process.pid && alive(owner))
      throw new WriteAheadLockedError(path, owner);
    // Left by a process that is gone: removed (a symlink itself, not what it points to), then
    // created anew; another process taking it over in between wins.
    rmSync(lock, { force: true });
    if (!createLock(lock))
      throw new WriteAheadLockedError(path, Number.parseInt(lockContent(lock) ?? "", 10));
  }
  return lock;
}

function releaseLock(lock: string): void {
  rmSync(lock, { force: true });
}

/** Read per chunk; a line longer than this is damage, skipped (records are a few KB). */
const CHUNK_BYTES = 1 << 20;
/** Records stored per store call while replaying. */
const REPLAY_BATCH = 256;

/**
 * One line's record; undefined for a line cut by a crash of the machine (its write never
 * returned) and for one the writer could not have appended (it appends only records of a
 * chained log that have an id and serialize): damage is skipped, never a start that fails at
 * every try.
 */
function recordOf(line: string): WriteAheadRecord | undefined {
  try {
    const parsed = JSON.parse(line) as Partial<WriteAheadRecord>;
    const { log, value } = parsed;
    if (typeof log !== "string" || !isChainedLog(log)) return undefined;
    if (typeof (value as { id?: unknown } | null | undefined)?.id !== "string") return undefined;
    // Nested too deep to be serialized again (the store would refuse it).
    JSON.stringify(value);
    return { log, value };
  } catch {
    // Not whole.
  }
  return undefined;
}

/**
 * The whole records of the file, in order, read in chunks of CHUNK_BYTES and handed over in
 * groups of at most REPLAY_BATCH: a file of any size is read without holding it whole.
 */
async function forEachBatch(fd: number, take: (records: WriteAheadRecord[]) => Promise<void>): Promise<void> {
  const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
  let carry = Buffer.alloc(0);
  let position = 0;
  let batch: WriteAheadRecord[] = [];
  const line = async (bytes: Buffer): Promise<void> => {
    const record = bytes.length > CHUNK_BYTES ? undefined : recordOf(bytes.toString("utf8"));
    if (record === undefined) return;
    batch.push(record);
    if (batch.length >= REPLAY_BATCH) {
      await take(batch);
      batch = [];
    }
  };
  for (;;) {
    const read = readSync(fd, chunk, 0, chunk.length, position);
    if (read === 0) break;
    position += read;
    let bytes = Buffer.concat([carry, chunk.subarray(0, read)]);
    let newline = bytes.indexOf(0x0a);
    while (newline !== -1) {
      await line(bytes.subarray(0, newline));
      bytes = bytes.subarray(newline + 1);
      newline = bytes.indexOf(0x0a);
    }
    // A line longer than a chunk is dropped as it grows, not held.
    carry = bytes.length > CHUNK_BYTES ? Buffer.alloc(0) : Buffer.from(bytes);
  }
  await line(carry);
  if (batch.length > 0) await take(batch);
}

/** The file itself (not a symlink's target, FIFO or device), for appending, owner only. */
function openFile(path: string): number {
  const flags = constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | NO_FOLLOW;
  const fd = openSync(path, flags, FILE_MODE);
  const stat = fstatSync(fd);
  if (!stat.isFile() || stat.nlink !== 1) {
    closeSync(fd);
    throw new Error(`the decision write-ahead file ${path} is not a regular file of its own`);
  }
  return fd;
}

/**
 * Opens (creating) the write-ahead file at `path`. `replayInto` stores the records an earlier
 * process left in it, and must run before anything is appended.
 */
export function openWriteAhead(path: string): {
  readonly writeAhead: WriteAhead;
  replayInto(store: Store): Promise<number>;
} {
  const lock = takeLock(path);
  let fd: number;
  try {
    fd = openFile(path);
  } catch (error) {
    releaseLock(lock);
    throw error;
  }
  /** A write failed, maybe after part of its line: the next line starts on a line of its own. */
  let damaged = false;
  let syncing: NodeJS.Timeout | undefined;
  let closed = false;
  const scheduleSync = (): void => {
    if (syncing !== undefined) return;
    syncing = setTimeout(() => {
      syncing = undefined;
      if (!closed) fdatasync(fd, () => undefined);
    }, SYNC_INTERVAL_MS);
    syncing.unref();
  };
  return {
    async replayInto(store) {
      let replayed = 0;
      await forEachBatch(fd, async (records) => {
        replayed += await replayWriteAhead(store, records);
      });
      return replayed;
    },
    writeAhead: {
      append(log, value) {
        if (closed) throw new Error("the decision write-ahead file is closed");
        const line = Buffer.from(`${damaged ? "\n" : ""}${JSON.stringify({ log, value })}\n`);
        // O_APPEND: one write of the whole line, or an error (a short write is one too).
        damaged = true;
        const written = writeSync(fd, line);
        if (written !== line.length) throw new Error("short write to the decision write-ahead file");
        damaged = false;
        scheduleSync();
      },
      settled() {
        if (closed) return;
        ftruncateSync(fd, 0);
        damaged = false;
      },
      close() {
        if (closed) return;
        closed = true;
        if (syncing !== undefined) clearTimeout(syncing);
        try {
          fdatasyncSync(fd);
        } finally {
          closeSync(fd);
          releaseLock(lock);
        }
      },
    },
  };
}

/**
 * Stores records a dead process left (in their order, log by log); entries the store holds
 * already keep their place. Resolves once all are stored; throws when the store fails.
 */
async function replayWriteAhead(store: Store, records: readonly WriteAheadRecord[]): Promise<number> {
  const byLog = new Map<string, unknown[]>();
  for (const { log, value } of records) {
    const values = byLog.get(log);
    if (values === undefined) byLog.set(log, [value]);
    else values.push(value);
  }
  for (const [log, values] of byLog) await store.appendMany(log, values);
  return records.length;
}

/**
 * Stores what the files of other streams beside `sqlitePath` hold when no live process has them
 * (a replica whose id was its hostname is replaced by a pod of another name: nothing would
 * replay its file), then removes each while still holding its lock. A file that cannot be
 * opened (held, a symlink) is left.
 */
async function adoptOrphans(store: Store, sqlitePath: string, own: string): Promise<void> {
  const directory = dirname(sqlitePath);
  const prefix = `${basename(sqlitePath)}-decisions-`;
  for (const name of readdirSync(directory)) {
    const file = join(directory, name);
    if (!name.startsWith(prefix) || !name.endsWith(".wal") || file === own) continue;
    let orphan: ReturnType<typeof openWriteAhead>;
    try {
      orphan = openWriteAhead(file);
    } catch {
      continue;
    }
    try {
      await orphan.replayInto(store);
      rmSync(file);
    } finally {
      orphan.writeAhead.close();
    }
  }
}

/**
 * The write-ahead file of `stream` when the store is a SQLite file (undefined otherwise): records
 * an earlier process of the stream left are stored first, then the file is emptied; so are those
 * of other streams' files no live process holds. Call before the stream's chain heads are read
 * from the store.
 */
export async function openStoreWriteAhead(store: Store, stream: string): Promise<WriteAhead | undefined> {
  // The SQLite store's file (src/store/sqlite: `path`); an in-memory database has none worth keeping.
  const path = store.backend === "sqlite" ? (store as { readonly path?: unknown }).path : undefined;
  if (typeof path !== "string" || path === "" || path === ":memory:") return undefined;
  const own = writeAheadPathFor(path, stream);
  const { writeAhead, replayInto } = openWriteAhead(own);
  try {
    await replayInto(store);
    writeAhead.settled();
    await adoptOrphans(store, path, own);
    return writeAhead;
  } catch (error) {
    writeAhead.close();
    throw error;
  }
}

type LogReads = Pick<Store, "readLog" | "queryLog" | "logIdsHeld">;

/**
 * The store as its readers see it while records may wait after their answer: a read of a
 * chained log (decisions, MCP rows, evidence) first stores what the writer holds, so a record
 * whose answer went out is found by the next read (a receipt lookup, the log views, the
 * ingest's check of held ids). Other reads and every write go straight to the store.
 */
export function readingAfterRecords(store: Store, flush: () => Promise<unknown>): Store {
  const reads: LogReads = {
    async readLog(log, options) {
      if (isChainedLog(log)) await flush();
      return store.readLog(log, options);
    },
    async queryLog(log, query) {
      if (isChainedLog(log)) await flush();
      return store.queryLog(log, query);
    },
    async logIdsHeld(log, ids) {
      if (isChainedLog(log)) await flush();
      return store.logIdsHeld(log, ids);
    },
  };
  const wrapped = (key: string | symbol): key is keyof LogReads =>
    key === "readLog" || key === "queryLog" || key === "logIdsHeld";
  // Bound once per method: the hot paths read the store's methods on every call.
  const bound = new Map<unknown, unknown>();
  return new Proxy(store, {
    get(target, key) {
      if (wrapped(key)) return reads[key];
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== "function") return value;
      let method = bound.get(value);
      if (method === undefined) {
        method = value.bind(target);
        bound.set(value, method);
      }
      return method;
    },
    // A read replaced on this view (a test holding one up) replaces the view's, not the store's
    // own, which the view's reads call.
    set(target, key, value) {
      if (wrapped(key)) reads[key] = value;
      else Reflect.set(target, key, value, target);
      return true;
    },
  });
}
