import { Redis, type RedisOptions } from "ioredis";
import { closeRedisClient } from "../../store/redis/close-client.ts";
import { PolicyCacheError, positiveCacheOption } from "./errors.ts";
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
 * The sidecar's view of Redis: policy heads (small GETs, auto-pipelined), sealed
 * verified-policy entries, and the change channel. It fails fast: no offline queue, no
 * retries of a sent command, a short command timeout — a Redis that is down or hung turns
 * into an error within `commandTimeoutMs`, which the cache turns into "freshness unknown"
 * (and, past the staleness bound, a deny). Reconnection runs in the background with a
 * backoff capped at `maxReconnectDelayMs`, so the sidecar recovers by itself.
 *
 * **Sync.** A PING goes over the subscribed connection every `syncIntervalMs` while lookups
 * use the view: from a `syncedWithin` call until `syncIdleAfterMs` after the last one (an idle
 * sidecar sends none). Redis answers it after every message it published before it processed
 * the PING, on the same connection, in order — so when the answer arrives, every change
 * published before the PING was sent has reached the `onChange` listeners.
 * `syncedWithin(generation, ms)` says whether that is true of a moment less than `ms` ago; a
 * call that finds it false starts a PING at once (not awaited: that lookup reads Redis). The generation changes whenever the
 * subscription is (re)established or lost: changes published while it was down are not
 * delivered, so what a listener learned in an older generation is not kept up to date.
 */

export interface RedisPolicyStoreOptions {
  readonly url: string;
  /** A sent command without a reply within this time fails (default 100 ms). */
  readonly commandTimeoutMs?: number;
  /** TCP connect limit per attempt (default 1000 ms). */
  readonly connectTimeoutMs?: number;
  /** Cap of the reconnect backoff (default 500 ms): recovery comes at most this late. */
  readonly maxReconnectDelayMs?: number;
  /** How often the change subscription is synced with a PING while lookups use it (default 100 ms). */
  readonly syncIntervalMs?: number;
  /** PINGs stop this long after the last `syncedWithin` call (default 1000 ms). */
  readonly syncIdleAfterMs?: number;
  /** Monotonic clock of `syncedWithin`, ms (default performance.now). */
  readonly now?: () => number;
}

export interface PolicyHeadStore {
  /** The subject's current head, null when Redis has none. Rejects when Redis cannot answer. */
  readHead(subjectId: string): Promise<number | null>;
  /** Raises the head to at least `head` (never lowers it); announces it on the channel when it went up. */
  raiseHead(subjectId: string, head: number): Promise<void>;
  getEntry(subjectId: string): Promise<string | null>;
  putEntry(subjectId: string, sealed: string, ttlMs: number): Promise<void>;
  /** Registers a change listener; returns the unsubscribe function. */
  onChange(listener: (change: PolicyChangeMessage) => void): () => void;
  /**
   * The generation of the change subscription while it is up, else undefined. A head read
   * sent while generation g is up, plus every change delivered in g, is the subject's head
   * for as long as g lasts.
   */
  subscribedGeneration(): number | undefined;
  /**
   * True when every change published until less than `ms` ago has reached the listeners of
   * `generation`. A call marks the view in use: it keeps the periodic sync running, and one
   * that answers false starts a sync at once.
   */
  syncedWithin(generation: number, ms: number): boolean;
}

