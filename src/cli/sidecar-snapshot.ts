import { createHash } from "node:crypto";
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The sidecar's V8 start-up snapshot (decision 2799): `make sidecar-snapshot`
 * (scripts/build-sidecar-snapshot.ts) writes `sidecar.blob` and `snapshot.json` into
 * `build/sidecar-snapshot/`; `authority sidecar` starts from the blob when the stamp says it was
 * built by this Node from these sources, and from the sources otherwise. Built-ins only: this
 * module runs before anything else is loaded.
 */

export const SNAPSHOT_DIR = "build/sidecar-snapshot";
export const BLOB_FILE = "sidecar.blob";
export const STAMP_FILE = "snapshot.json";
/** `AUTHORITY_SIDECAR_SNAPSHOT`: another snapshot directory, or `off` to start from the sources. */
export const SNAPSHOT_ENV = "AUTHORITY_SIDECAR_SNAPSHOT";

export interface SnapshotStamp {
  /** `process.version` of the Node that built the blob (V8 refuses a blob from another build). */
  readonly node: string;
  /** The repository root it was built in: the bundle holds its files' absolute paths. */
  readonly root: string;
  /** The files the snapshot was built from, relative to the repository root. */
  readonly sources: readonly string[];
  /** SHA-256 over those files' names and contents (sourcesDigest). */
  readonly sha256: string;
}

/** SHA-256 over each file's name and content, in order; a missing file throws. */
export function sourcesDigest(root: string, sources: readonly string[]): string {
  const hash = createHash("sha256");
  for (const source of sources) {
    const content = readFileSync(join(root, source));
    hash.update(`${source}\0${content.length}\0`);
    hash.update(content);
  }
  return hash.digest("hex");
}

export type SnapshotChoice =
  | { readonly use: "blob"; readonly blob: string }
  | { readonly use: "sources"; readonly reason: string | undefined };

/**
 * Whether to start from the snapshot in `dir`: only when its stamp names this Node and the
 * sources still hash to what the blob was built from. `reason` says why not (undefined: no
 * snapshot was built, or it is switched off — nothing to report).
 */
export function chooseSnapshot(root: string, setting: string | undefined): SnapshotChoice {
  if (setting === "off") return { use: "sources", reason: undefined };
  const dir = setting === undefined || setting === "" ? join(root, SNAPSHOT_DIR) : setting;
  let stamp: SnapshotStamp;
  try {
    stamp = JSON.parse(readFileSync(join(dir, STAMP_FILE), "utf8")) as SnapshotStamp;
  } catch {
    return { use: "sources", reason: setting === undefined ? undefined : "no snapshot stamp" };
  }
  if (stamp.node !== process.version) {
    return { use: "sources", reason: `built by Node ${String(stamp.node)}, running ${process.version}` };
  }
  if (stamp.root !== root) return { use: "sources", reason: "built in another directory" };
  try {
    if (sourcesDigest(root, stamp.sources) !== stamp.sha256) {
      return { use: "sources", reason: "the sources changed since the snapshot was built" };
    }
  } catch {
    return { use: "sources", reason: "a source of the snapshot is missing" };
  }
  const blob = join(dir, BLOB_FILE);
  return existsSync(blob) ? { use: "blob", blob } : { use: "sources", reason: "the blob is missing" };
}

/**
 * `authority sidecar`: replaces this process with Node started from the snapshot (same pid,
 * arguments, environment and V8 flags) when it is fresh; returns otherwise, after saying why a
 * built snapshot was not used.
 */
export function startSidecarFromSnapshot(root: string): void {
  let choice = chooseSnapshot(root, process.env[SNAPSHOT_ENV]);
  if (choice.use === "blob") {
    // A failed execve ends the process (Node aborts): only with a Node binary it can run (in a
    // chroot without /proc, Node cannot tell its own path).
    if (process.execve !== undefined && isExecutable(process.execPath)) {
      const args = [...process.execArgv, "--snapshot-blob", choice.blob, ...process.argv.slice(2)];
      process.execve(process.execPath, [process.execPath, ...args], process.env);
    }
    choice = { use: "sources", reason: "this Node cannot start another process in its place" };
  }
  if (choice.reason !== undefined) {
    const line = { level: 40, time: Date.now(), name: "sidecar", reason: choice.reason };
    process.stderr.write(
      `${JSON.stringify({ ...line, msg: "start-up snapshot not used; starting from the sources" })}\n`,
    );
  }
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}
