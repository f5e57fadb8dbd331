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
  type PolicyApiEntry,
  type PolicyDocument,
  policyEntryFor,
  policyState,
} from "./policy-document.ts";
import type { RedactionRule } from "./redaction.ts";

/**
 * The outcome of loading the subject's policy: a verified document, or why there is none. A
 * verified enforced policy may carry the subject's shadow policy (loaded and verified the same
 * way, decision 2761): `decide()` evaluates it beside the enforced one and only records it.
 */
export type PolicyLoad =
  | { readonly ok: true; readonly document: PolicyDocument; readonly shadow?: ShadowLoad }
  | { readonly ok: false; readonly reason: "missing_policy" | "policy_verification_failed" };

/** A shadow policy as loaded: a verified document, or why it is not one (it never carries a shadow). */
export type ShadowLoad =
  | { readonly ok: true; readonly document: PolicyDocument }
  | { readonly ok: false; readonly reason: "missing_policy" | "policy_verification_failed" };

/**
 * What the shadow policy would have decided, beside the enforced decision. `agrees`: the same
 * outcome and reason as the enforced decision (before a log-only allow). A shadow that failed
 * verification is `invalid`: recorded and counted, never evaluated.
 */
export type ShadowOutcome =
  | {
      readonly decision: "allowed";
      readonly permissionId: PermissionId;
      readonly reason: null;
      readonly agrees: boolean;
    }
  | { readonly decision: "denied"; readonly reason: DenyReason; readonly agrees: boolean }
  | { readonly decision: "invalid"; readonly reason: "policy_verification_failed"; readonly agrees: false };

/**
 * An allow that the capability's platform-wide log-only mode made of a deny (decision 2761):
 * what the enforced policy would have answered.
 */
export interface LogOnlyOverride {
  readonly reason: DenyReason;
  readonly rule: string;
}

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
  /**
   * The capability is in the platform-wide log-only mode (onboarding, set by a platform admin
   * only): a request the policy's allow list does not cover is allowed and marked `logOnly`.
   * Nothing else is relaxed: subject, standing (revocation, expiry), unknown operations,
   * the rollout gate and ambiguous paths still deny.
   */
  readonly logOnly?: boolean;
}

/** What a decision carries beside its outcome, for the record only. */
interface DecisionNotes {
  /** The shadow policy's outcome, when the subject has one covering the capability (or an invalid one). */
  readonly shadow?: ShadowOutcome;
}

export interface AllowedDecision extends DecisionNotes {
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
  /** Present when the allow exists only because of the log-only mode: what enforcement would have said. */
  readonly logOnly?: LogOnlyOverride;
}

