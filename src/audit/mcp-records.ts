/**
 * MCP audit rows and binding-invoke evidence (pure builders). Neither ever holds a URL,
 * a credential or an unbounded body: URLs are hashed, request and response
 * representations are redacted again by the default sensitive-field rules (defence in
 * depth: callers pass already-redacted values) and cut at a size limit with a flag.
 */
import { createHash } from "node:crypto";
import { defaultSensitiveFieldRedaction, hashCanonical, type Sha256Ref } from "../core/index.ts";
import type { ErrorCode } from "../errors.ts";
import { boundedText, type DecisionOutcome, newRecordId } from "./records.ts";

/** Default size limit of one stored representation, in characters of its JSON text. */
export const DEFAULT_REPR_LIMIT = 4096;

export interface SafeRepresentation {
  /** JSON text of the redacted value, cut to the limit; null when there was no value. */
  readonly json: string | null;
  readonly truncated: boolean;
  /** Length of the whole JSON text before cutting. */
  readonly size: number;
}

function sha256Ref(text: string): Sha256Ref {
  return `sha256:${createHash("sha256").update(text).digest("hex")}`;
}

function jsonText(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return JSON.stringify("[unserializable]");
  }
}

export function safeRepresentation(value: unknown, limit = DEFAULT_REPR_LIMIT): SafeRepresentation {
  if (value === undefined) return { json: null, truncated: false, size: 0 };
  let redacted: unknown;
  try {
    redacted = defaultSensitiveFieldRedaction(value).body;
  } catch {
    // A value the redactor cannot walk is not stored at all.
    redacted = "[unrepresentable]";
  }
  const text = jsonText(redacted) ?? "null";
  if (text.length <= limit) return { json: text, truncated: false, size: text.length };
  const cut = Array.from(text.slice(0, limit)).slice(0, -1).join("");
  return { json: cut, truncated: true, size: text.length };
}

/** A digest of a value for evidence: canonical JSON when possible, plain JSON otherwise. */
export function valueDigest(value: unknown): Sha256Ref | null {
  if (value === undefined) return null;
  try {
    return hashCanonical(value);
  } catch {
    return sha256Ref(jsonText(value) ?? "null");
  }
}

export interface McpCallInput {
  readonly actor: string | null;
  readonly subject_id: string | null;
  readonly partner_id: string | null;
  readonly capability_id: string | null;
  readonly tool: string;
  readonly permission_id: string | null;
  readonly method: string | null;
  /** The upstream URL called; only its SHA-256 is stored. */
  readonly url: string | null;
  /** Upstream HTTP status; null when no response came. */
  readonly status: number | null;
  readonly duration_ms: number;
  /** Error code from src/errors.ts when the call failed (denied, invalid_input, upstream_timeout…). */
  readonly error_code?: string | null;
  /** The arguments as the caller may see them (no credentials). */
  readonly request?: unknown;
  /** The response as returned to the caller (already redacted). */
  readonly response?: unknown;
  readonly requestId: string;
  readonly time: Date | string;
}

export interface McpAuditRecord {
  readonly kind: "mcp_call";
  readonly id: string;
  readonly actor: string | null;
  readonly subject_id: string | null;
  readonly partner_id: string | null;
  readonly capability_id: string | null;
  readonly tool: string;
  readonly permission_id: string | null;
  readonly method: string | null;
  readonly url_hash: Sha256Ref | null;
  readonly status: number | null;
  readonly duration_ms: number;
  readonly error_code: string | null;
  readonly request: SafeRepresentation;
  readonly response: SafeRepresentation;
  readonly requestId: string;
  readonly time: string;
}

const iso = (time: Date | string): string => (typeof time === "string" ? time : time.toISOString());

export function mcpAuditRecord(input: McpCallInput, limit = DEFAULT_REPR_LIMIT): McpAuditRecord {
  return {
    kind: "mcp_call",
    id: newRecordId("mcp"),
    actor: boundedText(input.actor),
    subject_id: boundedText(input.subject_id),
    partner_id: boundedText(input.partner_id),
    capability_id: boundedText(input.capability_id),
    tool: boundedText(input.tool, 128) ?? "",
    permission_id: boundedText(input.permission_id, 2048),
    method: boundedText(input.method, 16),
    url_hash: input.url === null ? null : sha256Ref(input.url),
    status: input.status,
    duration_ms: Math.max(0, Math.round(input.duration_ms * 1000) / 1000),
    error_code: boundedText(input.error_code ?? null, 64),
    request: safeRepresentation(input.request, limit),
    response: safeRepresentation(input.response, limit),
    requestId: input.requestId,
    time: iso(input.time),
  };
}

export interface EvidenceInput {
  readonly binding_id: string;
  readonly actor: string | null;
  readonly subject_id: string;
  readonly partner_id: string;
  readonly capability_id: string | null;
  readonly permission_id: string | null;
  readonly operation_id?: string | null;
  readonly decision: DecisionOutcome;
  /** A deny reason, or the code a refusal after the decision stopped the call with. */
  readonly reason?: ErrorCode | null;
  /** Facts of the verified policy the decision used. */
  readonly policy?: { readonly document_hash: string; readonly policy_version: string } | null;
  /** The validated arguments (digested, not stored). */
  readonly request?: unknown;
  readonly response_status?: number | null;
  /** The redacted response body (digested, not stored). */
  readonly response?: unknown;
  readonly redaction_events?: number;
  /** The caller's Idempotency-Key (digested, not stored). */
  readonly idempotency_key?: string | null;
  readonly requestId: string;
  readonly time: Date | string;
}

export interface EvidenceRecord {
  readonly kind: "evidence";
  readonly id: string;
  readonly binding_id: string;
  readonly actor: string | null;
  readonly subject_id: string;
  readonly partner_id: string;
  readonly capability_id: string | null;
  readonly permission_id: string | null;
  readonly operation_id: string | null;
  readonly decision: DecisionOutcome;
  readonly reason: ErrorCode | null;
  readonly policy: { readonly document_hash: string; readonly policy_version: string } | null;
  readonly request_digest: Sha256Ref | null;
  readonly response_status: number | null;
  readonly response_digest: Sha256Ref | null;
  readonly redaction_events: number;
  readonly idempotency_key_hash: Sha256Ref | null;
  readonly requestId: string;
  readonly time: string;
}

export function evidenceRecord(input: EvidenceInput): EvidenceRecord {
  return {
    kind: "evidence",
    id: newRecordId("evd"),
    binding_id: boundedText(input.binding_id) ?? "",
    actor: boundedText(input.actor),
    subject_id: boundedText(input.subject_id) ?? "",
    partner_id: boundedText(input.partner_id) ?? "",
    capability_id: boundedText(input.capability_id),
    permission_id: boundedText(input.permission_id, 2048),
    operation_id: boundedText(input.operation_id ?? null, 256),
    decision: input.decision,
    reason: input.decision === "denied" ? (input.reason ?? null) : null,
    policy: input.policy ?? null,
    request_digest: valueDigest(input.request),
    response_status: input.response_status ?? null,
    response_digest: valueDigest(input.response),
    redaction_events: input.redaction_events ?? 0,
    idempotency_key_hash:
      input.idempotency_key === undefined || input.idempotency_key === null
        ? null
        : sha256Ref(input.idempotency_key),
    requestId: input.requestId,
    time: iso(input.time),
  };
}
