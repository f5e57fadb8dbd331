/**
 * A real `redis-server` on a free loopback port, for tests and benchmarks.
 *
 *   const redis = await startRedisServer();
 *   after(() => redis.stop());
 *   redis.url            // redis://127.0.0.1:<port>  (with the password when one is set)
 *   await redis.stop();  await redis.start();   // outage and recovery on the same port
 *   await redis.kill();                          // crash (SIGKILL)
 *   redis.pause(); redis.resume();               // hung server (SIGSTOP / SIGCONT)
 *
 * The server runs under a small shell watchdog holding the read end of a pipe from this
 * process: if the test process dies in any way (even SIGKILL), the pipe closes and the
 * watchdog kills the server. Nothing is persisted: a restarted server starts empty.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { connect, type Socket } from "node:net";
import type { Readable, Writable } from "node:stream";
import { stablePort } from "./stable-port.ts";

export interface RedisServerOptions {
  /** Port to use; default a free one. */
  readonly port?: number;
  /** Sets `requirepass`; the url then carries it. */
  readonly password?: string;
  /** Extra `redis-server` arguments, e.g. ["--maxmemory", "10mb"]. */
  readonly args?: readonly string[];
  /** How long to wait for PING to answer, ms. Default 10000. */
  readonly startTimeoutMs?: number;
  /** The binary; default `redis-server` from PATH. */
  readonly binary?: string;
}

export interface RedisServerHandle {
  readonly host: string;
  readonly port: number;
  /** `redis://[:password@]127.0.0.1:<port>` */
  readonly url: string;
  readonly running: boolean;
  /** Starts again on the same port after stop() or kill(). */
  start(): Promise<void>;
  /** Graceful shutdown (SIGTERM); resolves when the process is gone. Safe to call twice. */
  stop(): Promise<void>;
  /** Abrupt death (SIGKILL); resolves when the process is gone. */
  kill(): Promise<void>;
  /** Freezes the server (SIGSTOP): connections stay open, nothing answers. */
  pause(): void;
  /** Undoes pause(). */
  resume(): void;
  /** What the server printed (for a failing test's message). */
  output(): string;
}

const HOST = "127.0.0.1";

// fd 3 keeps the pipe from the test process; the watchdog sees EOF when that process dies.
const WATCHDOG = `
exec 3<&0
"$0" "$@" >&2 &
pid=$!
echo "$pid"
( read -r _ <&3; kill -KILL "$pid" 2>/dev/null ) &
watchdog=$!
wait "$pid"
status=$?
kill "$watchdog" 2>/dev/null
exit "$status"
`;

type Child = ChildProcessByStdio<Writable, Readable, Readable>;

const live = new Set<Child>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once("exit", () => {
    for (const child of live) child.kill("SIGKILL");
  });
}

/** A free port the server can be restarted on (below the ephemeral range; stable-port.ts). */
export const freePort = (): Promise<number> => stablePort(HOST);

function setRef(child: Child, ref: boolean): void {
  for (const stream of [child.stdin, child.stdout, child.stderr]) {
    const socket = stream as unknown as Socket;
    if (ref) socket.ref();
    else socket.unref();
  }
  if (ref) child.ref();
  else child.unref();
}

function encodeCommand(parts: readonly string[]): string {
  return `*${parts.length}\r\n${parts.map((p) => `$${Buffer.byteLength(p)}\r\n${p}\r\n`).join("")}`;
}

/** One PING (after AUTH when a password is set); true when the server answered PONG. */
function ping(port: number, password: string | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: HOST, port });
    let received = "";
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on("error", () => done(false));
    socket.on("connect", () => {
      const auth = password === undefined ? "" : encodeCommand(["AUTH", password]);
      socket.write(auth + encodeCommand(["PING"]));
    });
    socket.on("data", (chunk) => {
      received += chunk.toString("utf8");
      if (received.includes("+PONG")) done(true);
      else if (received.includes("-") && received.endsWith("\r\n") && !received.startsWith("+OK"))
        done(false);
    });
  });
}