export interface RedisPolicyStore extends PolicyHeadStore {
  /** True once a connection was ready at least once (readiness). */
  readonly reachedOnce: boolean;
  /** True while the command connection is ready. */
  readonly up: boolean;
  /** Resolves when the command connection is ready and the change channel subscribed, or rejects after timeoutMs. */
  waitReady(timeoutMs: number): Promise<void>;
  /** Syncs now: resolves once every change published before the call has reached the listeners. */
  sync(): Promise<void>;
  close(): Promise<void>;
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
  const commandTimeoutMs = positiveCacheOption(options.commandTimeoutMs, 100, "commandTimeoutMs");
  const connectTimeoutMs = positiveCacheOption(options.connectTimeoutMs, 1000, "connectTimeoutMs");
  const maxDelay = positiveCacheOption(options.maxReconnectDelayMs, 500, "maxReconnectDelayMs");
  const syncIntervalMs = positiveCacheOption(options.syncIntervalMs, 100, "syncIntervalMs");
  const syncIdleAfterMs = positiveCacheOption(options.syncIdleAfterMs, 1000, "syncIdleAfterMs");
  const now = options.now ?? (() => performance.now());
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
  const failed = (what: string, cause: unknown): PolicyCacheError =>
    new PolicyCacheError("freshness_unavailable", `redis ${what} failed`, { cause });
  /** Raised on every (re)subscription and every loss of it. */
  let generation = 0;
  /** The send time of the last answered sync, and its generation. */
  let synced = { generation: -1, at: Number.NEGATIVE_INFINITY };
  let syncing: Promise<void> | undefined;
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
    const sentAt = now();
    subscriber.subscribe(POLICY_CHANGES_CHANNEL).then(
      () => {
        if (closed || subscriber.status !== "ready") return;
        subscribed = true;
        generation++;
        // What was published before the SUBSCRIBE is in Redis' heads; what comes after arrives here.
        synced = { generation, at: sentAt };
        wakeIfReady();
      },
      () => setTimeout(subscribe, 100).unref(),
    );
  };
  subscriber.on("ready", subscribe);
  subscriber.on("close", () => {
    if (subscribed) generation++;
    subscribed = false;
  });

  /**
   * One PING on the subscribed connection (one at a time). Its answer comes after every
   * message published before Redis processed it, so it moves `synced` to its send time.
   */
  const syncOnce = (): Promise<void> => {
    if (syncing !== undefined) return syncing;
    if (!subscribed) return Promise.reject(new PolicyCacheError("freshness_unavailable", "not subscribed"));
    const sentIn = generation;
    const sentAt = now();
    const pending = subscriber.ping().then(
      () => {
        const newer = synced.generation !== sentIn || sentAt > synced.at;
        if (subscribed && generation === sentIn && newer) synced = { generation: sentIn, at: sentAt };
      },
      (error: unknown) => {
        throw failed("sync", error);
      },
    );
    syncing = pending.finally(() => {
      syncing = undefined;
    });
    return syncing;
  };
  /** The last `syncedWithin` call: PINGs run only while it is recent. */
  let lastDemandAt = Number.NEGATIVE_INFINITY;
  let syncTimer: NodeJS.Timeout | undefined;
  const syncInBackground = (): void => {
    if (subscribed && syncing === undefined) syncOnce().catch(() => undefined);
  };
  const syncTick = (): void => {
    if (now() - lastDemandAt > syncIdleAfterMs) {
      clearInterval(syncTimer);
      syncTimer = undefined;
      return;
    }
    syncInBackground();
  };
  const demandSync = (): void => {
    lastDemandAt = now();
    if (syncTimer !== undefined || closed) return;
    syncTimer = setInterval(syncTick, syncIntervalMs);
    syncTimer.unref();
  };
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
      const message = JSON.stringify({ subject_id: subjectId, head });
      try {
        await commands.eval(
          RAISE_HEAD_SCRIPT,
          1,
          policyHeadKey(subjectId),
          String(head),
          POLICY_CHANGES_CHANNEL,
          message,
          "if-raised",
        );
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

    subscribedGeneration() {
      return subscribed ? generation : undefined;
    },

    syncedWithin(of, ms) {
      demandSync();
      const fresh = synced.generation === of && now() - synced.at <= ms;
      if (!fresh) syncInBackground();
      return fresh;
    },

    async sync() {
      // A PING already on its way may have been sent before the caller's moment: send another.
      await syncing?.catch(() => undefined);
      await syncOnce();
    },

    async close() {
      if (closed) return;
      closed = true;
      clearInterval(syncTimer);
      listeners.clear();
      for (const client of [commands, subscriber]) await closeRedisClient(client, 500);
    },
  };
}
