/**
 * The decision stages of every enforcement path, in their one order (decisions 1301, 2701):
 * an authenticated subject and a capability context → the subject's record, which must stand
 * for the authenticated principal (`subjectStandsFor`) → the capability in the record's
 * partner scope → the subject's verified policy → the decision stage (`decideStage`: the pure
 * `decide()` of src/core with the parameter-scoping rollout gate, then the transport's
 * narrowing, a binding's experience, which can only take away). The authority (authorize.ts)
 * runs them on its store, the sidecar (check.ts) on its caches: each source answers a `Step`,
 * a value when it has one and a promise when it must wait, so the sidecar's all-cached Check
 * runs every stage in one turn without a promise or a result object (the outcome goes to a
 * continuation).
 */
import type { Capability } from "../core/capability.ts";
import {
  type Decision,
  type DecisionInput,
  type DeniedDecision,
  decide,
  type ExternalSubjectContext,
  type PolicyLoad,
  reconcileShadow,
  type ShadowLoad,
  type ShadowOutcome,
} from "../core/decision.ts";
import { type SubjectAuthentication, type SubjectIdentity, subjectAdmits } from "../core/subject-identity.ts";
import { type DenyReason, refinedDenyRules } from "../errors.ts";
import { decisionOutcome, traced } from "../observability/tracing.ts";

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

/** A value when it is at hand, else a promise of it. */
export type Step<T> = T | Promise<T>;

/** What the stages read of a subject's record. */
export interface SubjectOfRecord {
  /** The stored id: what the subject's policy is filed and signed under. */
  readonly subjectId: string;
  /** Undefined: no record (the subject is unknown, or its lookup failed: see `unrecorded`). */
  readonly partnerId: string | undefined;
  readonly identity?: SubjectIdentity | undefined;
}

/** Where a path's stages read their inputs; `S` is the source's own form of a subject. */
export interface DecisionSources<S> {
  /** The first record of the principal's candidate ids (its partner namespace, then the global one). */
  subject(subjectId: string, auth: SubjectAuthentication): Step<S>;
  recordOf(subject: S): SubjectOfRecord;
  /** The deny for a subject without a record: `missing_policy`, or why it could not be read. */
  unrecorded(subject: S): DenyReason;
  /** The partner's capability; `subject` (its verified record) lets a source start fetching what the decision may need next. */
  capability(partnerId: string, capabilityId: string, subject: S): Step<Capability | undefined>;
  /** The subject's verified policy (decrypted or signature-checked), with its shadow when it has one (decision 2761). */
  policy(subject: S, partnerId: string): Step<PolicyLoad>;
  /** The capability is in the platform-wide log-only mode (decision 2761). */
  logOnly(partnerId: string, capability: Capability): Step<boolean>;
  /** The parameter-scoping rollout covers the partner. */
  constraintsEnforced(partnerId: string): boolean;
}

export interface StageRequest {
  /** The authenticated subject; undefined or "" when none (→ missing_subject). */
  readonly subjectId: string | undefined;
  readonly authenticatedAs: SubjectAuthentication;
  /** A subject the caller named; must equal the authenticated one. */
  readonly claimedSubjectId?: string | undefined;
  readonly capabilityId: string | undefined;
  readonly method: string;
  readonly path: string;
  readonly now: Date;
  readonly pathIsTemplate?: boolean;
  readonly expectedContext?: ExternalSubjectContext;
  readonly permits?: ((permissionId: string) => boolean) | undefined;
}

/**
 * The stages' outcome: the decision; the subject as looked up (undefined when none was); the
 * partner when the subject stands for the principal; the capability when it resolved; the
 * request (so that a caller's `done` can be made once, not per request).
 */
export type StagesDone<S, R, Q extends StageRequest> = (
  decision: Decision,
  subject: S | undefined,
  partnerId: string | undefined,
  capability: Capability | undefined,
  request: Q,
) => Step<R>;

const MISSING_POLICY: PolicyLoad = Object.freeze({ ok: false, reason: "missing_policy" });
const SUBJECT_MISMATCH: Decision = Object.freeze({ status: "denied", reason: "subject_mismatch" });

const MISSING_POLICY_DENY: Decision = Object.freeze({ status: "denied", reason: "missing_policy" });

function denied(reason: DenyReason): Decision {
  return reason === "missing_policy" ? MISSING_POLICY_DENY : { status: "denied", reason };
}

