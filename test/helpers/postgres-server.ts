/**
 * A throwaway PostgreSQL server for tests: `initdb` into a temp dir, then `postgres` on a free
 * loopback port with its unix socket in that dir. Nothing is kept: stop() removes the data.
 *
 *   const pg = await startPostgresServer();
 *   after(() => pg.stop());
 *   pg.url          // postgres://postgres@127.0.0.1:<port>/postgres
 *   pg.psql("select 1")   // the server's own psql, for setup and assertions
 *
 * The binaries come from Debian's postgresql package (/usr/lib/postgresql/<version>/bin; the
 * newest version there), which scripts/ensure-test-peers.sh installs. PostgreSQL refuses to
 * run as root: under root the server runs as the `postgres` user the package creates
 * (setpriv, which execs, so the pid the test holds is the postmaster's own).
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { chown, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { type PeerProcess, startPeerProcess } from "./peer-process.ts";
import { stablePort } from "./stable-port.ts";
import { makeTempDir } from "./temp-dir.ts";

const run = promisify(execFile);
const ROOT = "/usr/lib/postgresql";
const HOST = "127.0.0.1";

export interface PostgresServerHandle {
  readonly port: number;
  /** The directory holding the unix socket (`host=` for libpq). */
  readonly socketDir: string;
  /** postgres://postgres@127.0.0.1:<port>/postgres (trust authentication, loopback only). */
  readonly url: string;
  readonly version: string;
  /** The postmaster's pid (its backends are its children): for a bench's CPU accounting. */
  readonly pid: Promise<number>;
  /** Runs SQL through psql; resolves to its unaligned, tuples-only output. */
  psql(sql: string): Promise<string>;
  output(): string;
  stop(): Promise<void>;
}

/** The newest installed PostgreSQL's bin directory; throws, naming the package, when absent. */
export function postgresBinDir(): string {
  const versions = existsSync(ROOT)
    ? readdirSync(ROOT)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(ROOT, v, "bin", "initdb")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  const newest = versions[0];
  if (newest === undefined) {
    throw new Error(
      "PostgreSQL is not installed (Debian package postgresql): run scripts/ensure-test-peers.sh (make test does)",
    );
  }
  return join(ROOT, newest, "bin");
}

async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number((await run("id", ["-u", "postgres"])).stdout.trim());
  const gid = Number((await run("id", ["-g", "postgres"])).stdout.trim());
  return { uid, gid };
}

export async function startPostgresServer(startTimeoutMs = 30_000): Promise<PostgresServerHandle> {
  const bin = postgresBinDir();
  const version = bin.split("/").at(-2) ?? "";
  const dir = await makeTempDir("postgres-test-");
  const data = join(dir.path, "data");
  const socketDir = join(dir.path, "socket");
  await mkdir(socketDir);
  const user = await postgresUser();
  if (user !== undefined) {
    await chown(dir.path, user.uid, user.gid);
    await chown(socketDir, user.uid, user.gid);
  }
  // As root, every PostgreSQL binary runs as the postgres user.
  const as = (command: string, args: string[]): [string, string[]] =>
    user === undefined
      ? [command, args]
      : ["setpriv", [`--reuid=${user.uid}`, `--regid=${user.gid}`, "--init-groups", "--", command, ...args]];
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", LC_ALL: "C", TZ: "UTC" };

  const [initdb, initdbArgs] = as(join(bin, "initdb"), [
    "-D",
    data,
    "-U",
    "postgres",
    "-A",
    "trust",
    "-E",
    "UTF8",
    "--locale=C",
    "--no-sync",
  ]);
  try {
    await run(initdb, initdbArgs, { env, timeout: 60_000 });
  } catch (error) {
    await dir.cleanup();
    throw new Error(`initdb failed: ${(error as { stderr?: string }).stderr ?? String(error)}`);
  }

  const port = await stablePort(HOST);
  const [postgres, postgresArgs] = as(join(bin, "postgres"), [
    "-D",
    data,
    "-p",
    String(port),
    "-k",
    socketDir,
    "-c",
    `listen_addresses=${HOST}`,
    // a test server: speed over durability
    "-c",
    "fsync=off",
    "-c",
    "synchronous_commit=off",
    "-c",
    "full_page_writes=off",
    "-c",
    "max_connections=50",
  ]);
  const peer: PeerProcess = startPeerProcess({
    command: postgres,
    args: postgresArgs,
    env,
    stopSignal: "SIGINT",
  });

  const psql = async (sql: string): Promise<string> => {
    const [command, args] = as(join(bin, "psql"), [
      "-h",
      socketDir,
      "-p",
      String(port),
      "-U",
      "postgres",
      "-d",
      "postgres",
      "-v",
      "ON_ERROR_STOP=1",
      "-X",
      "-A",
      "-t",
      "-c",
      sql,
    ]);
    return (await run(command, args, { env, timeout: 30_000 })).stdout.trim();
  };

  const stop = async (): Promise<void> => {
    await peer.stop(10_000);
    await dir.cleanup();
  };

  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    const ready = await run(join(bin, "pg_isready"), ["-h", HOST, "-p", String(port), "-t", "1"], {
      env,
    }).then(
      () => true,
      () => false,
    );
    if (ready) break;
    if (!peer.running || Date.now() > deadline) {
      const output = peer.output();
      await stop();
      throw new Error(`PostgreSQL did not start on port ${port}: ${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  return {
    port,
    socketDir,
    url: `postgres://postgres@${HOST}:${port}/postgres`,
    version,
    pid: peer.pid,
    psql,
    output: () => peer.output(),
    stop,
  };
}
