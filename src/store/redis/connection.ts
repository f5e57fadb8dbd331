/**
 * One ioredis connection that fails fast: no offline queue, no resending, bounded waits.
 * While Redis is down every call rejects with StoreUnavailableError within about
 * `readyTimeoutMs` (or `commandTimeoutMs` for a command already sent), and the client
 * keeps reconnecting in the background with capped backoff, so the same instance works
 * again once Redis is back.
 */
import { createHash } from "node:crypto";
import { Redis, type RedisOptions } from "ioredis";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import { StoreClosedError, StoreError, StoreInvalidArgumentError, StoreUnavailableError } from "../errors.ts";
import { closeRedisClient } from "./close-client.ts";

export interface RedisConnectionOptions {
  /** TCP connect (and handshake) limit per attempt, ms. Default 2000. */
  readonly connectTimeoutMs?: number;
  /** A sent command that gets no reply in this time fails, ms. Default 2000. */
  readonly commandTimeoutMs?: number;
  /** How long a call waits for a connection attempt under way to finish, ms. Default 1000. */
  readonly readyTimeoutMs?: number;
  /** Cap of the exponential reconnect backoff, ms. Default 2000. */
  readonly maxReconnectDelayMs?: number;
}

interface CheckedOptions {
  readonly connectTimeoutMs: number;
  readonly commandTimeoutMs: number;
  readonly readyTimeoutMs: number;
  readonly maxReconnectDelayMs: number;
}

function positiveInt(value: number | undefined, fallback: number, name: string): number {
  return positiveIntegerOption(value, fallback, name, (message) => {
    throw new StoreInvalidArgumentError(`${message}.`);
  });
}

function checkOptions(options: RedisConnectionOptions): CheckedOptions {
  return {
    connectTimeoutMs: positiveInt(options.connectTimeoutMs, 2000, "connectTimeoutMs"),
    commandTimeoutMs: positiveInt(options.commandTimeoutMs, 2000, "commandTimeoutMs"),
    readyTimeoutMs: positiveInt(options.readyTimeoutMs, 1000, "readyTimeoutMs"),
    maxReconnectDelayMs: positiveInt(options.maxReconnectDelayMs, 2000, "maxReconnectDelayMs"),
  };
}

/** Where the server is, for messages and health: host, port and db, never credentials. */
export interface RedisAddress {
  readonly host: string;
  readonly port: number;
  readonly db: number;
  readonly tls: boolean;
}

export function parseRedisUrl(url: string): RedisAddress {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // The URL itself may hold a password: it never goes into the message.
    throw new StoreInvalidArgumentError("Redis URL is malformed.");
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
    throw new StoreInvalidArgumentError("Redis URL must start with redis:// or rediss://.");
  }
  if (parsed.hostname === "") throw new StoreInvalidArgumentError("Redis URL has no host.");
  const dbText = parsed.pathname.replace(/^\//, "");
  const db = dbText === "" ? 0 : Number(dbText);
  if (!Number.isSafeInteger(db) || db < 0)
    throw new StoreInvalidArgumentError("Redis URL database is invalid.");
  return {
    host: parsed.hostname,
    port: parsed.port === "" ? 6379 : Number(parsed.port),
    db,
    tls: parsed.protocol === "rediss:",
  };
}

/** Reply errors that mean "cannot serve now" rather than "this command is wrong". */
const UNAVAILABLE_REPLIES =
  /^(LOADING|BUSY|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN|NOAUTH|WRONGPASS|NOPERM)\b/;

export interface LuaScript {
  readonly source: string;
  readonly sha: string;
  readonly keys: number;
}

export function luaScript(source: string, keys: number): LuaScript {
  return { source, keys, sha: createHash("sha1").update(source).digest("hex") };
}

interface Waiter {
  settle(ok: boolean): void;
}

export class RedisConnection {
  readonly address: RedisAddress;
  readonly client: Redis;
  readonly #options: CheckedOptions;
  readonly #waiters = new Set<Waiter>();
  #closed = false;
  #lastErrorCode: string | undefined;

