/**
 * Usage counters (pure). Each decision adds 1 to two counters in the Store counter set
 * `usage`, one per period granularity:
 *
 *   <g>|<period>|<partner>|<subject>|<capability>|<permission>|<state>
 *
 * g is `d` (UTC day, period `2026-06-01`) or `h` (UTC hour, period `2026-06-01T13`);
 * state is `allowed` or `denied`. Per-subject, per-API and per-permission views are sums
 * over these keys, so one decision is counted exactly once in each view. Components are
 * percent-encoded (so `|` never appears inside one), an absent value is the empty
 * component, and a value longer than 64 encoded characters is replaced by `#` + the
 * first 32 hex digits of its SHA-256 (keys stay under the store's 512-character limit).
 */
import { createHash } from "node:crypto";
import type { DecisionOutcome } from "./records.ts";

export const USAGE_COUNTERS = "usage";
/** Documents `<g>|<period>` written by a billing sync once it has exported that period. */
export const BILLING_SYNC_COLLECTION = "billing_sync";

export type UsageGranularity = "day" | "hour";
export const usageGranularities: readonly UsageGranularity[] = ["day", "hour"];

const GRANULARITY_TOKEN: Record<UsageGranularity, string> = { day: "d", hour: "h" };

const MAX_COMPONENT = 64;

export function encodeUsageComponent(value: string | null | undefined): string {
  if (value === undefined || value === null || value === "") return "";
  const encoded = encodeURIComponent(value.isWellFormed() ? value : value.toWellFormed());
  if (encoded.length <= MAX_COMPONENT) return encoded;
  return `#${createHash("sha256").update(value).digest("hex").slice(0, 32)}`;
}

/** The stored component back as text: null when absent; a hashed one stays `#<hex>`. */
export function decodeUsageComponent(component: string): string | null {
  if (component === "") return null;
  if (component.startsWith("#")) return component;
  try {
    return decodeURIComponent(component);
  } catch {
    return component;
  }
}

/** The period a time falls in: `2026-06-01` (day) or `2026-06-01T13` (hour), UTC. */
export function periodOf(time: Date, granularity: UsageGranularity): string {
  const iso = time.toISOString();
  return granularity === "day" ? iso.slice(0, 10) : iso.slice(0, 13);
}

/** The start of a period as an ISO timestamp. */
export function periodStart(period: string, granularity: UsageGranularity): string {
  return granularity === "day" ? `${period}T00:00:00.000Z` : `${period}:00:00.000Z`;
}

/** Every period from `since` to `until` (inclusive), oldest first. */
export function periodsBetween(since: Date, until: Date, granularity: UsageGranularity): string[] {
  const stepMs = granularity === "day" ? 86_400_000 : 3_600_000;
  const first = Date.parse(periodStart(periodOf(since, granularity), granularity));
  const periods: string[] = [];
  for (let t = first; t <= until.getTime(); t += stepMs) periods.push(periodOf(new Date(t), granularity));
  return periods;
}

export interface UsageDimensions {
  readonly partner_id: string | null;
  readonly subject_id: string | null;
  readonly capability_id: string | null;
  readonly permission_id: string | null;
  readonly state: DecisionOutcome;
}

export function usagePeriodPrefix(granularity: UsageGranularity, period: string): string {
  return `${GRANULARITY_TOKEN[granularity]}|${period}|`;
}

export function usageKey(granularity: UsageGranularity, period: string, dims: UsageDimensions): string {
  return [
    GRANULARITY_TOKEN[granularity],
    period,
    encodeUsageComponent(dims.partner_id),
    encodeUsageComponent(dims.subject_id),
    encodeUsageComponent(dims.capability_id),
    encodeUsageComponent(dims.permission_id),
    dims.state,
  ].join("|");
}

/** The two keys (day and hour) one decision at `time` increments (components encoded once). */
export function usageKeysFor(time: Date, dims: UsageDimensions): string[] {
  const iso = time.toISOString();
  const rest = [
    encodeUsageComponent(dims.partner_id),
    encodeUsageComponent(dims.subject_id),
    encodeUsageComponent(dims.capability_id),
    encodeUsageComponent(dims.permission_id),
    dims.state,
  ].join("|");
  return [`d|${iso.slice(0, 10)}|${rest}`, `h|${iso.slice(0, 13)}|${rest}`];
}

export interface ParsedUsageKey extends UsageDimensions {
  readonly granularity: UsageGranularity;
  readonly period: string;
}

export function parseUsageKey(key: string): ParsedUsageKey | undefined {
  const parts = key.split("|");
  if (parts.length !== 7) return undefined;
  const [g, period, partner, subject, capability, permission, state] = parts as [
    string,
    string,
    string,
    string,
    string,
    string,
    string,
  ];
  const granularity = g === "d" ? "day" : g === "h" ? "hour" : undefined;
  if (granularity === undefined || (state !== "allowed" && state !== "denied")) return undefined;
  return {
    granularity,
    period,
    partner_id: decodeUsageComponent(partner),
    subject_id: decodeUsageComponent(subject),
    capability_id: decodeUsageComponent(capability),
    permission_id: decodeUsageComponent(permission),
    state,
  };
}
