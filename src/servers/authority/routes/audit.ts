import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { listOf, record } from "../../../admin/admin-response-schemas.ts";
import {
  decodeLogCursor,
  encodeLogCursor,
  MAX_CURSOR_LENGTH,
  queryDigest,
} from "../../../admin/log-cursor.ts";
import { findReceipt, parseReceipt } from "../../../audit/receipts.ts";
import {
  BILLING_SYNC_COLLECTION,
  encodeUsageComponent,
  parseUsageKey,
  periodStart,
  periodsBetween,
  USAGE_COUNTERS,
  type UsageGranularity,
  usagePeriodPrefix,
} from "../../../audit/usage.ts";
import { AuthorityError } from "../../../errors.ts";
import { assertCanReadPartner, assertRole, hasRole, type Principal } from "../../../identity/principal.ts";
import { logs } from "../../../store/model.ts";
import { requirePrincipal } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * Operations views: GET /admin/audit (policy changes and runtime decisions),
 * GET /admin/mcp-audit (MCP tool calls), GET /admin/evidence (binding invocations),
 * GET /admin/usage (counts by period and success state). Admins and auditors see every
 * partner (optionally filtered by `partner`); a partner admin sees only its own partner.
 * The log views answer from the store's indexes (Store.queryLog), in time order: a page
 * holds the matches. `cursor` is the opaque `next` of the previous page (admin/log-cursor.ts).
 * docs/admin-api.md.
 */

const MAX_LIMIT = 500;

const text = (max = 512) => ({ type: "string", minLength: 1, maxLength: max }) as const;
const timestamp = { type: "string", format: "date-time" } as const;
const paging = {
  cursor: { type: "string", minLength: 1, maxLength: MAX_CURSOR_LENGTH },
  // Query strings are not coerced (the base server's ajv has coerceTypes off).
  limit: { type: "string", pattern: "^[1-9][0-9]{0,2}$" },
  since: timestamp,
  until: timestamp,
  partner: text(256),
} as const;

interface PagingQuery {
  readonly cursor?: string;
  readonly limit?: string;
  readonly since?: string;
  readonly until?: string;
  readonly partner?: string;
}

interface UsageQuery {
  readonly period: UsageGranularity;
  readonly group_by: "subject" | "capability" | "permission";
  readonly since?: string;
  readonly until?: string;
  readonly partner?: string;
  readonly subject?: string;
  readonly capability?: string;
  readonly permission?: string;
  readonly state?: "allowed" | "denied";
}

/** The partner a principal may read: its own for a partner admin, any (or the one asked) for admin/auditor. */
function readablePartner(principal: Principal, asked: string | undefined): string | undefined {
  assertRole(principal, "admin", "auditor", "partner_admin");
  if (hasRole(principal, "admin") || hasRole(principal, "auditor")) return asked;
  const own = principal.partnerId;
  if (own === undefined) throw new AuthorityError("insufficient_role", "This principal names no partner.");
  assertCanReadPartner(principal, asked ?? own);
  return own;
}

function timeWindow(query: { since?: string; until?: string }): { since?: number; until?: number } {
  const since = query.since === undefined ? undefined : Date.parse(query.since);
  const until = query.until === undefined ? undefined : Date.parse(query.until);
  if (since !== undefined && until !== undefined && since > until) {
    throw new AuthorityError("invalid_request", "since must not be after until.");
  }
  return { ...(since === undefined ? {} : { since }), ...(until === undefined ? {} : { until }) };
}

type Row = Readonly<Record<string, unknown>>;

/** A log view: its route, its log, and per query parameter the schema and the row field it must equal. */
interface LogView {
  readonly path: string;
  readonly log: string;
  readonly filters: Readonly<Record<string, { readonly schema: object; readonly field: string }>>;
}

