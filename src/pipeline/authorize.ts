/**
 * The pipeline's decision and record stages on the authority (authorize-invocation, invoke,
 * broker, MCP): the spec's steps 2–7 around the pure `decide()` (step 1, authentication,
 * belongs to the transport). Every outcome — allow, deny, or a deny because a dependency is
 * down — is recorded exactly once, and an outcome that cannot be recorded is never an allow.
 * docs/authorize.md has the table; docs/decisions/1301-one-enforcement-pipeline.md the stages.
 */
import { receiptOf } from "../audit/receipts.ts";
import { newRecordId, type Transport } from "../audit/records.ts";
import {
  buildPermissionId,
  type Capability,
  catalogMatcher,
  type Decision,
  type ExternalSubjectContext,
  normalizeRequestPath,
  rolloutCovers,
} from "../core/index.ts";
import { identityOf, type SubjectAuthentication } from "../core/subject-identity.ts";
import { type DenyExplanation, type DenyReason, type ErrorCode, errorCodes } from "../errors.ts";
import { traced } from "../observability/tracing.ts";
import type { PolicyRecordFacts } from "../policy/record.ts";
import { type DecisionRuntime, principalSubject } from "../policy/runtime.ts";
import { logs, type SubjectRecord } from "../store/model.ts";
import { type DecisionSources, decisionNotes, decisionStages } from "./decision.ts";
import { outageFailure, pipelineFailure } from "./failure.ts";

export interface InvocationRequest {
  readonly transport: Transport;
  readonly requestId: string;
  readonly now: Date;
  /** Who called; null when nobody authenticated. */
  readonly actor: string | null;
  /** The authenticated subject; undefined when none (→ missing_subject). */
  readonly subjectId: string | undefined;
  /**
   * How the subject was authenticated: a subject stands only for the principals its
   * identity admits (src/core/subject-identity.ts); any other is treated as having no subject record.
   */
  readonly authenticatedAs: SubjectAuthentication;
  /** A subject the caller named in the request; must equal the authenticated one. */
  readonly claimedSubjectId?: string | undefined;
  readonly capabilityId: string | undefined;
  readonly method: string;
  readonly path: string;
  /**
   * The path is the operation's template, its values still to come (see
   * DecisionInput.pathIsTemplate); the caller renders and re-matches them before any upstream call.
   */
  readonly pathIsTemplate?: boolean;
  /** Server-derived v2 context (headless subjects); absent on the v1 path. */
  readonly expectedContext?: ExternalSubjectContext;
  /** The caller could not be authenticated because the issuer's keys are unreachable. */
  readonly authenticationUnavailable?: boolean;
  /**
   * A bearer token was sent and rejected (bad signature, expired, wrong audience…): the deny
   * for the missing subject says so (`invalid_token`) instead of `missing_subject`.
   */
  readonly tokenRejected?: boolean;
  /**
   * Paths that go on to run the operation (invoke, broker, MCP) record an allow only once
   * the pipeline's outcome is known, through `settle` on the result: a refusal after the
   * decision (input, constraints, rollout gate, rendering, egress, redaction…) is then the
   * one record of the request, as a deny with that refusal's code. Denies are recorded at once.
   */
  readonly settleAllowLater?: boolean;
  /**
   * A narrowing the transport adds (a binding's experience, src/bindings/experience.ts):
   * an allow of a permission it rejects becomes the deny `operation_not_allowed`. It can
   * only take away from what the policy allows, never add.
   */
  readonly permits?: (permissionId: string) => boolean;
}

/**
 * Records the final outcome of an allowed decision whose record was deferred: no argument
 * (or null) when the pipeline delivered the upstream's answer, else the code the pipeline
 * refused with. Records once (later calls do nothing); rejects when the record cannot be
 * kept — the caller must then not release the answer (503).
 */
export type SettleInvocation = (refusal?: ErrorCode | null) => Promise<void>;

/**
 * A deny names a spec reason, `invalid_token` when a bearer token was sent and rejected, or
 * the pipeline's failure code (`upstream_unavailable` for an outage, `internal` for a fault).
 */
