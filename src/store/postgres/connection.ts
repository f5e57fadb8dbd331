/**
 * A bounded pg pool that fails closed: every query runs under a server-side statement timeout
 * and a client-side deadline a little longer (for a server or network that stops answering
 * altogether); waiting for a pooled connection is bounded too. Every driver failure becomes a
 * StoreError whose message names host, port and database, never the URL or its password. A
 * dropped connection is discarded by the pool and the next call opens a fresh one; reads lost
 * to a dropped connection are tried again, at most the pool's size of times (writes never: an
 * append may have committed before the connection died).
 */
import { DatabaseError, Pool, type PoolClient, type QueryResultRow } from "pg";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import { StoreClosedError, StoreError, StoreInvalidArgumentError, StoreUnavailableError } from "../errors.ts";

export interface PostgresConnectionOptions {
  /** Most connections the pool opens. Default 10. */
  readonly poolSize?: number;
  /** A statement running longer is cancelled by the server and fails as unavailable, ms. Default 5000. */
  readonly statementTimeoutMs?: number;
  /** TCP connect and authentication limit, and the longest wait for a free pooled connection, ms. Default 2000. */
  readonly connectTimeoutMs?: number;
  /** `application_name` of the sessions (shows in pg_stat_activity). Default `authority`. */
  readonly applicationName?: string;
}

interface CheckedOptions {
  readonly poolSize: number;
  readonly statementTimeoutMs: number;
  readonly connectTimeoutMs: number;
}

/** How much longer than the statement timeout the client waits before it gives the connection up. */
const CLIENT_DEADLINE_MARGIN_MS = 1000;

/** A positive whole-number option, or its fallback; anything else is a StoreInvalidArgumentError. */
export function positiveInt(value: number | undefined, fallback: number, name: string): number {
  return positiveIntegerOption(value, fallback, name, (message) => {
    throw new StoreInvalidArgumentError(`${message}.`);
  });
}

/** Where the server is, for messages and health: never the user or the password. */
export interface PostgresAddress {
  readonly host: string;
  readonly port: number;
  readonly database: string;
}

export function parsePostgresUrl(url: string): PostgresAddress {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // The URL itself may hold a password: it never goes into the message.
    throw new StoreInvalidArgumentError("PostgreSQL URL is malformed.");
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
    throw new StoreInvalidArgumentError("PostgreSQL URL must start with postgres:// or postgresql://.");
  }
  const socketHost = parsed.searchParams.get("host");
  const host = parsed.hostname !== "" ? parsed.hostname : (socketHost ?? "");
  if (host === "") throw new StoreInvalidArgumentError("PostgreSQL URL has no host.");
  const port = parsed.port === "" ? 5432 : Number(parsed.port);
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, "")) || "postgres";
  return { host, port, database };
}

/**
 * SQLSTATE classes and codes that mean "cannot serve now" rather than "this statement is
 * wrong": connection exceptions (08), insufficient resources (53), operator intervention
 * (57: shutdown, cannot connect now, and 57014, a statement cancelled by the timeout),
 * lock not available, serialization failure and deadlock (retry later), authentication (28)
 * and an unknown database (3D000: the server is there but not what was asked for).
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|57|28)|^(55P03|40001|40P01|3D000)$/;

/** Failures of a connection that was open: the next call gets a fresh one. */
const CONNECTION_LOST_SQLSTATE = /^(08|57P0)/;
const CONNECTION_LOST_MESSAGE = /Connection terminated unexpectedly|ECONNRESET|EPIPE|not queryable/i;

function isConnectionLost(error: unknown): boolean {
  if (error instanceof DatabaseError) return CONNECTION_LOST_SQLSTATE.test(error.code ?? "");
  const code = (error as { code?: unknown } | null)?.code;
  const message = (error as Error | null)?.message ?? "";
  return code === "ECONNRESET" || code === "EPIPE" || CONNECTION_LOST_MESSAGE.test(message);
}

export interface RunOptions {
  /** A read: when the connection it ran on turns out to be dead, run it again on another one (at most the pool's size of times). */
  readonly retryOnLostConnection?: boolean;
  /** Deadline of this call instead of the statement timeout (health checks, migrations), ms. */
  readonly timeoutMs?: number;
  /** The operation changes its session (locks, settings): close the connection afterwards. */
  readonly discardConnection?: boolean;
  /**
   * A name for the statement: each connection parses and plans it once, then only binds and
   * runs it (the hot statements: gets, appends). One name per SQL text.
   */
  readonly prepared?: string;
}

class ClientDeadlineError extends Error {
  override name = "ClientDeadlineError";
}

export class PostgresConnection {
  readonly address: PostgresAddress;
  readonly #options: CheckedOptions;
  readonly #pool: Pool;
  #closed = false;
  #lastErrorCode: string | undefined;