  constructor(url: string, options: RedisConnectionOptions = {}) {
    this.address = parseRedisUrl(url);
    this.#options = checkOptions(options);
    const maxDelay = this.#options.maxReconnectDelayMs;
    const redisOptions: RedisOptions = {
      lazyConnect: true,
      connectTimeout: this.#options.connectTimeoutMs,
      commandTimeout: this.#options.commandTimeoutMs,
      // Commands never wait in a queue while disconnected, and are never sent twice:
      // a resent append would write the entry twice.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      retryStrategy: (attempt) => Math.min(50 * 2 ** Math.min(attempt, 16), maxDelay),
      protocol: 2,
    };
    this.client = new Redis(url, redisOptions);
    // Without a listener ioredis prints every connection error; the code is kept for health.
    this.client.on("error", (error: unknown) => {
      const code = (error as { code?: unknown } | null)?.code;
      this.#lastErrorCode = typeof code === "string" ? code : (error as Error | null)?.name;
    });
    // One listener per event for all waiting calls (not one per call).
    this.client.on("ready", () => {
      this.#lastErrorCode = undefined;
      this.#settleWaiters(true);
    });
    this.client.on("reconnecting", () => this.#settleWaiters(false));
    this.client.on("end", () => this.#settleWaiters(false));
  }

  get endpoint(): string {
    return `${this.address.host}:${this.address.port}`;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Safe state for health: status and the last error code (e.g. ECONNREFUSED). */
  get state(): string {
    return this.#lastErrorCode === undefined
      ? this.client.status
      : `${this.client.status}, last error ${this.#lastErrorCode}`;
  }

  /** Runs `operation` once the client is ready; every failure becomes a StoreError. */
  async run<R>(what: string, operation: (client: Redis) => Promise<R>, readyTimeoutMs?: number): Promise<R> {
    if (this.#closed) throw new StoreClosedError("redis");
    await this.#ready(what, readyTimeoutMs ?? this.#options.readyTimeoutMs);
    try {
      return await operation(this.client);
    } catch (error) {
      throw this.#toStoreError(error, what);
    }
  }

  /**
   * Resolves once the client is ready. A call made while a connection attempt is under way
   * waits for it (bounded); a call made while the client is between attempts (Redis known
   * to be down) fails at once rather than stalling every request of an outage.
   */
  #ready(what: string, timeoutMs: number): Promise<void> {
    const client = this.client;
    if (client.status === "ready") return Promise.resolve();
    const unavailable = (): StoreUnavailableError =>
      new StoreUnavailableError(`Redis at ${this.endpoint} is unavailable (${what}: ${this.state}).`);
    if (client.status === "reconnecting" || client.status === "close") return Promise.reject(unavailable());
    if (client.status === "wait" || client.status === "end") {
      // The outcome arrives as a "ready" or "reconnecting" event; a failed attempt
      // schedules its own retries through retryStrategy.
      client.connect().catch(() => undefined);
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        settle: (ok) => {
          clearTimeout(timer);
          this.#waiters.delete(waiter);
          if (ok) resolve();
          else reject(unavailable());
        },
      };
      const timer = setTimeout(() => waiter.settle(false), timeoutMs);
      this.#waiters.add(waiter);
    });
  }

  #settleWaiters(ok: boolean): void {
    for (const waiter of [...this.#waiters]) waiter.settle(ok);
  }

  #toStoreError(error: unknown, what: string): StoreError {
    if (error instanceof StoreError) return error;
    const name = (error as Error | null)?.name;
    const message = (error as Error | null)?.message ?? "";
    if (name === "ReplyError" && !UNAVAILABLE_REPLIES.test(message)) {
      return new StoreError(`Redis rejected ${what}.`, { cause: error });
    }
    return new StoreUnavailableError(`Redis at ${this.endpoint} is unavailable (${what}).`, { cause: error });
  }

  /** EVALSHA, loading the script with EVAL when the server does not know it (e.g. after a restart). */
  async script(client: Redis, script: LuaScript, args: ReadonlyArray<string | number>): Promise<unknown> {
    try {
      return await client.evalsha(script.sha, script.keys, ...args);
    } catch (error) {
      if ((error as Error | null)?.message?.startsWith("NOSCRIPT")) {
        return await client.eval(script.source, script.keys, ...args);
      }
      throw error;
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await closeRedisClient(this.client, this.#options.commandTimeoutMs);
  }
}