export type InvocationDenyReason = ErrorCode;

export type InvocationOutcome =
  | { readonly status: "allowed"; readonly permissionId: string }
  | {
      readonly status: "denied";
      readonly reason: InvocationDenyReason;
      /** The decision step's rule and remedy, when it named them (errors.ts explainDeny). */
      readonly explanation?: DenyExplanation;
    };

export interface InvocationResult {
  readonly outcome: InvocationOutcome;
  /** HTTP status of the outcome: 200, or the deny reason's status in the error table. */
  readonly httpStatus: number;
  /** True when the deny comes from a failure (a dependency down, a fault: 5xx), not from policy. */
  readonly unavailable: boolean;
  /** The full decision for executors (snapshot, redactions, auth profile); absent on a 503. */
  readonly decision?: Decision;
  readonly partnerId: string | null;
  readonly capability?: Capability;
  readonly policy?: PolicyRecordFacts;
  /** Present on an allow when the request asked `settleAllowLater`: nothing is recorded until it is called. */
  readonly settle?: SettleInvocation;
  /** Finds the decision's record (`x-authority-receipt`; audit/receipts.ts); absent when it was not recorded. */
  readonly receipt?: string;
}

interface Evaluation {
  readonly decision: Decision;
  readonly partnerId: string | null;
  readonly capability?: Capability;
  readonly policy?: PolicyRecordFacts;
}

/** The authority's sources for the stages (decision.ts): its store, read through the decision runtime. */
function storeSources(
  runtime: DecisionRuntime,
  loaded: { record?: PolicyRecordFacts },
): DecisionSources<SubjectRecord | undefined> {
  return {
    // The partner scope comes from the subject's record (the token's partner namespace
    // first, then the global one); a subject the authority does not know has no policy.
    subject: (subjectId, auth) => principalSubject(runtime.subjects, subjectId, auth),
    recordOf: (subject) => ({
      subjectId: subject?.subject_id ?? "",
      partnerId: typeof subject?.partner_id === "string" ? subject.partner_id : undefined,
      identity: subject === undefined ? undefined : identityOf(subject),
    }),
    unrecorded: () => "missing_policy",
    capability: (partnerId, capabilityId) => runtime.capabilities.resolve(partnerId, capabilityId),
    // Decrypt + verify (loader); the stored id is what the policy is filed and signed under.
    policy: async (subject, partnerId) => {
      const result = await traced("authority.load_policy", () =>
        runtime.policies.load(subject?.subject_id ?? "", { partnerId }),
      );
      if (result.record !== undefined) loaded.record = result.record;
      return result.policy;
    },
    logOnly: (partnerId, capability) => runtime.logOnly.covers(partnerId, capability.capability_id),
    constraintsEnforced: (partnerId) => rolloutCovers(runtime.constraintsRollout, partnerId),
  };
}

async function evaluate(runtime: DecisionRuntime, request: InvocationRequest): Promise<Evaluation> {
  const loaded: { record?: PolicyRecordFacts } = {};
  return decisionStages(
    storeSources(runtime, loaded),
    request,
    (decision, _subject, partnerId, capability) => ({
      decision,
      partnerId: partnerId ?? null,
      ...(capability === undefined ? {} : { capability }),
      ...(loaded.record === undefined ? {} : { policy: loaded.record }),
    }),
  );
}

/** A deny because the pipeline failed (an outage, a fault): the one mapping, src/pipeline/failure.ts. */
function failedResult(error: unknown, partnerId: string | null): InvocationResult {
  const failure = error === undefined ? outageFailure() : pipelineFailure(error);
  return {
    outcome: { status: "denied", reason: failure.code },
    httpStatus: failure.status,
    unavailable: true,
    partnerId,
  };
}

/** The catalog permission a request maps to (recorded with denials too, checked against boundaries), if any. */
export function attemptedPermission(
  capability: Capability | undefined,
  method: string,
  path: string,
): string | null {
  if (capability === undefined) return null;
  try {
    const match = catalogMatcher(capability).match(method, path);
    const operation = match === undefined ? undefined : capability.operations[match.index];
    return operation === undefined
      ? null
      : buildPermissionId(capability.capability_id, operation.method, operation.path);
  } catch {
    return null;
  }
}

