import { type DenyExplanation, type DenyReason, refinedDenyRules } from "../errors.ts";
import { type Capability, catalogMatcher, operationPermissionId } from "./capability.ts";
import type { OperationSnapshot } from "./operation-snapshot.ts";
import { hasConstraints } from "./parameter-constraints.ts";
import type { PathMatch } from "./path-template.ts";
import { pathPatternsUsable, pathValuesAcceptable } from "./path-values.ts";
import type { PermissionId } from "./permission-id.ts";
import {
  entrySnapshotFor,
  POLICY_SCHEMA_V2,
  type PolicyDocument,
  policyEntryFor,
  policyState,
} from "./policy-document.ts";
import type { RedactionRule } from "./redaction.ts";

/** The outcome of loading the subject's policy: a verified document, or why there is none. */
export type PolicyLoad =
  | { readonly ok: true; readonly document: PolicyDocument }
  | { readonly ok: false; readonly reason: "missing_policy" | "policy_verification_failed" };

/**
 * The context of an external (headless) subject, derived server-side from the binding,
 * the token issuer and the token subject — never chosen by the caller.
 */
export interface ExternalSubjectContext {
  readonly partnerId: string;
  readonly bindingId: string;
  readonly issuerHash: string;
  readonly externalSubjectHash: string;
  readonly mappingVersion: string;
}

export interface DecisionInput {
  /** The authenticated (or derived) subject id. */
  readonly subjectId: string | undefined;
  readonly capabilityId: string | undefined;
  /** The catalog resolved for capabilityId in the caller's partner scope. */
  readonly capability: Capability | undefined;
  readonly policy: PolicyLoad;
  /**
   * Required for v2 policies (all six context fields are compared); when present, a v1
   * policy cannot satisfy it and is a subject_mismatch. Absent: v1 compares subject ids.
   */
  readonly expectedContext?: ExternalSubjectContext;
  readonly method: string;
  /** Request path (query allowed) or the operation's path template itself. */
  readonly path: string;
  /**
   * True when `path` is the operation's template (authorize-invocation, invoke by
   * permission id or template, MCP): segments spelled as in the template are placeholders
   * whose values are checked when the upstream request is rendered and matched again.
   * Absent or false: the path is a concrete request path and every value is checked.
   */
  readonly pathIsTemplate?: boolean;
  readonly now: Date;
  /**
   * The parameter-scoping rollout covers the policy-owner partner (`rolloutCovers`): its
   * signed constraints are enforced. Absent or false: an operation with constraints is not
   * allowed (`operation_not_allowed`, at the allow list's step) — SPEC: a constrained request
   * outside the rollout fails closed, on every path, authorize-invocation included.
   */
  readonly constraintsEnforced?: boolean;
}

export interface AllowedDecision {
  readonly status: "allowed";
  readonly permissionId: PermissionId;
  /** The policy's reviewed snapshot for the permission id (not the live catalog's). */
  readonly operation: OperationSnapshot;
  /** The policy entry's response rules for this permission id. */
  readonly redactions: readonly RedactionRule[];
  /** The auth profile the policy entry assigns. */
  readonly authProfileRef: string;
  /** Decoded path parameters of the matched template. */
  readonly params: Readonly<Record<string, string>>;
  /** The catalog the request matched: a rendered upstream request is matched against it again. */
  readonly capability: Capability;
}

export interface DeniedDecision {
  readonly status: "denied";
  readonly reason: DenyReason;
  /**
   * The rule and remedy, where the step knows more than its reason says (errors.ts
   * explainDeny fills in the rest). The permission to ask for is named only at the allow
   * list's step: the caller's own verified, standing policy covers the capability and the
   * request matched one of its operations.
   */
  readonly explanation?: DenyExplanation;
}

export type Decision = AllowedDecision | DeniedDecision;

const denied = (reason: DenyReason): DeniedDecision => ({ status: "denied", reason });

const ROLLOUT_GATE: DeniedDecision = Object.freeze({
  status: "denied",
  reason: "operation_not_allowed",
  explanation: { rule: refinedDenyRules.constraintsRollout },
});

function notInAllowlist(permissionId: PermissionId): DeniedDecision {
  return {
    status: "denied",
    reason: "operation_not_allowed",
    explanation: {
      rule: "decide/allowlist",
      remedy: { action: "request_permission", permission_id: permissionId },
    },
  };
}