/** GET <path>: the log's rows matching the filters, for the partner the principal may read, oldest first. */
function logView(app: FastifyInstance, context: AuthorityContext, view: LogView): void {
  const properties = {
    ...paging,
    ...Object.fromEntries(Object.entries(view.filters).map(([n, f]) => [n, f.schema])),
  };
  app.get<{ Querystring: PagingQuery & Readonly<Record<string, string | undefined>> }>(
    view.path,
    {
      schema: {
        querystring: { type: "object", additionalProperties: false, properties },
        response: { 200: listOf(record([])) },
      },
    },
    async (request) => {
      const principal = await requirePrincipal(request, context);
      const query = request.query;
      const partner = readablePartner(principal, query.partner);
      const window = timeWindow(query);
      const where: Record<string, string> = {};
      for (const [name, filter] of Object.entries(view.filters)) {
        const value = query[name];
        if (value !== undefined) where[filter.field] = value;
      }
      // The scope is set last, from the principal: no filter can widen or replace it.
      if (partner !== undefined) where.partner_id = partner;
      const digest = queryDigest([view.path, partner ?? null, Object.entries(where).sort(), window]);
      const after = query.cursor === undefined ? undefined : decodeLogCursor(query.cursor, digest);
      const page = await context.store.queryLog<unknown>(view.log, {
        where,
        ...window,
        limit: Math.min(query.limit === undefined ? 100 : Number(query.limit), MAX_LIMIT),
        ...(after === undefined ? {} : { after }),
      });
      const items: Array<Row & { seq: number }> = [];
      for (const entry of page.entries) {
        const row = entry.value;
        // The store answered the scope already; a row outside it is never shown all the same.
        if (typeof row !== "object" || row === null) continue;
        if (partner !== undefined && (row as Row).partner_id !== partner) continue;
        items.push({ seq: entry.seq, ...(row as Row) });
      }
      return page.next === undefined ? { items } : { items, next: encodeLogCursor(page.next, digest) };
    },
  );
}

/**
 * The key range of a period's usage that a query needs: keys sort by period, partner, subject,
 * so the store reads the partner's (or the subject's) counters only.
 */
function usageScope(partner: string | undefined, subject: string | undefined): string {
  if (partner === undefined) return "";
  const partnerPart = `${encodeUsageComponent(partner)}|`;
  return subject === undefined ? partnerPart : `${partnerPart}${encodeUsageComponent(subject)}|`;
}

const MAX_PERIODS: Record<UsageGranularity, number> = { day: 400, hour: 24 * 31 };
const DEFAULT_SPAN_MS: Record<UsageGranularity, number> = { day: 29 * 86_400_000, hour: 23 * 3_600_000 };

