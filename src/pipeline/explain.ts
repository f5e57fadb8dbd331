/**
 * The admin `explain` of one request (docs/decisions/2685-explainable-denials-and-what-if-replay.md):
 * the subject's verified policy and the capability's catalog loaded exactly as a decision
 * loads them, then the decision stage and the prepare stages (input schema, signed
 * constraints) run over the request — without loading a credential, calling an upstream or
 * recording anything. Each step names its inputs by reference (ids, versions, hashes), never
 * a policy's or a request's contents.
 */

import { rolloutCovers } from "../core/parameter-constraints.ts";
import { type DenyExplanation, explainDeny } from "../errors.ts";
import type { ExecutionArgs } from "../execute/input.ts";
import { prepareUpstreamRequest } from "../execute/prepare.ts";
import { allowedRoute } from "../execute/url.ts";
import type { DecisionRuntime } from "../policy/runtime.ts";
import { decideStage } from "./decision.ts";
import { failureExplanation, pipelineFailure } from "./failure.ts";
import { documentContext } from "./replay.ts";

export type ExplainStepOutcome = "passed" | "denied" | "skipped";

export interface ExplainStep {
  readonly step: "subject" | "capability" | "policy" | "decision" | "input_schema" | "constraints";
  readonly outcome: ExplainStepOutcome;
  readonly inputs: Readonly<Record<string, string | number | boolean | null>>;
  readonly reason?: string;
}

export interface ExplainResult {
  readonly status: "allowed" | "denied";
  readonly permission_id: string | null;
  readonly reason?: string;
  readonly rule?: string;
  readonly remedy?: DenyExplanation["remedy"];
  /**
   * The allow exists only because the capability is in the log-only mode: the rule that
   * enforcement would have denied it by (decision 2761).
   */
  readonly log_only?: { readonly reason: string; readonly rule: string };
}

export interface ExplainTrace {
  readonly steps: readonly ExplainStep[];
  readonly result: ExplainResult;
}

export interface ExplainRequest {
  readonly partnerId: string;
  readonly subjectId: string;
  readonly capabilityId: string;
  readonly method: string;
  readonly path: string;
  readonly now: Date;
  /** The request's other parts, as the operation's input schema names them (path values come from the path). */
  readonly args?: Omit<ExecutionArgs, "path">;
}

type ExplainRuntime = Pick<
  DecisionRuntime,
  "subjects" | "capabilities" | "policies" | "constraintsRollout" | "logOnly"
>;

function denial(code: string, explanation: DenyExplanation, permissionId: string | null): ExplainResult {
  return {
    status: "denied",
    permission_id: permissionId,
    reason: code,
    rule: explanation.rule,
    ...(explanation.remedy === undefined ? {} : { remedy: explanation.remedy }),
  };
}

const SKIPPED_AFTER_CAPABILITY: readonly ExplainStep[] = (
  ["policy", "decision", "input_schema", "constraints"] as const
).map((step) => ({ step, outcome: "skipped", inputs: {} }));

/**
 * The trace of a capability the partner does not have: denied at the capability step, as a
 * decision denies it (unknown_capability). Resolved in the partner's scope only, so another
 * partner's capability reads exactly like an id no one has.
 */
function unknownCapability(subjectId: string, partnerId: string, capabilityId: string): ExplainTrace {
  return {
    steps: [
      { step: "subject", outcome: "passed", inputs: { subject_id: subjectId, partner_id: partnerId } },
      {
        step: "capability",
        outcome: "denied",
        inputs: { capability_id: capabilityId, catalog_version: null },
        reason: "unknown_capability",
      },
      ...SKIPPED_AFTER_CAPABILITY,
    ],
    result: denial("unknown_capability", explainDeny("unknown_capability"), null),
  };
}

/**
 * The trace, or undefined when the subject is not the partner's (the caller answers
 * not_found: another partner's subject reads exactly like an unknown one).
 */