/**
 * A path as every authority path records it (the decision, and invoke's refusals before it):
 * the normalized form when the path normalizes, else as sent; the recorder drops the query
 * string and fragment and bounds it (audit/records.ts `auditPath`).
 */
export function recordedPath(path: string): string {
  return normalizeRequestPath(path)?.path ?? path;
}

function deniedOutcome(
  reason: DenyReason,
  explanation: DenyExplanation | undefined,
  request: InvocationRequest,
): InvocationOutcome {
  const code = denyReasonOf(reason, request);
  return explanation === undefined || code !== reason
    ? { status: "denied", reason: code }
    : { status: "denied", reason: code, explanation };
}

/** No subject because the token that was sent was rejected: say so. */
function denyReasonOf(reason: DenyReason, request: InvocationRequest): InvocationDenyReason {
  return reason === "missing_subject" && request.tokenRejected === true ? "invalid_token" : reason;
}

export async function authorizeInvocation(
  runtime: DecisionRuntime,
  request: InvocationRequest,
): Promise<InvocationResult> {
  let result: InvocationResult;
  if (request.authenticationUnavailable === true || !runtime.recorder.accepting()) {
    // Keys of the issuer unreachable, or the audit buffer full: nothing is evaluated.
    result = failedResult(undefined, null);
  } else {
    try {
      const evaluation = await evaluate(runtime, request);
      const { decision } = evaluation;
      const outcome: InvocationOutcome =
        decision.status === "allowed"
          ? { status: "allowed", permissionId: decision.permissionId }
          : deniedOutcome(decision.reason, decision.explanation, request);
      result = {
        outcome,
        httpStatus: outcome.status === "allowed" ? 200 : errorCodes[outcome.reason].status,
        unavailable: false,
        decision,
        partnerId: evaluation.partnerId,
        ...(evaluation.capability === undefined ? {} : { capability: evaluation.capability }),
        ...(evaluation.policy === undefined ? {} : { policy: evaluation.policy }),
      };
    } catch (error) {
      // Store or keys unavailable (PolicyLoadError: upstream_unavailable), or a fault (internal).
      result = failedResult(error, null);
    }
  }
  // Step 7: record every decision. One that cannot be recorded is answered as unavailable.
  const recordOf = (refusal: ErrorCode | null) => ({
    actor: request.actor,
    subject_id: request.subjectId ?? request.claimedSubjectId ?? null,
    partner_id: result.partnerId,
    capability_id: request.capabilityId ?? null,
    method: request.method,
    path: recordedPath(request.path),
    ...(request.pathIsTemplate === true ? { path_is_template: true } : {}),
    permission_id:
      result.outcome.status === "allowed"
        ? result.outcome.permissionId
        : attemptedPermission(result.capability, request.method, request.path),
    decision:
      result.outcome.status === "allowed" && refusal === null ? ("allowed" as const) : ("denied" as const),
    reason: result.outcome.status === "denied" ? result.outcome.reason : refusal,
    transport: request.transport,
    requestId: request.requestId,
    time: request.now,
    ...decisionNotes(result.decision),
  });
  // The record's id is chosen now, so an allow settled later has its receipt already.
  const id = newRecordId("dec");
  const receipt = receiptOf(logs.audit, { id, time: request.now.toISOString() });
  if (request.settleAllowLater === true && result.outcome.status === "allowed") {
    let settled: Promise<void> | undefined;
    const settle: SettleInvocation = (refusal) => {
      settled ??= runtime.recorder.record(recordOf(refusal ?? null), id).then(() => undefined);
      return settled;
    };
    return { ...result, settle, receipt };
  }
  try {
    await runtime.recorder.record(recordOf(null), id);
  } catch {
    // The audit could not keep the record: an outage of the audit, whatever the cause.
    return failedResult(undefined, result.partnerId);
  }
  return { ...result, receipt };
}