class RedisServer implements RedisServerHandle {
  readonly host = HOST;
  port: number;
  readonly #options: RedisServerOptions;
  #child: Child | undefined;
  #serverPid: number | undefined;
  #exited: Promise<void> = Promise.resolve();
  #output = "";

  constructor(port: number, options: RedisServerOptions) {
    this.port = port;
    this.#options = options;
  }

  get url(): string {
    const password = this.#options.password;
    return password === undefined
      ? `redis://${HOST}:${this.port}`
      : `redis://:${encodeURIComponent(password)}@${HOST}:${this.port}`;
  }

  get running(): boolean {
    return this.#child !== undefined;
  }

  output(): string {
    return this.#output;
  }

  async start(): Promise<void> {
    if (this.#child !== undefined) return;
    installExitHook();
    const args = [
      "--port",
      String(this.port),
      "--bind",
      HOST,
      "--save",
      "",
      "--appendonly",
      "no",
      "--protected-mode",
      "yes",
      "--daemonize",
      "no",
      ...(this.#options.password === undefined ? [] : ["--requirepass", this.#options.password]),
      ...(this.#options.args ?? []),
    ];
    const child = spawn("sh", ["-c", WATCHDOG, this.#options.binary ?? "redis-server", ...args], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.#child = child;
    live.add(child);
    child.stderr.on("data", (chunk: Buffer) => {
      this.#output = (this.#output + chunk.toString("utf8")).slice(-20_000);
    });
    child.stdin.on("error", () => undefined);
    let exitedEarly = false;
    this.#exited = new Promise<void>((resolve) => {
      child.once("exit", () => {
        exitedEarly = true;
        live.delete(child);
        if (this.#child === child) {
          this.#child = undefined;
          this.#serverPid = undefined;
        }
        resolve();
      });
    });
    const pidLine = new Promise<number>((resolve, reject) => {
      let text = "";
      child.stdout.on("data", (chunk: Buffer) => {
        text += chunk.toString("utf8");
        const line = text.split("\n")[0];
        if (text.includes("\n") && line !== undefined) resolve(Number(line.trim()));
      });
      child.once("exit", () => reject(new Error("redis-server exited before starting")));
    });
    pidLine.catch(() => undefined);

    const deadline = Date.now() + (this.#options.startTimeoutMs ?? 10_000);
    try {
      this.#serverPid = await pidLine;
      while (!(await ping(this.port, this.#options.password))) {
        if (exitedEarly) throw new Error("redis-server exited before answering PING");
        if (Date.now() > deadline) throw new Error("redis-server did not answer PING in time");
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } catch (error) {
      await this.kill();
      throw new Error(`${(error as Error).message} on port ${this.port}:\n${this.#output}`);
    }
    // A running server must not keep the test process alive (a forgotten stop() would hang
    // the runner); the exit hook and the watchdog still end it when the process goes.
    setRef(child, false);
  }

  async #signal(signal: NodeJS.Signals): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    const exited = this.#exited;
    setRef(child, true);
    if (this.#serverPid !== undefined) {
      try {
        if (signal !== "SIGKILL") process.kill(this.#serverPid, "SIGCONT");
        process.kill(this.#serverPid, signal);
      } catch {
        // Already gone; the shell is exiting too.
      }
    } else {
      child.kill("SIGKILL");
    }
    const guard = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(guard);
    child.stdin.destroy();
  }

  stop(): Promise<void> {
    return this.#signal("SIGTERM");
  }

  kill(): Promise<void> {
    return this.#signal("SIGKILL");
  }

  pause(): void {
    if (this.#serverPid !== undefined) process.kill(this.#serverPid, "SIGSTOP");
  }

  resume(): void {
    if (this.#serverPid !== undefined) process.kill(this.#serverPid, "SIGCONT");
  }
}

/** Starts a server; retries on another free port if the chosen one was taken meanwhile. */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServerHandle> {
  let lastError: unknown;
  for (let attempt = 0; attempt < (options.port === undefined ? 5 : 1); attempt++) {
    const server = new RedisServer(options.port ?? (await freePort()), options);
    try {
      await server.start();
      return server;
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}
