/**
 * Whether a loaded policy may contribute tools to a listing. Pure. The same conditions
 * `decide()` checks before it looks at an operation — verified, this very subject's,
 * neither revoked nor expired — so a listing never shows a tool a call would refuse for
 * policy-wide reasons.
 */
import type { PolicyLoad } from "../core/decision.ts";
import { POLICY_SCHEMA_V1, type PolicyDocument, policyState } from "../core/policy-document.ts";
import type { DenyReason } from "../errors.ts";

export type ListablePolicy =
  | { readonly ok: true; readonly document: PolicyDocument }
  | { readonly ok: false; readonly reason: DenyReason };

/**
 * MCP callers are direct subjects (agents, users) authenticated by their own bearer
 * token: a v2 (headless external) policy needs a server-derived binding context that
 * this transport does not have, so it lists nothing — as `decide()` would refuse it.
 */
export function listablePolicy(load: PolicyLoad, subjectId: string, now: Date): ListablePolicy {
  if (!load.ok) return { ok: false, reason: load.reason };
  const document = load.document;
  if (document.schema_version !== POLICY_SCHEMA_V1 || document.subject.subject_id !== subjectId) {
    return { ok: false, reason: "subject_mismatch" };
  }
  const state = policyState(document, now);
  if (state === "revoked") return { ok: false, reason: "policy_revoked" };
  if (state === "expired") return { ok: false, reason: "policy_expired" };
  return { ok: true, document };
}