export function auditRoutes(context: AuthorityServices): FastifyPluginAsync {
  const { store } = context;
  return async (app) => {
    logView(app, context, {
      path: "/admin/audit",
      log: logs.audit,
      filters: {
        kind: {
          schema: {
            type: "string",
            enum: ["decision", "policy_change", "binding_change", "user_grant", "log_only_change"],
          },
          field: "kind",
        },
        subject: { schema: text(), field: "subject_id" },
        capability: { schema: text(256), field: "capability_id" },
        decision: { schema: { type: "string", enum: ["allowed", "denied"] }, field: "decision" },
        reason: { schema: text(64), field: "reason" },
        transport: { schema: text(16), field: "transport" },
      },
    });

    logView(app, context, {
      path: "/admin/evidence",
      log: logs.evidence,
      filters: {
        subject: { schema: text(), field: "subject_id" },
        capability: { schema: text(256), field: "capability_id" },
        decision: { schema: { type: "string", enum: ["allowed", "denied"] }, field: "decision" },
        reason: { schema: text(64), field: "reason" },
        binding: { schema: text(256), field: "binding_id" },
      },
    });

    logView(app, context, {
      path: "/admin/mcp-audit",
      log: logs.mcpAudit,
      filters: {
        subject: { schema: text(), field: "subject_id" },
        capability: { schema: text(256), field: "capability_id" },
        tool: { schema: text(128), field: "tool" },
        permission: { schema: text(2048), field: "permission_id" },
      },
    });

    // Seals this replica's decision chains now (decision 2771): its queued records stored, then
    // a signed `demand` checkpoint — so an export taken next verifies with --require-sealed.
    // Platform admins only: it writes to every partner's chains.
    app.post(
      "/admin/audit/checkpoints",
      {
        schema: {
          response: {
            200: record(["stream", "reason", "time", "heads"], {
              stream: text(256),
              reason: text(32),
              time: text(64),
              heads: { type: "object", additionalProperties: record(["n", "hash"]) },
            }),
          },
        },
      },
      async (request) => {
        assertRole(await requirePrincipal(request, context), "admin");
        const seal = context.auditSeal;
        if (seal === undefined) throw new AuthorityError("not_found", "Checkpoints are not offered here.");
        const { stream, reason, time, heads } = await seal.sealNow();
        return { stream, reason, time, heads };
      },
    );

    // A decision's record by the receipt its response carried (x-authority-receipt), in the
    // caller's partner scope; a malformed receipt and one outside the scope are both not found.
    app.get<{ Params: { receipt: string } }>(
      "/admin/audit/receipts/:receipt",
      {
        schema: {
          params: {
            type: "object",
            required: ["receipt"],
            properties: { receipt: text(256) },
          },
          response: { 200: record([]) },
        },
      },
      async (request) => {
        const principal = await requirePrincipal(request, context);
        const partner = readablePartner(principal, undefined);
        const ref = parseReceipt(request.params.receipt);
        const found = ref === undefined ? undefined : await findReceipt(store, ref, partner);
        if (
          ref === undefined ||
          found === undefined ||
          typeof found.value !== "object" ||
          found.value === null
        ) {
          throw new AuthorityError("not_found", "No record has this receipt.");
        }
        return { log: ref.log, seq: found.seq, ...(found.value as Row) };
      },
    );

    app.get<{ Querystring: UsageQuery }>(
      "/admin/usage",
      {
        schema: {
          response: {
            200: record(["period", "group_by", "since", "until", "totals", "items"], {
              items: { type: "array", items: record([]) },
            }),
          },
          querystring: {
            type: "object",
            additionalProperties: false,
            properties: {
              period: { type: "string", enum: ["day", "hour"], default: "day" },
              group_by: { type: "string", enum: ["subject", "capability", "permission"], default: "subject" },
              since: timestamp,
              until: timestamp,
              partner: text(256),
              subject: text(),
              capability: text(256),
              permission: text(2048),
              state: { type: "string", enum: ["allowed", "denied"] },
            },
          },
        },
      },
      async (request) => {
        const principal = await requirePrincipal(request, context);
        const query = request.query;
        const partner = readablePartner(principal, query.partner);
        const granularity = query.period;
        const until = query.until === undefined ? context.now() : new Date(query.until);
        const since =
          query.since === undefined
            ? new Date(until.getTime() - DEFAULT_SPAN_MS[granularity])
            : new Date(query.since);
        if (since.getTime() > until.getTime()) {
          throw new AuthorityError("invalid_request", "since must not be after until.");
        }
        const periods = periodsBetween(since, until, granularity);
        if (periods.length > MAX_PERIODS[granularity]) {
          throw new AuthorityError(
            "invalid_request",
            `At most ${MAX_PERIODS[granularity]} ${granularity} periods per request.`,
          );
        }
        const rows = new Map<string, Record<string, unknown> & { count: number }>();
        const totals = { allowed: 0, denied: 0 };
        for (const period of periods) {
          const prefix = usagePeriodPrefix(granularity, period) + usageScope(partner, query.subject);
          const counters = await store.readCounters(USAGE_COUNTERS, prefix);
          const entries = Object.entries(counters);
          if (entries.length === 0) continue;
          const synced = await store.get(
            BILLING_SYNC_COLLECTION,
            usagePeriodPrefix(granularity, period).slice(0, -1),
          );
          for (const [key, count] of entries) {
            const parsed = parseUsageKey(key);
            if (parsed === undefined) continue;
            if (
              (partner !== undefined && parsed.partner_id !== partner) ||
              (query.subject !== undefined && parsed.subject_id !== query.subject) ||
              (query.capability !== undefined && parsed.capability_id !== query.capability) ||
              (query.permission !== undefined && parsed.permission_id !== query.permission) ||
              (query.state !== undefined && parsed.state !== query.state)
            ) {
              continue;
            }
            const group =
              query.group_by === "subject"
                ? { subject_id: parsed.subject_id }
                : query.group_by === "capability"
                  ? { capability_id: parsed.capability_id }
                  : { capability_id: parsed.capability_id, permission_id: parsed.permission_id };
            const id = JSON.stringify([period, parsed.partner_id, group, parsed.state]);
            const row = rows.get(id);
            if (row !== undefined) row.count += count;
            else {
              rows.set(id, {
                period,
                period_start: periodStart(period, granularity),
                partner_id: parsed.partner_id,
                ...group,
                state: parsed.state,
                count,
                billing_sync_status: synced === undefined ? "pending" : "synced",
              });
            }
            totals[parsed.state] += count;
          }
        }
        return {
          period: granularity,
          group_by: query.group_by,
          since: since.toISOString(),
          until: until.toISOString(),
          totals,
          items: [...rows.values()],
        };
      },
    );
  };
}