export async function explainRequest(
  runtime: ExplainRuntime,
  request: ExplainRequest,
): Promise<ExplainTrace | undefined> {
  const { partnerId } = request;
  const subject = await runtime.subjects.get(request.subjectId);
  if (subject === undefined || subject.partner_id !== partnerId) return undefined;
  const subjectId = subject.subject_id;
  const capability = await runtime.capabilities.resolve(partnerId, request.capabilityId);
  if (capability === undefined) return unknownCapability(subjectId, partnerId, request.capabilityId);
  const loaded = await runtime.policies.load(subjectId, { partnerId });
  const policy = loaded.record;
  const enforced = rolloutCovers(runtime.constraintsRollout, partnerId);
  // Explained as decided: the log-only mode applies here as in every decision.
  const logOnly = await runtime.logOnly.covers(partnerId, capability.capability_id);
  const context = loaded.policy.ok ? documentContext(loaded.policy.document) : undefined;
  const decision = decideStage({
    subjectId,
    capabilityId: capability.capability_id,
    capability,
    policy: loaded.policy,
    method: request.method,
    path: request.path,
    now: request.now,
    constraintsEnforced: enforced,
    logOnly,
    ...(context === undefined ? {} : { expectedContext: context }),
  });
  const steps: ExplainStep[] = [
    { step: "subject", outcome: "passed", inputs: { subject_id: subjectId, partner_id: partnerId } },
    {
      step: "capability",
      outcome: "passed",
      inputs: { capability_id: capability.capability_id, catalog_version: capability.catalog_version },
    },
    {
      step: "policy",
      outcome: loaded.policy.ok ? "passed" : "denied",
      inputs: {
        policy_version: policy?.policy_version ?? null,
        policy_hash: policy?.policy_hash ?? null,
        revoked_at: policy?.revoked_at ?? null,
        expires_at: policy?.expires_at ?? null,
      },
      ...(loaded.policy.ok ? {} : { reason: loaded.policy.reason }),
    },
  ];
  const asked = {
    method: request.method,
    path: request.path,
    constraints_enforced: enforced,
    log_only: logOnly,
  };
  if (decision.status === "denied") {
    const explanation = explainDeny(decision.reason, decision.explanation);
    steps.push(
      loaded.policy.ok
        ? { step: "decision", outcome: "denied", inputs: asked, reason: decision.reason }
        : { step: "decision", outcome: "skipped", inputs: asked },
      { step: "input_schema", outcome: "skipped", inputs: {} },
      { step: "constraints", outcome: "skipped", inputs: {} },
    );
    return { steps, result: denial(decision.reason, explanation, null) };
  }
  const permission = decision.permissionId;
  steps.push({ step: "decision", outcome: "passed", inputs: { ...asked, permission_id: permission } });
  const operation = { operation_id: decision.operation.operation_id, permission_id: permission };
  const constraints = Array.isArray(decision.operation.parameter_constraints)
    ? decision.operation.parameter_constraints.length
    : 0;
  const constraintInputs = { ...operation, constraints, enforced };
  try {
    const rollout = {
      enabled: runtime.constraintsRollout.enabled,
      partnerAllowlisted: runtime.constraintsRollout.isPartnerAllowlisted(partnerId),
    };
    prepareUpstreamRequest(
      allowedRoute(capability, permission, decision.operation),
      { ...request.args, path: decision.params },
      rollout,
    );
  } catch (cause) {
    const error = pipelineFailure(cause);
    // A constraint names its own rule, the rollout gate the decision's: both are the constraints step.
    const atConstraints =
      error.code === "constraint_violation" ||
      failureExplanation(error).rule !== explainDeny(error.code).rule;
    steps.push(
      atConstraints
        ? { step: "input_schema", outcome: "passed", inputs: operation }
        : { step: "input_schema", outcome: "denied", inputs: operation, reason: error.code },
      atConstraints
        ? { step: "constraints", outcome: "denied", inputs: constraintInputs, reason: error.code }
        : { step: "constraints", outcome: "skipped", inputs: constraintInputs },
    );
    return { steps, result: denial(error.code, failureExplanation(error), permission) };
  }
  steps.push(
    { step: "input_schema", outcome: "passed", inputs: operation },
    { step: "constraints", outcome: "passed", inputs: constraintInputs },
  );
  const relaxed = decision.logOnly;
  return {
    steps,
    result: {
      status: "allowed",
      permission_id: permission,
      ...(relaxed === undefined ? {} : { log_only: { reason: relaxed.reason, rule: relaxed.rule } }),
    },
  };
}
