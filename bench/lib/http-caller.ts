/**
 * The request paths' load generator in a process of its own (binding invoke, MCP tools/call,
 * the managed crypto API): the bench's servers are measured without the client on their
 * cores' event loop, and the generator's own CPU is reported beside theirs instead of being
 * mixed into it. It writes each request on a kept-alive socket (TCP or TLS) and reads only the
 * status line, the length (Content-Length or chunked) and, when asked, whether the body holds
 * an expected string — much less work per request than fetch (undici) or autocannon.
 *
 *   const caller = startHttpCaller();
 *   const { samplesMs, cpuUs } = await caller.sequential(target, 200);      // one at a time
 *   const result = await caller.closedLoop(target, { connections: 16, durationMs: 4000 });
 *   await caller.close();
 */
import { fork } from "node:child_process";
import { connect as connectTcp, type Socket } from "node:net";
import { connect as connectTls } from "node:tls";
import { fileURLToPath } from "node:url";
import { stopChild, track } from "./processes.ts";

export interface CallTarget {
  readonly url: string;
  readonly method: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
  /** A header sent with a value of its own on every call (`<prefix>-<n>`): idempotency keys. */
  readonly uniqueHeader?: { readonly name: string; readonly prefix: string };
  /** The answer's body must hold this string (checked on every call of `sequential`). */
  readonly expect?: string;
}

export interface SequentialResult {
  /** Each call's latency, write to the last byte of the answer. */
  readonly samplesMs: number[];
  /** The generator process's CPU over the calls (µs). */
  readonly cpuUs: number;
}

export interface ClosedLoopResult {
  readonly requests: number;
  readonly reqPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Answers that were not 2xx, and connections that failed. */
  readonly errors: number;
  readonly cpuUs: number;
  readonly wallMs: number;
}

export interface ClosedLoopOptions {
  readonly connections: number;
  readonly durationMs: number;
  /** Run first at the same concurrency, not recorded (JIT, connection set-up). */
  readonly warmupMs?: number;
}

export interface HttpCaller {
  readonly pid: number | undefined;
  sequential(target: CallTarget, count: number): Promise<SequentialResult>;
  closedLoop(target: CallTarget, options: ClosedLoopOptions): Promise<ClosedLoopResult>;
  close(): Promise<void>;
}

type Job =
  | { readonly kind: "sequential"; readonly target: CallTarget; readonly count: number }
  | { readonly kind: "closed"; readonly target: CallTarget; readonly options: ClosedLoopOptions };
type Reply = { ok: true; result: unknown } | { ok: false; error: string };

const ROLE = "bench-http-caller";

export function startHttpCaller(): HttpCaller {
  const child = track(
    fork(fileURLToPath(import.meta.url), [], {
      env: { ...process.env, BENCH_CALLER_ROLE: ROLE },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    }),
  );
  let queue: Promise<unknown> = Promise.resolve();
  const ask = <T>(job: Job): Promise<T> => {
    const next = queue.then(
      () =>
        new Promise<T>((resolve, reject) => {
          const onExit = (code: number | null) => reject(new Error(`http caller exited with ${code}`));
          child.once("exit", onExit);
          child.once("message", (reply: Reply) => {
            child.off("exit", onExit);
            if (reply.ok) resolve(reply.result as T);
            else reject(new Error(reply.error));
          });
          child.send(job);
        }),
    );
    queue = next.catch(() => undefined);
    return next;
  };
  return {
    pid: child.pid,
    sequential: (target, count) => ask({ kind: "sequential", target, count }),
    closedLoop: (target, options) => ask({ kind: "closed", target, options }),
    async close() {
      if (child.connected) child.disconnect();
      await stopChild(child);
    },
  };
}

interface Answer {
  readonly status: number;
  readonly body: Buffer;
}

const HEADER_END = Buffer.from("\r\n\r\n");
const CHUNKED_END = Buffer.from("\r\n0\r\n\r\n");

/** The first whole answer in `buffer` and its length, or undefined while incomplete. */
function parseAnswer(buffer: Buffer): { answer: Answer; length: number } | undefined {
  const end = buffer.indexOf(HEADER_END);
  if (end === -1) return undefined;
  const head = buffer.toString("latin1", 0, end);
  const status = Number(head.slice(9, 12));
  const bodyStart = end + HEADER_END.length;
  const match = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (match !== null) {
    const length = bodyStart + Number(match[1]);
    return buffer.length >= length
      ? { answer: { status, body: buffer.subarray(bodyStart, length) }, length }
      : undefined;
  }
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(head)) throw new Error("answer without a length");
  // Chunked bodies are read to their last chunk; the chunk framing stays in `body` (only searched).
  const last = buffer.indexOf(CHUNKED_END, bodyStart - 2);
  if (last === -1) return undefined;
  const length = last + CHUNKED_END.length;
  return { answer: { status, body: buffer.subarray(bodyStart, length) }, length };
}

/** One kept-alive connection; one request at a time. */
class Connection {
  readonly #socket: Socket;
  #buffer: Buffer = Buffer.alloc(0);
  #waiting: ((answer: Answer | Error) => void) | undefined;
  /** The server closed it (its keep-alive timeout between blocks): the next job opens another. */
  closed = false;

