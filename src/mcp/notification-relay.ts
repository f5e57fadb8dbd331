/**
 * What a governed downstream tool call may pass back to its caller besides the result: the
 * downstream's `notifications/progress` and `notifications/message` (logging). The tools/call
 * handler (protocol-server.ts) opens one relay per call whose caller takes notifications,
 * holding the caller's own progress token and log level; the downstream send stage (downstream-send.ts) finds it in the call's
 * async context, scrubs and redacts each notification like the result and hands it over.
 * Bounded per call (count and bytes): what is past the bounds, or cannot be scrubbed, is
 * dropped and counted, never passed raw. The downstream never sees the caller's token and
 * cannot name it: progress leaves with the caller's token, whatever the downstream wrote.
 */
import { AsyncLocalStorage } from "node:async_hooks";

/** Notifications relayed to one call's caller, at most (the rest are dropped and counted). */
export const MAX_RELAYED_NOTIFICATIONS = 100;
/** Bytes of relayed notification params for one call, at most (JSON, after scrubbing). */
export const MAX_RELAYED_BYTES = 65_536;
/** Where a result says how many of the downstream's notifications were not relayed. */
export const DROPPED_NOTIFICATIONS_META = "io.authority/dropped_notifications";

/** The logging levels of MCP, least severe first (RFC 5424 severities). */
export const LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

export function isLogLevel(value: unknown): value is string {
  return typeof value === "string" && LOG_LEVELS.includes(value);
}

/** Whether a log line of `level` reaches a client whose threshold is `threshold`. */
export function passesLevel(level: string, threshold: string): boolean {
  return LOG_LEVELS.indexOf(level) >= LOG_LEVELS.indexOf(threshold);
}

export type RelayedNotification =
  | {
      readonly method: "notifications/progress";
      readonly params: { progress: number; total?: number; message?: string };
    }
  | {
      readonly method: "notifications/message";
      readonly params: { level: string; data: unknown; logger?: string };
    };

export interface DroppedNotifications {
  /** Past the per-call count or byte bound. */
  limit: number;
  /** Could not be scrubbed or redacted (fail closed). */
  scrub: number;
}

export interface NotificationRelay {
  /** The caller asked for progress (its request carried a progress token). */
  readonly wantsProgress: boolean;
  /** The least severe log level the caller takes; undefined: no log lines. */
  readonly logLevel: string | undefined;
  readonly dropped: DroppedNotifications;
  /** Sends one scrubbed notification to the caller (progress with the caller's own token). */
  send(notification: RelayedNotification): Promise<void>;
}

export function createNotificationRelay(options: {
  readonly progressToken: string | number | undefined;
  /** The caller's log level, asked for only when a downstream call needs it (an API tool never does). */
  readonly logLevel: () => string | undefined;
  readonly notify: (notification: { method: string; params: Record<string, unknown> }) => Promise<void>;
}): NotificationRelay {
  const { progressToken, notify } = options;
  let level: { readonly value: string | undefined } | undefined;
  const logLevel = (): string | undefined => {
    level ??= { value: options.logLevel() };
    return level.value;
  };
  return {
    wantsProgress: progressToken !== undefined,
    get logLevel() {
      return logLevel();
    },
    dropped: { limit: 0, scrub: 0 },
    async send(notification) {
      const threshold = notification.method === "notifications/message" ? logLevel() : undefined;
      if (notification.method === "notifications/progress") {
        if (progressToken === undefined) return;
        await notify({ method: notification.method, params: { ...notification.params, progressToken } });
      } else if (threshold !== undefined && passesLevel(notification.params.level, threshold)) {
        await notify({ method: notification.method, params: { ...notification.params } });
      }
    },
  };
}

const currentRelay = new AsyncLocalStorage<NotificationRelay>();

/** Runs one tool call with its relay: only that call's send stage finds it. */
export function withNotificationRelay<T>(relay: NotificationRelay, run: () => Promise<T>): Promise<T> {
  return currentRelay.run(relay, run);
}

/** The relay of the call in progress, if its caller can receive notifications. */
export function notificationRelay(): NotificationRelay | undefined {
  return currentRelay.getStore();
}
