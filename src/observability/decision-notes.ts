/**
 * Metrics and logs of what a decision carries beside its outcome (decision 2761): the shadow
 * policy's agreement with the enforced one, and allows made by a capability's log-only mode.
 * The authority counts every record it keeps (its own decisions and those its sidecars ship);
 * a sidecar counts its own decisions. Labels are bounded sets: transports and reason codes.
 */
import { Gauge, type Registry } from "prom-client";
import type { Logger } from "./logger.ts";
import { counter } from "./metrics.ts";

/** The fields of a decision record the metrics read. */
export interface NotedDecision {
  readonly decision: "allowed" | "denied";
  readonly reason?: string | null;
  readonly transport: string;
  readonly partner_id?: string | null;
  readonly capability_id?: string | null;
  readonly requestId?: string;
  readonly shadow?: {
    readonly decision: "allowed" | "denied" | "invalid";
    readonly reason: string | null;
    readonly agrees: boolean;
  };
  readonly log_only?: { readonly reason: string };
}

export interface DecisionNoteMetrics {
  observe(record: NotedDecision): void;
}

const ALLOWED = "allowed";

/** `<prefix>_shadow_decisions_total` and `<prefix>_log_only_allows_total`, and a warning per log-only allow. */
export function decisionNoteMetrics(
  registry: Registry,
  prefix: string,
  logger?: Logger,
): DecisionNoteMetrics {
  const shadows = counter(
    registry,
    `${prefix}_shadow_decisions_total`,
    "Decisions whose subject has a shadow policy for the capability, by agreement (agree, disagree, invalid: the shadow failed verification) and the enforced and shadow reasons (allowed for an allow).",
    ["transport", "agreement", "enforced", "shadow"],
  );
  const logOnly = counter(
    registry,
    `${prefix}_log_only_allows_total`,
    "Requests allowed only because their capability is in the platform-wide log-only mode, by the reason enforcement would have denied them.",
    ["transport", "reason"],
  );
  return {
    observe(record) {
      const shadow = record.shadow;
      if (shadow !== undefined) {
        const enforced =
          record.log_only?.reason ?? (record.decision === ALLOWED ? ALLOWED : (record.reason ?? "denied"));
        shadows.inc({
          transport: record.transport,
          agreement: shadow.decision === "invalid" ? "invalid" : shadow.agrees ? "agree" : "disagree",
          enforced,
          shadow: shadow.decision === ALLOWED ? ALLOWED : (shadow.reason ?? shadow.decision),
        });
      }
      if (record.log_only !== undefined && record.decision === ALLOWED) {
        logOnly.inc({ transport: record.transport, reason: record.log_only.reason });
        logger?.warn(
          {
            partner_id: record.partner_id,
            capability_id: record.capability_id,
            reason: record.log_only.reason,
            requestId: record.requestId,
          },
          "LOG-ONLY MODE: a request the policy denies was allowed (the capability is in the platform-wide log-only mode)",
        );
      }
    },
  };
}

/**
 * `<prefix>_log_only_capabilities`: how many capabilities are in the platform-wide log-only
 * mode now, read from the store at each scrape — loud while the mode is on, even before any
 * request is relaxed, on every replica (one replica's switch is every replica's). A failed read
 * keeps the last value (a scrape never fails for it).
 */
export function logOnlyModeGauge(
  registry: Registry,
  prefix: string,
  count: () => Promise<number>,
  onError: (error: unknown) => void = () => {},
): void {
  new Gauge({
    name: `${prefix}_log_only_capabilities`,
    help: "Capabilities in the platform-wide log-only mode (decide and record, but allow what the allow list denies): alert while it is above 0 outside onboarding.",
    registers: [registry],
    async collect() {
      try {
        this.set(await count());
      } catch (error) {
        onError(error);
      }
    },
  });
}
