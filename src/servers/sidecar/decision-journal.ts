import {
  closeSync,
  fdatasyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { positiveIntOption, SidecarConfigError } from "./errors.ts";

/**
 * The sidecar's write-ahead journal of decision records (docs/decisions/2501-decision-records-written-ahead.md).
 *
 * A record is written to a local file before the decision it records is answered, so a
 * request that was let through keeps its record whatever happens to the process next
 * (uncaught exception, OOM kill, SIGKILL): `writeSync` hands the bytes to the kernel, which
 * keeps them when the process dies; `fdatasync` every `syncIntervalMs` (and on rotation and
 * close) covers a crash of the machine up to that interval. Records the authority has taken
 * are released; a segment whose records are all released is deleted. On the next start, the
 * records of a previous process that were never released are read back (`recovered`) and
 * shipped again: the authority's log may then hold a record twice with the same `id` (as after
 * a lost reply), never not at all.
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
  /** Records of an earlier process never confirmed delivered: each once (its last line), oldest first. */
  readonly recovered: readonly RecoveredRecord[];
  /** Writes one record (a JSON text without newlines) before returning; throws when it could not. */
  append(json: string): JournalTicket;
  /** The record is with the authority (or was set aside): its line may go. */
  release(ticket: JournalTicket): void;
  /** Flushes to disk and closes; segments still holding unreleased records stay for the next start. */
  close(): void;
}

export interface DecisionJournalOptions {
  readonly dir: string;
  /** A segment is closed and a new one started past this size (default 4 MiB). */
  readonly segmentBytes?: number;
  /** fdatasync of the current segment when written to, at most this often (default 1000 ms). */
  readonly syncIntervalMs?: number;
}

interface Segment {
  readonly paths: readonly string[];
  fd: number | undefined;
  bytes: number;
  /** Lines not yet released. */
  open: number;
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

/** The last line of every record id in the segments, in the order of those last lines. */
function readRecords(paths: readonly string[]): string[] {
  const byId = new Map<string, string>();
  for (const path of paths) {
    for (const line of readFileSync(path, "utf8").split("\n")) {
      if (line === "") continue;
      let id: unknown;
      try {
        id = (JSON.parse(line) as { id?: unknown } | null)?.id;
      } catch {
        // A line cut short when the process died while writing it: nothing was answered yet.
        continue;
      }
      if (typeof id !== "string") continue;
      byId.delete(id);
      byId.set(id, line);
    }
  }
  return [...byId.values()];
}

export function openDecisionJournal(options: DecisionJournalOptions): DecisionJournal {
  const { dir } = options;
  if (typeof dir !== "string" || dir === "") throw new SidecarConfigError("the journal needs a directory");
  const segmentBytes = positiveIntOption(options.segmentBytes, 4 * 1024 * 1024, "segmentBytes");
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

  const remove = (segment: Segment): void => {
    for (const path of segment.paths) {
      try {
        unlinkSync(path);
      } catch {
        // Already gone: nothing to replay from it.
      }
    }
  };

  // The earlier process's records: one segment standing for all its files, removed once all are delivered.
  const earlier: Segment = { paths: found.map((f) => f.path), fd: undefined, bytes: 0, open: 0 };
  const lines = readRecords(earlier.paths);
  earlier.open = lines.length;
  if (earlier.open === 0) remove(earlier);
  const recovered = lines.map((json) => ({ json, ticket: { segment: earlier } }));

  let current: Segment | undefined;
  let dirty = false;

  const finish = (segment: Segment): void => {
    if (segment.fd !== undefined) {
      fdatasyncSync(segment.fd);
      closeSync(segment.fd);
      segment.fd = undefined;
    }
    if (segment.open === 0) remove(segment);
  };

  const start = (): Segment => {
    const path = join(dir, `decisions-${nextSeq++}.jsonl`);
    const segment: Segment = { paths: [path], fd: openSync(path, "a", 0o600), bytes: 0, open: 0 };
    current = segment;
    return segment;
  };

  const timer = setInterval(() => {
    if (!dirty || current?.fd === undefined) return;
    dirty = false;
    try {
      fdatasyncSync(current.fd);
    } catch {
      // The next append reports a broken disk; the sync is retried on the next tick.
      dirty = true;
    }
  }, syncIntervalMs).unref();

  return {
    recovered,
    append(json) {
      let segment = current ?? start();
      if (segment.bytes >= segmentBytes) {
        current = undefined;
        finish(segment);
        segment = start();
      }
      const line = Buffer.from(`${json}\n`, "utf8");
      try {
        for (let written = 0; written < line.length; ) {
          written += writeSync(segment.fd as number, line, written, line.length - written);
        }
      } catch (error) {
        // A line may be cut short: the next record starts a new segment (the reader skips the cut line).
        current = undefined;
        try {
          closeSync(segment.fd as number);
        } catch {
          // Closing a broken file can fail too.
        }
        segment.fd = undefined;
        if (segment.open === 0) remove(segment);
        throw error;
      }
      segment.bytes += line.length;
      segment.open++;
      dirty = true;
      return { segment };
    },
    release(ticket) {
      const segment = ticket.segment as Segment;
      segment.open--;
      if (segment.open === 0 && segment !== current && segment.fd === undefined) remove(segment);
    },
    close() {
      clearInterval(timer);
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
