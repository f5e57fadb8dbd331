/**
 * The decision stage every path shares, around the pure `decide()` of src/core: the subject
 * must stand for the authenticated principal, then `decide()`, then the transport's narrowing
 * (a binding's experience) — which can only take away. Synchronous and allocation-light: the
 * sidecar runs it per Check.
 */
import { type Decision, type DecisionInput, decide } from "../core/decision.ts";
import { type SubjectAuthentication, type SubjectIdentity, subjectAdmits } from "../core/subject-identity.ts";

/** The subject as the record (or the sidecar's verified-policy entry) says: whose it is and who it admits. */
export interface SubjectStanding {
  readonly partnerId: string;
  readonly identity: SubjectIdentity;
}

/**
 * True when the authenticated principal may act as this subject. A subject that does not
 * stand for the principal is treated as no subject at all (`missing_policy`), so nothing leaks.
 */
export function subjectStandsFor(subject: SubjectStanding | undefined, auth: SubjectAuthentication): boolean {
  return (
    subject !== undefined &&
    subjectAdmits({ partner_id: subject.partnerId, identity: subject.identity }, auth)
  );
}

export interface DecisionStageInput extends DecisionInput {
  /**
   * A narrowing the transport adds (src/bindings/experience.ts): an allow of a permission it
   * rejects becomes `operation_not_allowed`. Never adds.
   */
  readonly permits?: ((permissionId: string) => boolean) | undefined;
}

const NARROWED: Decision = Object.freeze({ status: "denied", reason: "operation_not_allowed" });

export function decideStage(input: DecisionStageInput): Decision {
  const decided = decide(input);
  if (decided.status === "allowed" && input.permits !== undefined && !input.permits(decided.permissionId))
    return NARROWED;
  return decided;
}