export interface DeniedDecision extends DecisionNotes {
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

const ALLOWLIST_RULE = "decide/allowlist";

function notInAllowlist(permissionId: PermissionId): DeniedDecision {
  return {
    status: "denied",
    reason: "operation_not_allowed",
    explanation: {
      rule: ALLOWLIST_RULE,
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
 * default. Steps follow the spec's order for authorize-invocation. A shadow policy on the
 * load is decided the same way and only noted on the decision: the enforced outcome is
 * computed before and without it.
 */
export function decide(input: DecisionInput): Decision {
  const matched: CatalogMatch = {};
  const enforced = decideEnforced(input, matched);
  const shadow = input.policy.ok ? input.policy.shadow : undefined;
  if (shadow === undefined) return enforced;
  const outcome = shadowOutcome(input, shadow, enforced, matched);
  return outcome === undefined ? enforced : { ...enforced, shadow: outcome };
}

/** The request's catalog match, computed once per decision: the shadow asks the same question. */
interface CatalogMatch {
  done?: true;
  match?: PathMatch | undefined;
}

function matchOnce(matched: CatalogMatch, capability: Capability, method: string, path: string) {
  if (matched.done !== true) {
    matched.match = matchCatalog(capability, method, path);
    matched.done = true;
  }
  return matched.match;
}

const INVALID_SHADOW: ShadowOutcome = Object.freeze({
  decision: "invalid",
  reason: "policy_verification_failed",
  agrees: false,
});

/** The shadow's outcome; undefined when the (verified) shadow does not cover the capability. */
function shadowOutcome(
  input: DecisionInput,
  shadow: ShadowLoad,
  enforced: Decision,
  matched: CatalogMatch,
): ShadowOutcome | undefined {
  if (!shadow.ok) return shadow.reason === "missing_policy" ? undefined : INVALID_SHADOW;
  const capabilityId = input.capabilityId;
  if (!present(capabilityId) || policyEntryFor(shadow.document, capabilityId) === undefined) return undefined;
  // The shadow is decided alone: no log-only mode, no shadow of its own.
  const decided = decideEnforced({ ...input, policy: shadow, logOnly: false }, matched);
  return compareShadow(decided, enforced);
}

/** The shadow decision as a note, compared with the enforced one. */
function compareShadow(shadow: Decision, enforced: Decision): ShadowOutcome {
  return reconcileShadow(
    shadow.status === "allowed"
      ? { decision: "allowed", permissionId: shadow.permissionId, reason: null, agrees: false }
      : { decision: "denied", reason: shadow.reason, agrees: false },
    enforced,
  );
}

/**
 * The shadow outcome with `agrees` computed against this enforced decision: the same outcome,
 * permission and reason — a log-only allow compared as the deny the policy gave.
 */
export function reconcileShadow(shadow: ShadowOutcome, enforced: Decision): ShadowOutcome {
  if (shadow.decision === "invalid") return shadow;
  const enforcedReason = enforced.status === "denied" ? enforced.reason : enforced.logOnly?.reason;
  const agrees =
    shadow.decision === "allowed"
      ? enforcedReason === undefined &&
        enforced.status === "allowed" &&
        enforced.permissionId === shadow.permissionId
      : enforcedReason === shadow.reason;
  return agrees === shadow.agrees ? shadow : { ...shadow, agrees };
}

function decideEnforced(input: DecisionInput, matched: CatalogMatch): Decision {
  if (!present(input.subjectId)) return denied("missing_subject");
  if (!present(input.capabilityId)) return denied("missing_capability");
  const capability = input.capability;
  if (capability === undefined || capability.capability_id !== input.capabilityId) {
    return denied("unknown_capability");
  }
  const standing = policyStanding(input.policy, input.subjectId, input.now, input.expectedContext);
  if (standing !== undefined || !input.policy.ok) return denied(standing ?? "missing_policy");
  const doc = input.policy.document;

  const match = matchOnce(matched, capability, input.method, input.path);
  const permissionId = match === undefined ? undefined : operationPermissionId(capability, match.index);
  if (match === undefined || permissionId === undefined) return denied("unknown_operation");

  const entry = policyEntryFor(doc, capability.capability_id);
  if (entry === undefined) return denied("missing_policy");
  if (!entry.allowed_permission_ids.includes(permissionId)) {
    const refused = notInAllowlist(permissionId);
    const catalogOperation = capability.operations[match.index];
    if (input.logOnly !== true || catalogOperation === undefined) return refused;
    // Log-only: the live catalog's operation stands in for the snapshot the policy lacks, and
    // every later step still applies.
    const allowed = allowOperation(input, capability, match, entry, permissionId, catalogOperation);
    return allowed.status === "allowed"
      ? { ...allowed, logOnly: { reason: refused.reason, rule: ALLOWLIST_RULE } }
      : allowed;
  }
  const operation = entrySnapshotFor(entry, permissionId);
  if (operation === undefined) return denied("operation_not_allowed");
  return allowOperation(input, capability, match, entry, permissionId, operation);
}

/** The steps after the allow list: the rollout gate, usable patterns, acceptable path values. */
function allowOperation(
  input: DecisionInput,
  capability: Capability,
  match: PathMatch,
  entry: PolicyApiEntry,
  permissionId: PermissionId,
  operation: OperationSnapshot,
): Decision {
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