  private constructor(socket: Socket) {
    this.#socket = socket;
    socket.on("data", (chunk: Buffer) => this.#read(chunk));
    socket.on("error", (error) => this.#settle(error));
    socket.on("close", () => {
      this.closed = true;
      this.#settle(new Error("connection closed"));
    });
  }

  static open(url: URL): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const options = { host: url.hostname, port: Number(url.port), noDelay: true };
      const socket =
        url.protocol === "https:"
          ? // The bench's managed API serves a dev certificate made for the run.
            connectTls({ ...options, rejectUnauthorized: false }, () => resolve(new Connection(socket)))
          : connectTcp(options, () => resolve(new Connection(socket)));
      socket.once("error", reject);
    });
  }

  request(bytes: Buffer): Promise<Answer> {
    return new Promise((resolve, reject) => {
      this.#waiting = (answer) => (answer instanceof Error ? reject(answer) : resolve(answer));
      this.#socket.write(bytes);
    });
  }

  close(): void {
    this.#socket.destroy();
  }

  #read(chunk: Buffer): void {
    this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
    let parsed: ReturnType<typeof parseAnswer>;
    try {
      parsed = parseAnswer(this.#buffer);
    } catch (error) {
      this.#settle(error as Error);
      return;
    }
    if (parsed === undefined) return;
    this.#buffer = this.#buffer.subarray(parsed.length);
    this.#settle(parsed.answer);
  }

  #settle(answer: Answer | Error): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.(answer);
  }
}

const sentPerPrefix = new Map<string, number>();

/** Builds each call's request bytes; only the unique header changes from one call to the next. */
function requestWriter(target: CallTarget): { url: URL; next: () => Buffer } {
  const url = new URL(target.url);
  const body = target.body ?? "";
  const lines = [`${target.method} ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`];
  for (const [name, value] of Object.entries(target.headers ?? {})) lines.push(`${name}: ${value}`);
  lines.push(`content-length: ${Buffer.byteLength(body)}`, "connection: keep-alive");
  const head = lines.join("\r\n");
  const tail = `\r\n\r\n${body}`;
  const unique = target.uniqueHeader;
  if (unique === undefined) {
    const bytes = Buffer.from(head + tail);
    return { url, next: () => bytes };
  }
  return {
    url,
    next: () => {
      // Counted per prefix over the process's life: a key is never sent twice, whatever the jobs.
      const counter = (sentPerPrefix.get(unique.prefix) ?? 0) + 1;
      sentPerPrefix.set(unique.prefix, counter);
      return Buffer.from(`${head}\r\n${unique.name}: ${unique.prefix}-${counter}${tail}`);
    },
  };
}

const cpuNow = (): number => {
  const used = process.cpuUsage();
  return used.user + used.system;
};

/** Connections kept between jobs of the same origin, so a round's blocks reuse them. */
const kept = new Map<string, Connection>();

async function runSequential(target: CallTarget, count: number): Promise<SequentialResult> {
  const { url, next } = requestWriter(target);
  let connection = kept.get(url.origin);
  if (connection === undefined || connection.closed) {
    connection = await Connection.open(url);
    kept.set(url.origin, connection);
  }
  const expect = target.expect === undefined ? undefined : Buffer.from(target.expect);
  const samplesMs: number[] = [];
  const cpuBefore = cpuNow();
  try {
    for (let i = 0; i < count; i++) {
      const bytes = next();
      const start = performance.now();
      const answer = await connection.request(bytes);
      samplesMs.push(performance.now() - start);
      if (
        answer.status < 200 ||
        answer.status > 299 ||
        (expect !== undefined && !answer.body.includes(expect))
      )
        throw new Error(
          `${target.method} ${url.pathname} answered ${answer.status}: ${answer.body.toString().slice(0, 300)}`,
        );
    }
  } catch (error) {
    connection.close();
    kept.delete(url.origin);
    throw error;
  }
  return { samplesMs, cpuUs: cpuNow() - cpuBefore };
}

async function runClosedLoop(target: CallTarget, options: ClosedLoopOptions): Promise<ClosedLoopResult> {
  const { url, next } = requestWriter(target);
  const connections = await Promise.all(
    Array.from({ length: options.connections }, () => Connection.open(url)),
  );
  const phase = async (durationMs: number) => {
    const latencies: number[] = [];
    let errors = 0;
    const until = performance.now() + durationMs;
    const loop = async (connection: Connection): Promise<void> => {
      while (performance.now() < until) {
        const start = performance.now();
        const answer = await connection.request(next());
        if (answer.status < 200 || answer.status > 299) errors++;
        else latencies.push(performance.now() - start);
      }
    };
    const cpuBefore = cpuNow();
    const started = performance.now();
    await Promise.all(connections.map(loop));
    return { latencies, errors, cpuUs: cpuNow() - cpuBefore, wallMs: performance.now() - started };
  };
  try {
    if ((options.warmupMs ?? 0) > 0) await phase(options.warmupMs ?? 0);
    const { latencies, errors, cpuUs, wallMs } = await phase(options.durationMs);
    latencies.sort((a, b) => a - b);
    const at = (p: number) =>
      Number((latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0).toFixed(2));
    return {
      requests: latencies.length,
      reqPerSec: Math.round((latencies.length / wallMs) * 1000),
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      errors,
      cpuUs,
      wallMs,
    };
  } finally {
    for (const connection of connections) connection.close();
  }
}

if (process.env.BENCH_CALLER_ROLE === ROLE && process.send !== undefined) {
  const send = process.send.bind(process);
  process.on("message", (job: Job) => {
    const work =
      job.kind === "sequential"
        ? runSequential(job.target, job.count)
        : runClosedLoop(job.target, job.options);
    work.then(
      (result) => send({ ok: true, result } satisfies Reply),
      (error: unknown) => send({ ok: false, error: String(error) } satisfies Reply),
    );
  });
  process.on("disconnect", () => {
    for (const connection of kept.values()) connection.close();
    process.exit(0);
  });
}
