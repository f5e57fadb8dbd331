import { Redis } from "ioredis";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import { closeRedisClient } from "../../store/redis/close-client.ts";
import { PolicyCacheError } from "./errors.ts";
import { isPolicyHead, POLICY_CHANGES_CHANNEL, policyHeadKey, RAISE_HEAD_SCRIPT } from "./redis-keys.ts";

/**
 * The authority service's side of sidecar freshness. After a policy write or revocation
 * (the `onPolicyChange(subjectId, head)` hook), it raises `authority:policy-head:<subject>`
 * to the new head and publishes `{subject_id, head}` on `authority:policy-changes`, in one
 * Lua script so both happen or neither does. Sidecars read that head on every request, so
 * a revocation stops allows everywhere as soon as the script ran.
 *
 * When Redis cannot be reached the change is kept (the highest head per subject) and
 * retried with backoff until it lands; meanwhile the sidecars cannot read heads either and
 * deny once their staleness bound passes, and every sidecar revalidates with the authority
 * at least every `maxAgeMs` whatever Redis says (see docs/sidecar.md).
 */

export interface PolicyChangePublisherOptions {
  readonly url: string;
  /** A command without a reply within this time fails (default 1000 ms). */
  readonly commandTimeoutMs?: number;
  /** First retry delay after a failed publish (default 100 ms), doubling up to maxRetryDelayMs. */
  readonly retryDelayMs?: number;
  readonly maxRetryDelayMs?: number;
  readonly logger?: { warn(obj: Record<string, unknown>, msg: string): void };
  /** Told when Redis becomes reachable or unreachable (the first failed connection included), once per change. */
  readonly onReachability?: (reachable: boolean, error?: unknown) => void;
}

export interface PolicyChangePublisher {
  /** Resolves true when the head is set and the change published, false when it was queued for retry. */
  publish(subjectId: string, head: number): Promise<boolean>;
  /** Changes waiting for Redis. */
  readonly pending: number;
  /** Whether the connection to Redis is up now. */
  readonly reachable: boolean;
  /** Whether it has been up at least once. */
  readonly reachedOnce: boolean;
  close(): Promise<void>;
}

export function createPolicyChangePublisher(options: PolicyChangePublisherOptions): PolicyChangePublisher {
  if (typeof options !== "object" || options === null || typeof options.url !== "string") {
    throw new PolicyCacheError("invalid_options", "publisher needs a redis url");
  }
  const invalid = (message: string): never => {
    throw new PolicyCacheError("invalid_options", message);
  };
  const commandTimeoutMs = positiveIntegerOption(options.commandTimeoutMs, 1000, "commandTimeoutMs", invalid);
  const firstDelay = positiveIntegerOption(options.retryDelayMs, 100, "retryDelayMs", invalid);
  const maxDelay = positiveIntegerOption(options.maxRetryDelayMs, 2000, "maxRetryDelayMs", invalid);
  const client = new Redis(options.url, {
    connectTimeout: 1000,
    commandTimeout: commandTimeoutMs,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt) => Math.min(50 * 2 ** Math.min(attempt, 10), maxDelay),
    protocol: 2,
  });
  let state: "connecting" | "up" | "down" = "connecting";
  let reachedOnce = false;
  const reachability = (up: boolean, error?: unknown): void => {
    if (up) reachedOnce = true;
    if (state === (up ? "up" : "down")) return;
    state = up ? "up" : "down";
    options.onReachability?.(up, error);
  };
  client.on("error", (error: unknown) => reachability(false, error));
  client.on("end", () => {
    if (!closed) reachability(false);
  });
  const pending = new Map<string, number>();
  let retryTimer: NodeJS.Timeout | undefined;
  let delay = firstDelay;
  let closed = false;

  const send = async (subjectId: string, head: number): Promise<void> => {
    const message = JSON.stringify({ subject_id: subjectId, head });
    await client.eval(
      RAISE_HEAD_SCRIPT,
      1,
      policyHeadKey(subjectId),
      String(head),
      POLICY_CHANGES_CHANNEL,
      message,
    );
  };

  const scheduleRetry = (wait = delay): void => {
    if (closed || retryTimer !== undefined || pending.size === 0) return;
    retryTimer = setTimeout(async () => {
      retryTimer = undefined;
      for (const [subjectId, head] of [...pending]) {
        try {
          await send(subjectId, head);
          if (pending.get(subjectId) === head) pending.delete(subjectId);
        } catch {
          delay = Math.min(delay * 2, maxDelay);
          scheduleRetry();
          return;
        }
      }
      delay = firstDelay;
      scheduleRetry();
    }, wait);
    retryTimer.unref();
  };

  // A connection that was lost is back: deliver what waited now, not after the backoff.
  client.on("ready", () => {
    reachability(true);
    if (pending.size === 0) return;
    if (retryTimer !== undefined) clearTimeout(retryTimer);
    retryTimer = undefined;
    delay = firstDelay;
    scheduleRetry(0);
  });

  return {
    get pending() {
      return pending.size;
    },
    get reachable() {
      return state === "up";
    },
    get reachedOnce() {
      return reachedOnce;
    },

    async publish(subjectId, head) {
      if (typeof subjectId !== "string" || subjectId.length === 0 || !isPolicyHead(head)) {
        throw new PolicyCacheError(
          "invalid_options",
          "publish needs a subject id and a non-negative integer head",
        );
      }
      if (closed) return false;
      try {
        await send(subjectId, head);
        return true;
      } catch (error) {
        pending.set(subjectId, Math.max(head, pending.get(subjectId) ?? 0));
        options.logger?.warn(
          { err: { name: (error as Error | null)?.name } },
          "policy change not published yet; retrying",
        );
        scheduleRetry();
        return false;
      }
    },

    async close() {
      if (closed) return;
      closed = true;
      if (retryTimer !== undefined) clearTimeout(retryTimer);
      await closeRedisClient(client, 500);
    },
  };
}