function decisionOf(
  request: StageRequest,
  subjectId: string | undefined,
  capability: Capability | undefined,
  policy: PolicyLoad,
  constraintsEnforced: boolean,
  logOnly = false,
): Decision {
  return decideStage({
    subjectId,
    capabilityId: request.capabilityId,
    capability,
    policy,
    method: request.method,
    path: request.path,
    now: request.now,
    constraintsEnforced,
    logOnly,
    // Plain fields, no spreads: the sidecar builds this object on every Check.
    pathIsTemplate: request.pathIsTemplate === true,
    expectedContext: request.expectedContext,
    permits: request.permits,
  });
}

/**
 * Runs the stages and hands their outcome to `done`. Each stage is a function of its own with
 * every input as an argument, so a stage whose input is cached continues without a closure.
 */
export function decisionStages<S, R, Q extends StageRequest>(
  sources: DecisionSources<S>,
  request: Q,
  done: StagesDone<S, R, Q>,
): Step<R> {
  const { subjectId, capabilityId } = request;
  // An authenticated subject and a capability context (decide() names which is missing).
  if (subjectId === undefined || subjectId === "" || capabilityId === undefined || capabilityId === "")
    return done(
      decide({ ...request, capability: undefined, policy: MISSING_POLICY }),
      undefined,
      undefined,
      undefined,
      request,
    );
  // A caller may not ask about another subject: refused before anything of theirs is read.
  if (request.claimedSubjectId !== undefined && request.claimedSubjectId !== subjectId)
    return done(SUBJECT_MISMATCH, undefined, undefined, undefined, request);
  const subject = sources.subject(subjectId, request.authenticatedAs);
  return subject instanceof Promise
    ? subject.then((found) => withSubject(sources, request, capabilityId, done, found))
    : withSubject(sources, request, capabilityId, done, subject);
}

function withSubject<S, R, Q extends StageRequest>(
  sources: DecisionSources<S>,
  request: Q,
  capabilityId: string,
  done: StagesDone<S, R, Q>,
  subject: S,
): Step<R> {
  const record = sources.recordOf(subject);
  const partnerId = record.partnerId;
  if (partnerId === undefined)
    return done(denied(sources.unrecorded(subject)), subject, undefined, undefined, request);
  // A subject of another partner (or one named after this principal by someone else) is
  // not this principal's: answered exactly like an unknown subject, so nothing leaks.
  if (!subjectStandsFor(partnerId, record.identity, request.authenticatedAs))
    return done(MISSING_POLICY_DENY, subject, undefined, undefined, request);
  const capability = sources.capability(partnerId, capabilityId, subject);
  return capability instanceof Promise
    ? capability.then((resolved) => withCapability(sources, request, done, subject, partnerId, resolved))
    : withCapability(sources, request, done, subject, partnerId, capability);
}

function withCapability<S, R, Q extends StageRequest>(
  sources: DecisionSources<S>,
  request: Q,
  done: StagesDone<S, R, Q>,
  subject: S,
  partnerId: string,
  capability: Capability | undefined,
): Step<R> {
  const { subjectId } = sources.recordOf(subject);
  if (capability === undefined)
    return done(
      decisionOf(request, subjectId, undefined, MISSING_POLICY, false),
      subject,
      partnerId,
      undefined,
      request,
    );
  const policy = sources.policy(subject, partnerId);
  const logOnly = sources.logOnly(partnerId, capability);
  if (policy instanceof Promise || logOnly instanceof Promise)
    return Promise.all([policy, logOnly]).then(([load, onlyLog]) =>
      withPolicy(sources, request, done, subject, partnerId, capability, load, onlyLog),
    );
  return withPolicy(sources, request, done, subject, partnerId, capability, policy, logOnly);
}

function withPolicy<S, R, Q extends StageRequest>(
  sources: DecisionSources<S>,
  request: Q,
  done: StagesDone<S, R, Q>,
  subject: S,
  partnerId: string,
  capability: Capability,
  policy: PolicyLoad,
  logOnly: boolean,
): Step<R> {
  const enforced = sources.constraintsEnforced(partnerId);
  const subjectId = sources.recordOf(subject).subjectId;
  const decision = traced(
    "authority.decide",
    () => decisionOf(request, subjectId, capability, policy, enforced, logOnly),
    decisionOutcome,
  );
  return done(decision, subject, partnerId, capability, request);
}
