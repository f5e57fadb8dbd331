/**
 * The decision stage every path shares, around the pure `decide()` of src/core: the subject
 * must stand for the authenticated principal, then `decide()` (the parameter-scoping rollout
 * gate included), then the transport's narrowing (a binding's experience) — which can only
 * take away. Synchronous and allocation-light: the sidecar runs it per Check.
 */
import {
  type Decision,
  type DecisionInput,
  type DeniedDecision,
  decide,
  type PolicyLoad,
  reconcileShadow,
  type ShadowLoad,
  type ShadowOutcome,
} from "../core/decision.ts";
import { type SubjectAuthentication, type SubjectIdentity, subjectAdmits } from "../core/subject-identity.ts";
import { type DenyReason, refinedDenyRules } from "../errors.ts";

/**
 * True when the authenticated principal may act as the subject whose record names this
 * partner and identity (undefined: no record, nobody is admitted). A subject that does not
 * stand for the principal is treated as no subject at all (`missing_policy`), so nothing
 * leaks. Takes the two facts rather than an object: the sidecar calls it on every Check.
 */
export function subjectStandsFor(
  partnerId: string | undefined,
  identity: SubjectIdentity | undefined,
  auth: SubjectAuthentication,
): boolean {
  return (
    partnerId !== undefined &&
    identity !== undefined &&
    subjectAdmits({ partner_id: partnerId, identity }, auth)
  );
}

export interface DecisionStageInput extends DecisionInput {
  /** Required here: every path states whether the rollout covers the partner (see DecisionInput). */
  readonly constraintsEnforced: boolean;
  /**
   * A narrowing the transport adds (src/bindings/experience.ts): an allow of a permission it
   * rejects becomes `operation_not_allowed`. Never adds.
   */
  readonly permits?: ((permissionId: string) => boolean) | undefined;
}

const NARROWED: DeniedDecision = Object.freeze({
  status: "denied",
  reason: "operation_not_allowed",
  explanation: Object.freeze({ rule: refinedDenyRules.bindingExperience }),
});

/**
 * The transport's narrowing applies to the shadow's outcome too: a shadow allow the binding's
 * experience rejects is the same deny the enforced policy would get (decision 2761).
 */
function narrowedShadow(
  shadow: ShadowOutcome,
  enforced: Decision,
  permits: (id: string) => boolean,
): ShadowOutcome {
  const narrowed: ShadowOutcome =
    shadow.decision === "allowed" && !permits(shadow.permissionId)
      ? { decision: "denied", reason: NARROWED.reason, agrees: false }
      : shadow;
  return reconcileShadow(narrowed, enforced);
}

export function decideStage(input: DecisionStageInput): Decision {
  const decided = decide(input);
  const permits = input.permits;
  if (permits === undefined) return decided;
  const enforced =
    decided.status === "allowed" && !permits(decided.permissionId)
      ? decided.shadow === undefined
        ? NARROWED
        : { ...NARROWED, shadow: decided.shadow }
      : decided;
  return enforced.shadow === undefined
    ? enforced
    : { ...enforced, shadow: narrowedShadow(enforced.shadow, enforced, permits) };
}

/**
 * What a decision's record says beside its outcome (decision 2761): the shadow policy's
 * outcome and a log-only allow. Every path's record takes them from here.
 */
export interface DecisionNotes {
  readonly shadow?: {
    decision: "allowed" | "denied" | "invalid";
    reason: DenyReason | null;
    agrees: boolean;
  };
  readonly log_only?: { reason: DenyReason };
}

export function decisionNotes(decision: Decision | undefined): DecisionNotes {
  if (decision === undefined) return {};
  const logOnly = decision.status === "allowed" ? decision.logOnly : undefined;
  const shadow = decision.shadow;
  return {
    ...(shadow === undefined
      ? {}
      : { shadow: { decision: shadow.decision, reason: shadow.reason, agrees: shadow.agrees } }),
    ...(logOnly === undefined ? {} : { log_only: { reason: logOnly.reason } }),
  };
}

/** A policy load with the subject's shadow beside it (a path that loads the shadow on its own: the sidecar). */
export function withShadow(policy: PolicyLoad, shadow: ShadowLoad | undefined): PolicyLoad {
  return shadow === undefined || !policy.ok ? policy : { ...policy, shadow };
}
