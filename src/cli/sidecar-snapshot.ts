import { createHash } from "node:crypto";
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

/**
 * The sidecar's V8 start-up snapshot (decisions 2799, 2951): `make sidecar-snapshot`
 * (scripts/build-sidecar-snapshot.ts) writes `sidecar.blob`, `node-version` and `snapshot.json`
 * into `build/sidecar-snapshot/`. The injected sidecar's command, `bin/authority-sidecar`, starts
 * Node from the blob when one was built for this Node (`node --snapshot-blob … bin/authority.ts
 * sidecar`: one Node bootstrap); `node bin/authority.ts sidecar` execs the same. Either way the
 * blob's main (checkSnapshotInMain) checks the stamp against the sources before anything else
 * runs, and starts from the sources when they changed. Built-ins only: this module runs before
 * anything else is loaded.
 */

/**
 * A start from the blob runs with V8's `gc` (bin/authority-sidecar passes it too): the warm-up
 * collects the start-up heap once before ready (decision 3021). A start from the sources goes
 * without it (its compile cache is keyed by the V8 flags).
 */
const EXPOSE_GC = "--expose-gc";

export const SNAPSHOT_DIR = "build/sidecar-snapshot";
export const BLOB_FILE = "sidecar.blob";
export const STAMP_FILE = "snapshot.json";
/** The Node version that built the blob, alone, for bin/authority-sidecar (a shell script) to compare. */
export const NODE_VERSION_FILE = "node-version";
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
 * snapshot was built, or it is switched off — nothing to report). `checkSources: false` leaves
 * the hash to the blob's own main (the launcher's cheap look before it execs it).
 */
export function chooseSnapshot(
  root: string,
  setting: string | undefined,
  { checkSources = true }: { readonly checkSources?: boolean } = {},
): SnapshotChoice {
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
  const changed = checkSources ? sourcesChanged(root, stamp) : undefined;
  if (changed !== undefined) return { use: "sources", reason: changed };
  const blob = join(dir, BLOB_FILE);
  return existsSync(blob) ? { use: "blob", blob } : { use: "sources", reason: "the blob is missing" };
}

function sourcesChanged(root: string, stamp: SnapshotStamp): string | undefined {
  try {
    return sourcesDigest(root, stamp.sources) === stamp.sha256
      ? undefined
      : "the sources changed since the snapshot was built";
  } catch {
    return "a source of the snapshot is missing";
  }
}

/** The entry both starts name: the sources a blob must match are the ones beside it. */
const ENTRY = join("bin", "authority.ts");

/**
 * `node bin/authority.ts sidecar`: replaces this process with Node started from the snapshot
 * (same pid, arguments, environment and V8 flags) when one was built here for this Node; the
 * blob's main checks the sources (checkSnapshotInMain). Returns otherwise, after saying why a
 * built snapshot was not used.
 */
export function startSidecarFromSnapshot(root: string): void {
  let choice = chooseSnapshot(root, process.env[SNAPSHOT_ENV], { checkSources: false });
  if (choice.use === "blob") {
    const execve = replaceItself();
    if (execve !== undefined) {
      // argv[1] (this entry) stays: the blob's main finds the sources it must match from it.
      const args = [...process.execArgv, EXPOSE_GC, "--snapshot-blob", choice.blob, ...process.argv.slice(1)];
      execve(process.execPath, [process.execPath, ...args], process.env);
    }
    choice = { use: "sources", reason: "this Node cannot start another process in its place" };
  }
  if (choice.reason !== undefined) reportNotUsed(choice.reason);
}

/**
 * The blob's main runs this before anything else. Started as `node --snapshot-blob
 * <dir>/sidecar.blob <root>/bin/authority.ts sidecar …` (bin/authority-sidecar, or the launcher
 * above), it returns only when the stamp in `<dir>` names this Node, `<root>`, this blob and
 * sources that still hash to what it was built from. Otherwise the process replaces itself with
 * `node <root>/bin/authority.ts sidecar …` and the snapshot switched off, or exits when it
 * cannot: a stale blob never decides.
 */
export function checkSnapshotInMain(): void {
  const entry = process.argv[1];
  const flagAt = process.execArgv.indexOf("--snapshot-blob");
  const blob = flagAt < 0 ? undefined : process.execArgv[flagAt + 1];
  if (entry === undefined || !resolve(entry).endsWith(`/${ENTRY}`) || blob === undefined) {
    process.stderr.write(
      "authority: start the sidecar's snapshot as bin/authority-sidecar does (node --snapshot-blob <blob> <app>/bin/authority.ts sidecar)\n",
    );
    process.exit(1);
  }
  const root = `${resolve(dirname(entry), "..")}/`;
  const choice = chooseSnapshot(root, dirname(resolve(blob)));
  if (choice.use === "blob" && choice.blob === resolve(blob)) return;
  reportNotUsed(
    choice.use === "sources" ? (choice.reason ?? "no snapshot stamp") : "another blob than its stamp's",
  );
  const execve = replaceItself();
  if (execve === undefined) {
    process.stderr.write("authority: this Node cannot start the sidecar from its sources in its place\n");
    process.exit(1);
  }
  const flags = process.execArgv.filter(
    (flag, index) => index !== flagAt && index !== flagAt + 1 && flag !== EXPOSE_GC,
  );
  execve(process.execPath, [process.execPath, ...flags, entry, ...process.argv.slice(2)], {
    ...process.env,
    [SNAPSHOT_ENV]: "off",
  });
}

function reportNotUsed(reason: string): void {
  const line = { level: 40, time: Date.now(), name: "sidecar", reason };
  process.stderr.write(
    `${JSON.stringify({ ...line, msg: "start-up snapshot not used; starting from the sources" })}\n`,
  );
}

/**
 * `process.execve`, when this process can replace itself: a failed execve ends the process
 * (Node aborts), so only with a Node binary it can run (in a chroot without /proc, Node cannot
 * tell its own path).
 */
function replaceItself(): typeof process.execve {
  if (process.execve === undefined) return undefined;
  try {
    accessSync(process.execPath, constants.X_OK);
    return process.execve.bind(process);
  } catch {
    return undefined;
  }
}