  constructor(url: string, options: PostgresConnectionOptions = {}) {
    this.address = parsePostgresUrl(url);
    this.#options = {
      poolSize: positiveInt(options.poolSize, 10, "poolSize"),
      statementTimeoutMs: positiveInt(options.statementTimeoutMs, 5000, "statementTimeoutMs"),
      connectTimeoutMs: positiveInt(options.connectTimeoutMs, 2000, "connectTimeoutMs"),
    };
    const applicationName = options.applicationName ?? "authority";
    if (!/^[A-Za-z0-9_.:-]{1,63}$/.test(applicationName)) {
      throw new StoreInvalidArgumentError("applicationName must be 1-63 letters, digits or _.:-.");
    }
    this.#pool = new Pool({
      connectionString: url,
      max: this.#options.poolSize,
      connectionTimeoutMillis: this.#options.connectTimeoutMs,
      idleTimeoutMillis: 30_000,
      statement_timeout: this.#options.statementTimeoutMs,
      // A transaction left open by a crashed caller must not hold locks for ever.
      idle_in_transaction_session_timeout: Math.max(this.#options.statementTimeoutMs * 2, 10_000),
      application_name: applicationName,
      keepAlive: true,
    });
    // An idle pooled connection that dies emits here; without a listener the process would
    // crash. The pool has already discarded it; the code is kept for health.
    const record = (error: Error): void => {
      this.#lastErrorCode = errorCode(error);
    };
    this.#pool.on("error", record);
    // A checked-out connection that dies also emits "error" (besides failing its query): the
    // pool listens only to idle ones, so each connection gets a listener of its own.
    this.#pool.on("connect", (client) => client.on("error", record));
  }

  /** host:port/database (never credentials). */
  get endpoint(): string {
    return `${this.address.host}:${this.address.port}/${this.address.database}`;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Safe state for health: the pool's counts and the last error code (e.g. ECONNREFUSED). */
  get state(): string {
    const pool = `${this.#pool.totalCount} open, ${this.#pool.idleCount} idle, ${this.#pool.waitingCount} waiting`;
    return this.#lastErrorCode === undefined ? pool : `${pool}, last error ${this.#lastErrorCode}`;
  }

  /** One query on a pooled connection; every failure becomes a StoreError. */
  query<R extends QueryResultRow>(
    what: string,
    sql: string,
    params: readonly unknown[] = [],
    options: RunOptions = {},
  ): Promise<R[]> {
    const query =
      options.prepared === undefined
        ? { text: sql, values: params as unknown[] }
        : { name: options.prepared, text: sql, values: params as unknown[] };
    return this.run(what, async (client) => (await client.query<R>(query)).rows, options);
  }

  /**
   * Runs `operation` on one pooled connection, under the client deadline. A connection that
   * failed or missed the deadline is destroyed, not returned to the pool.
   */
  async run<R>(
    what: string,
    operation: (client: PoolClient) => Promise<R>,
    options: RunOptions = {},
  ): Promise<R> {
    // When the server dropped several pooled connections, the next ones the pool hands out may
    // be dead too until it notices: each is destroyed as it fails, so a read tries at most the
    // pool's size of them before a fresh connection.
    for (let retries = 0; ; retries += 1) {
      try {
        return await this.#runOnce(operation, options);
      } catch (error) {
        const retry =
          options.retryOnLostConnection === true &&
          !this.#closed &&
          retries < this.#options.poolSize &&
          isConnectionLost(error);
        if (!retry) throw this.#toStoreError(error, what);
      }
    }
  }

  async #runOnce<R>(operation: (client: PoolClient) => Promise<R>, options: RunOptions): Promise<R> {
    if (this.#closed) throw new StoreClosedError("postgres");
    const client = await this.#pool.connect().catch((error: unknown) => {
      this.#lastErrorCode = errorCode(error);
      throw error;
    });
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new ClientDeadlineError("no answer before the client deadline")),
        options.timeoutMs ?? this.#options.statementTimeoutMs + CLIENT_DEADLINE_MARGIN_MS,
      );
    });
    const work = operation(client);
    try {
      const result = await Promise.race([work, deadline]);
      client.release(options.discardConnection === true);
      this.#lastErrorCode = undefined;
      return result;
    } catch (error) {
      // A connection that failed, timed out or is mid-transaction is never reused.
      client.release(error instanceof Error ? error : true);
      work.catch(() => undefined);
      this.#lastErrorCode = errorCode(error);
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  #toStoreError(error: unknown, what: string): StoreError {
    if (error instanceof StoreError) return error;
    if (error instanceof DatabaseError && !UNAVAILABLE_SQLSTATE.test(error.code ?? "")) {
      return new StoreError(`PostgreSQL rejected ${what} (SQLSTATE ${error.code ?? "unknown"}).`, {
        cause: error,
      });
    }
    const timedOut =
      error instanceof ClientDeadlineError || (error as DatabaseError | null)?.code === "57014";
    return new StoreUnavailableError(
      `PostgreSQL at ${this.endpoint} is unavailable (${what}${timedOut ? ": timed out" : ""}).`,
      { cause: error },
    );
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pool.end();
  }
}

/** A short, safe code for health: a SQLSTATE, a socket error code or the error's class name. */
function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === "string" && /^[A-Z0-9_]{1,32}$/.test(code)) return code;
  const name = (error as Error | null)?.name;
  return typeof name === "string" ? name.slice(0, 32) : undefined;
}