const present = (value: string | undefined): value is string => typeof value === "string" && value.length > 0;

function subjectMatches(
  doc: PolicyDocument,
  subjectId: string,
  expected: ExternalSubjectContext | undefined,
): boolean {
  if (doc.schema_version !== POLICY_SCHEMA_V2)
    return expected === undefined && doc.subject.subject_id === subjectId;
  if (expected === undefined) return false;
  return (
    doc.subject_id === subjectId &&
    doc.subject.subject_id === subjectId &&
    doc.authority_partner_id === expected.partnerId &&
    doc.binding_id === expected.bindingId &&
    doc.issuer_hash === expected.issuerHash &&
    doc.external_subject_hash === expected.externalSubjectHash &&
    doc.mapping_version === expected.mappingVersion
  );
}

function matchCatalog(capability: Capability, method: string, path: string): PathMatch | undefined {
  try {
    return catalogMatcher(capability).match(method, path);
  } catch {
    // An overlapping catalog cannot map a request to one operation: fail closed.
    return undefined;
  }
}

/**
 * Whether a loaded policy stands for this subject right now: verified, this very subject's
 * (and, for a v2 policy, the derived context's), neither revoked nor expired. The policy-wide
 * part of `decide()`, in its order; a listing (MCP `tools/list`) uses it so that it never shows
 * a tool a call would refuse for a policy-wide reason. Undefined: the policy stands.
 */
export function policyStanding(
  policy: PolicyLoad,
  subjectId: string,
  now: Date,
  expectedContext?: ExternalSubjectContext,
): DenyReason | undefined {
  if (!policy.ok) return policy.reason;
  const doc = policy.document;
  if (!subjectMatches(doc, subjectId, expectedContext)) return "subject_mismatch";
  const state = policyState(doc, now);
  if (state === "revoked") return "policy_revoked";
  if (state === "expired") return "policy_expired";
  return undefined;
}

/**
 * The one decision engine every runtime path uses (authorize-invocation, binding invoke,
 * broker execute, MCP, sidecar). Pure and total: it never throws and never allows by
 * default. Steps follow the spec's order for authorize-invocation.
 */
export function decide(input: DecisionInput): Decision {
  if (!present(input.subjectId)) return denied("missing_subject");
  if (!present(input.capabilityId)) return denied("missing_capability");
  const capability = input.capability;
  if (capability === undefined || capability.capability_id !== input.capabilityId) {
    return denied("unknown_capability");
  }
  const standing = policyStanding(input.policy, input.subjectId, input.now, input.expectedContext);
  if (standing !== undefined || !input.policy.ok) return denied(standing ?? "missing_policy");
  const doc = input.policy.document;

  const match = matchCatalog(capability, input.method, input.path);
  const permissionId = match === undefined ? undefined : operationPermissionId(capability, match.index);
  if (match === undefined || permissionId === undefined) return denied("unknown_operation");

  const entry = policyEntryFor(doc, capability.capability_id);
  if (entry === undefined) return denied("missing_policy");
  if (!entry.allowed_permission_ids.includes(permissionId)) return notInAllowlist(permissionId);
  const operation = entrySnapshotFor(entry, permissionId);
  if (operation === undefined) return denied("operation_not_allowed");
  if (input.constraintsEnforced !== true && hasConstraints(operation.parameter_constraints))
    return ROLLOUT_GATE;
  // A stored path pattern the linear-time engine cannot run: the snapshot cannot be enforced.
  if (!pathPatternsUsable(operation)) return denied("policy_verification_failed");
  // A value that another operation's route could claim, or outside the declared schema.
  const acceptable = pathValuesAcceptable({
    capability,
    index: match.index,
    segments: match.segments,
    params: match.params,
    operation,
    template: input.pathIsTemplate === true,
  });
  if (!acceptable) return denied("ambiguous_path");
  const redactions = Object.hasOwn(entry.response_redactions, permissionId)
    ? (entry.response_redactions[permissionId] ?? [])
    : [];
  return {
    status: "allowed",
    permissionId,
    operation,
    redactions,
    authProfileRef: entry.auth_profile_ref,
    params: match.params,
    capability,
  };
}
