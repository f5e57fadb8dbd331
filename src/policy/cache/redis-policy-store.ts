import { Redis, type RedisOptions } from "ioredis";
import { PolicyCacheError } from "./errors.ts";
import {
  POLICY_CHANGES_CHANNEL,
  type PolicyChangeMessage,
  parseHead,
  parsePolicyChange,
  policyEntryKey,
  policyHeadKey,
  RAISE_HEAD_SCRIPT,
} from "./redis-keys.ts";

/**
 * The sidecar's view of Redis: policy heads (one small GET per request, auto-pipelined),
 * sealed verified-policy entries, and the change channel. It fails fast: no offline
 * queue, no retries of a sent command, a short command timeout — a Redis that is down or
 * hung turns into an error within `commandTimeoutMs`, which the cache turns into "freshness
 * unknown" (and, past the staleness bound, a deny). Reconnection runs in the background with
 * a backoff capped at `maxReconnectDelayMs`, so the sidecar recovers by itself.
 */

export interface RedisPolicyStoreOptions {
  readonly url: string;
  /** A sent command without a reply within this time fails (default 100 ms). */
  readonly commandTimeoutMs?: number;
  /** TCP connect limit per attempt (default 1000 ms). */
  readonly connectTimeoutMs?: number;
  /** Cap of the reconnect backoff (default 500 ms): recovery comes at most this late. */
  readonly maxReconnectDelayMs?: number;
}

export interface PolicyHeadStore {
  /** The subject's current head, null when Redis has none. Rejects when Redis cannot answer. */
  readHead(subjectId: string): Promise<number | null>;
  /** Raises the head to at least `head` (never lowers it). */
  raiseHead(subjectId: string, head: number): Promise<void>;
  getEntry(subjectId: string): Promise<string | null>;
  putEntry(subjectId: string, sealed: string, ttlMs: number): Promise<void>;
  /** Registers a change listener; returns the unsubscribe function. */
  onChange(listener: (change: PolicyChangeMessage) => void): () => void;
}

export interface RedisPolicyStore extends PolicyHeadStore {
  /** True once a connection was ready at least once (readiness). */
  readonly reachedOnce: boolean;
  /** True while the command connection is ready. */
  readonly up: boolean;
  /** Resolves when the command connection is ready and the change channel subscribed, or rejects after timeoutMs. */
  waitReady(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

function positiveInt(value: number | undefined, fallback: number, name: string): number {
  const out = value ?? fallback;
  if (!Number.isSafeInteger(out) || out < 1)
    throw new PolicyCacheError("invalid_options", `${name} must be a positive integer`);
  return out;
}

function checkUrl(url: unknown): string {
  if (typeof url !== "string") throw new PolicyCacheError("invalid_options", "redis url is required");
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // The URL may carry a password: never quoted.
    throw new PolicyCacheError("invalid_options", "redis url is malformed");
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
    throw new PolicyCacheError("invalid_options", "redis url must start with redis:// or rediss://");
  }
  return url;
}

export function createRedisPolicyStore(options: RedisPolicyStoreOptions): RedisPolicyStore {
  if (typeof options !== "object" || options === null)
    throw new PolicyCacheError("invalid_options", "options are required");
  const url = checkUrl(options.url);
  const commandTimeoutMs = positiveInt(options.commandTimeoutMs, 100, "commandTimeoutMs");
  const connectTimeoutMs = positiveInt(options.connectTimeoutMs, 1000, "connectTimeoutMs");
  const maxDelay = positiveInt(options.maxReconnectDelayMs, 500, "maxReconnectDelayMs");
  const base: RedisOptions = {
    connectTimeout: connectTimeoutMs,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt) => Math.min(25 * 2 ** Math.min(attempt, 10), maxDelay),
    protocol: 2,
  };
  // Auto-pipelining: the head GETs of all requests in one tick leave in one write.
  const commands = new Redis(url, { ...base, commandTimeout: commandTimeoutMs, enableAutoPipelining: true });
  // Pub/sub needs its own connection. It subscribes on every "ready" itself: without an
  // offline queue a SUBSCRIBE sent before the first connect would be lost.
  const subscriber = new Redis(url, { ...base, autoResubscribe: false });
  const listeners = new Set<(change: PolicyChangeMessage) => void>();
  let reachedOnce = false;
  let subscribed = false;
  let closed = false;
  const readyWaiters = new Set<() => void>();
  const isReady = (): boolean => commands.status === "ready" && subscribed;
  const wakeIfReady = (): void => {
    if (!isReady()) return;
    for (const wake of [...readyWaiters]) wake();
  };

  // Without listeners ioredis prints every connection error; the state is in `up`.
  commands.on("error", () => undefined);
  subscriber.on("error", () => undefined);
  commands.on("ready", () => {
    reachedOnce = true;
    wakeIfReady();
  });
  // A SUBSCRIBE that fails on a connection that is still up is retried, so the sidecar never
  // stays connected but deaf to changes.
  const subscribe = (): void => {
    if (closed || subscriber.status !== "ready") return;
    subscriber.subscribe(POLICY_CHANGES_CHANNEL).then(
      () => {
        subscribed = true;
        wakeIfReady();
      },
      () => setTimeout(subscribe, 100).unref(),
    );
  };
  subscriber.on("ready", subscribe);
  subscriber.on("close", () => {
    subscribed = false;
  });
  subscriber.on("message", (channel: string, message: string) => {
    if (channel !== POLICY_CHANGES_CHANNEL) return;
    const change = parsePolicyChange(message);
    if (change === undefined) return;
    for (const listener of listeners) {
      try {
        listener(change);
      } catch {
        // A listener's failure must not stop the others.
      }
    }
  });

  const failed = (what: string, cause: unknown): PolicyCacheError =>
    new PolicyCacheError("freshness_unavailable", `redis ${what} failed`, { cause });

  return {
    get reachedOnce() {
      return reachedOnce;
    },
    get up() {
      return commands.status === "ready";
    },

    waitReady(timeoutMs) {
      if (isReady()) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const wake = () => {
          clearTimeout(timer);
          readyWaiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(() => {
          readyWaiters.delete(wake);
          reject(new PolicyCacheError("freshness_unavailable", "redis is not reachable"));
        }, timeoutMs);
        readyWaiters.add(wake);
      });
    },

    async readHead(subjectId) {
      try {
        return parseHead(await commands.get(policyHeadKey(subjectId)));
      } catch (error) {
        throw failed("head read", error);
      }
    },

    async raiseHead(subjectId, head) {
      try {
        await commands.eval(RAISE_HEAD_SCRIPT, 1, policyHeadKey(subjectId), String(head));
      } catch (error) {
        throw failed("head write", error);
      }
    },

    async getEntry(subjectId) {
      try {
        return await commands.get(policyEntryKey(subjectId));
      } catch (error) {
        throw failed("entry read", error);
      }
    },

    async putEntry(subjectId, sealed, ttlMs) {
      try {
        await commands.set(policyEntryKey(subjectId), sealed, "PX", Math.max(1, Math.floor(ttlMs)));
      } catch (error) {
        throw failed("entry write", error);
      }
    },

    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },

    async close() {
      if (closed) return;
      closed = true;
      listeners.clear();
      for (const client of [commands, subscriber]) {
        if (client.status === "ready") {
          await Promise.race([
            client.quit().catch(() => undefined),
            new Promise((r) => setTimeout(r, 500).unref()),
          ]);
        }
        client.disconnect();
      }
    },
  };
}
