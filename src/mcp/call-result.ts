/**
 * `tools/call` results (pure). An API tool answers with `structuredContent`
 * `{ status, headers, body, redaction_events }` and the same JSON as text content (for
 * clients that read only text); an upstream HTTP error is such a result with
 * `isError: true`. A failure before or instead of an upstream answer (invalid input,
 * constraint, timeout, unavailable credentials…) is an `isError` result whose text is the
 * service's public error body `{ error, message, details?, requestId }` — never a stack,
 * a cause, an upstream error text or a credential.
 */
import type { CallToolResult } from "@modelcontextprotocol/server";
import type { RedactionEvent } from "../core/redaction.ts";
import { type AuthorityError, type DenyExplanation, denyOutcome } from "../errors.ts";

export interface ApiToolContent {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[]>>;
  readonly body: unknown;
  readonly redaction_events: readonly RedactionEvent[];
  [key: string]: unknown;
}

export function apiToolResult(content: ApiToolContent, isError: boolean): CallToolResult {
  return {
    content: [{ type: "text", text: JSON.stringify(content) }],
    structuredContent: content,
    ...(isError ? { isError: true } : {}),
  };
}

/** The `_meta` key of a governed call's result that carries its decision's receipt (audit/receipts.ts). */
export const RECEIPT_META_KEY = "x-authority-receipt";

/**
 * The result with the receipt of the call's recorded decision in `_meta` (a header cannot
 * carry it: one HTTP response may hold several JSON-RPC answers). Nothing without a receipt.
 */
export function withReceipt(result: CallToolResult, receipt: string | undefined): CallToolResult {
  if (receipt === undefined) return result;
  return { ...result, _meta: { ...result._meta, [RECEIPT_META_KEY]: receipt } };
}

/** The public error body, as every HTTP route of the service answers it. */
export function errorBody(error: AuthorityError, requestId: string): Record<string, unknown> {
  return { ...error.toJSON(), requestId };
}

/**
 * No structuredContent: API tools declare an output schema for successful shapes, and a
 * client validates any structuredContent it receives against it.
 */
export function errorToolResult(error: AuthorityError, requestId: string): CallToolResult {
  return { content: [{ type: "text", text: JSON.stringify(errorBody(error, requestId)) }], isError: true };
}

/**
 * A governed call refused for a tool the caller's own policy lists (by the decision or a later
 * stage): the error body with the Deny outcome's fields — `reason`, the `rule` that decided it
 * and a `remedy` where one exists — from the one deny-body builder.
 */
export function denyToolResult(
  error: AuthorityError,
  requestId: string,
  explanation: DenyExplanation | undefined,
): CallToolResult {
  const body = { ...errorBody(error, requestId), ...denyOutcome(error.code, requestId, explanation) };
  return { content: [{ type: "text", text: JSON.stringify(body) }], isError: true };
}

/** A management tool's answer: the domain service's (public) view, as structured and text content. */
export function jsonToolResult(value: Record<string, unknown>): CallToolResult {
  return { content: [{ type: "text", text: JSON.stringify(value) }], structuredContent: value };
}

/** Where a downstream tool's result says what the gateway redacted (only when it did). */
export const REDACTION_EVENTS_META = "io.authority/redaction_events";

/**
 * A downstream MCP tool's answer as the send stage left it (the tool-result fields only,
 * scrubbed and redacted), with the redaction events in `_meta` when there are any.
 */
export function downstreamToolResult(body: unknown, events: readonly RedactionEvent[]): CallToolResult {
  const fields = typeof body === "object" && body !== null ? (body as Record<string, unknown>) : {};
  const result = {
    ...fields,
    content: Array.isArray(fields.content) ? fields.content : [],
  } as CallToolResult;
  return events.length === 0 ? result : { ...result, _meta: { [REDACTION_EVENTS_META]: [...events] } };
}
