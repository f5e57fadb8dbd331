/**
 * The governed execution behind `POST /v1/bindings/{id}/invoke` and
 * `POST /v1/broker/execute`, after authentication (steps 1–4, authenticate.ts):
 *
 *   5. before decryption: active connection, external mapping, subject, boundary;
 *   6. decrypt + verify the subject's v2 policy and `decide()` with the derived context
 *      (subject, partner, binding, issuer hash, external-subject hash, mapping version);
 *   7. on every call — only the verified document is cached, and the binding's records are
 *      reused for `record-cache-ms` (binding-records.ts); the policy record is read each time.
 *
 * Steps 6–7 and everything after the decision are the one enforcement pipeline
 * (src/pipeline/enforce.ts): decide and record, prepare the upstream request (input schema,
 * constraints, render, re-match), then — with the authority envelope over the validated
 * arguments and the auth profile — send, scrub, redact and settle the record. This module adds
 * the binding's own stages before it and the evidence after it. docs/bindings.md describes
 * bodies, statuses and idempotency.
 */

import type { AdminDeps } from "../admin/deps.ts";
import { permissionPatternMatches } from "../admin/permission-pattern.ts";
import type { Transport } from "../audit/records.ts";
import { type AllowedDecision, hashCanonical, parsePermissionId, type Sha256Ref } from "../core/index.ts";
import { identityOf, subjectAdmits } from "../core/subject-identity.ts";
import { AuthorityError, type DenyReason, denyOutcome, denyReasons, isDenyReason } from "../errors.ts";
import { ExecutionError } from "../execute/errors.ts";
import type { ExecutionResult } from "../execute/executor.ts";
import {
  attemptedPermission,
  type InvocationRequest,
  type InvocationResult,
  recordedPath,
} from "../pipeline/authorize.ts";
import { failureExplanation, outageFailure } from "../pipeline/failure.ts";
import type { ExperienceRecord, InvocationEvidence, StoredResponse } from "../store/binding-model.ts";
import { type BoundaryRecord, collections, storeKeys } from "../store/model.ts";
import type { StoreWrite } from "../store/store.ts";
import type { AuthenticatedUser, AuthenticatedWorkload } from "./authenticate.ts";
import { newEvidenceId, sha256Ref } from "./derive.ts";
import { argumentsDigest, buildEnvelopeClaims, ENVELOPE_HEADER, PARTNER_PROFILE_V2 } from "./envelope.ts";
import { EnvelopeCryptoUnavailableError } from "./envelope-crypto.ts";
import { evidenceLogInput, evidenceWrite, writeEvidence } from "./evidence.ts";
import { experienceDenial, experiencePermits } from "./experience.ts";
import type { WorkResult } from "./idempotency.ts";
import type { BindingRuntime } from "./runtime.ts";

export interface InvokeArguments {
  readonly path?: Readonly<Record<string, unknown>>;
  readonly query?: Readonly<Record<string, unknown>>;
  readonly headers?: Readonly<Record<string, unknown>>;
  readonly body?: unknown;
}

/** Request body of invoke (and broker execute, which adds binding_id). */
export interface InvokeBody {
  /** Absent: the spec's Deny outcome `missing_capability` (recorded), not a 400 of the schema. */
  readonly capability_id?: string;
  /** Either method + path (a request path or the path template)… */
  readonly method?: string;
  readonly path?: string;
  /** …or the permission id… */
  readonly permission_id?: string;
  /** …or (broker execute) the catalog operation id. */
  readonly operation_id?: string;
  readonly arguments?: InvokeArguments;
}

export interface InvokeCall {
  readonly transport: Extract<Transport, "invoke" | "broker">;
  readonly requestId: string;
  readonly workload: AuthenticatedWorkload;
  readonly user: AuthenticatedUser;
  readonly body: InvokeBody;
  /** Required on invoke (the route checks); optional on broker execute. */
  readonly idempotencyKey: string | undefined;
}

export interface InvokeResponse {
  readonly statusCode: number;
  readonly body: unknown;
  /** A stored result of an earlier request with the same Idempotency-Key. */
  readonly replayed: boolean;
  /** Finds the call's decision record (`x-authority-receipt`); absent when none was kept. */
  readonly receipt?: string;
}

/** The response field carrying the decision's receipt (audit/receipts.ts), when it was recorded. */
const receiptOf = (authorization: InvocationResult): { receipt?: string } =>
  authorization.receipt === undefined ? {} : { receipt: authorization.receipt };

export type InvokeDeps = Pick<AdminDeps, "store" | "now" | "logger"> & {
  /**
   * Set on a call with an Idempotency-Key: the evidence is held and stored with the call's
   * result in one transaction (idempotency.ts), instead of on its own.
   */
  readonly holdEvidence?: (write: StoreWrite) => void;
  /**
   * Set on a call with an Idempotency-Key: the key's `sending` state (idempotency.ts), stored
   * while the envelope is signed and awaited before the upstream may be contacted.
   */
  readonly sending?: () => Promise<void>;
  /** Set with `sending`: the upstream was not contacted after all, so a fault releases the key. */
  readonly unsent?: () => void;
};

interface Target {
  readonly method: string;
  readonly path: string;
  /** The path is the operation's template itself (values come from arguments.path only). */
  readonly isTemplate: boolean;
}

type TargetOutcome =
  | { readonly ok: true; readonly target: Target }
  | { readonly ok: false; readonly reason: DenyReason };

/** Resolves after the current turn's callbacks and promise jobs (a check-phase callback). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

const badRequest = (message: string) => new AuthorityError("invalid_request", message);

/** What the caller asked to run, as a method and a path `decide()` maps to a permission. */
async function resolveTarget(
  runtime: BindingRuntime,
  partnerId: string,
  body: InvokeBody & { readonly capability_id: string },
): Promise<TargetOutcome> {
  const hasMethodPath = body.method !== undefined || body.path !== undefined;
  const forms = [hasMethodPath, body.permission_id !== undefined, body.operation_id !== undefined].filter(
    Boolean,
  );
  if (forms.length !== 1) {
    throw badRequest("Name the operation with exactly one of: method and path, permission_id, operation_id.");
  }
  if (body.permission_id !== undefined) {
    let parsed: ReturnType<typeof parsePermissionId>;
    try {
      parsed = parsePermissionId(body.permission_id);
    } catch {
      throw badRequest("permission_id is not a valid permission id.");
    }
    if (parsed.capabilityId !== body.capability_id)
      throw badRequest("permission_id names another capability.");
    return { ok: true, target: { method: parsed.method, path: parsed.pathTemplate, isTemplate: true } };
  }
  if (body.operation_id !== undefined) {
    const capability = await runtime.decisions.capabilities.resolve(partnerId, body.capability_id);
    if (capability === undefined) return { ok: false, reason: "unknown_capability" };
    const operation = capability.operations.find((op) => op.operation_id === body.operation_id);
    if (operation === undefined) return { ok: false, reason: "unknown_operation" };
    return { ok: true, target: { method: operation.method, path: operation.path, isTemplate: true } };
  }
  if (body.method === undefined || body.path === undefined) throw badRequest("method and path go together.");
  return { ok: true, target: { method: body.method, path: body.path, isTemplate: body.path.includes("{") } };
}

/** Step 5: everything that can be refused without opening the policy. */
async function checkBeforeDecryption(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
  capabilityId: string,
  target: Target,
  experience: ExperienceRecord | undefined,
): Promise<DenyReason | undefined> {
  const { binding } = call.workload;
  const { subjectId } = call.user.derived;
  if (!binding.active) return "missing_subject";
  // The binding's experience narrows what end users may reach (a disabled one: nothing).
  const hidden = experienceDenial(experience, capabilityId);
  if (hidden !== undefined) return hidden;
  const mapping = await runtime.records.mapping(binding.binding_id, subjectId);
  if (mapping === undefined || mapping.partner_id !== binding.partner_id) return "missing_subject";
  const subject = await runtime.decisions.subjects.get(subjectId);
  if (
    subject === undefined ||
    subject.partner_id !== binding.partner_id ||
    !subjectAdmits(
      { partner_id: subject.partner_id, identity: identityOf(subject) },
      { via: "binding", partnerId: binding.partner_id },
    ) ||
    subject.subject_type !== "external" ||
    subject.crypto_version !== "platform_service_v2"
  ) {
    return "missing_subject";
  }
  if (subject.boundary_id === null) return undefined;
  const boundary = await deps.store.get<BoundaryRecord>(
    collections.boundaries,
    storeKeys.boundary(binding.partner_id, subject.boundary_id),
  );
  // A boundary that cannot be read admits nothing.
  if (boundary === undefined || !boundary.allowed_capabilities.includes(capabilityId)) {
    return "operation_not_allowed";
  }
  const capability = await runtime.decisions.capabilities.resolve(binding.partner_id, capabilityId);
  const permissionId = attemptedPermission(capability, target.method, target.path);
  if (
    permissionId !== null &&
    !boundary.allowed_permission_patterns.some((pattern) => permissionPatternMatches(pattern, permissionId))
  ) {
    return "operation_not_allowed";
  }
  return undefined;
}

/** The executor's arguments: the caller's, plus path values a concrete request path carried. */
function executionArgs(body: InvokeBody, target: Target, decision: AllowedDecision): InvokeArguments {
  const given = body.arguments ?? {};
  if (target.isTemplate || Object.keys(decision.params).length === 0) return given;
  const path: Record<string, unknown> = { ...decision.params };
  for (const [name, value] of Object.entries(given.path ?? {})) {
    if (Object.hasOwn(path, name) && String(path[name]) !== String(value)) {
      throw badRequest(`arguments.path.${name} differs from the value in path.`);
    }
    path[name] = value;
  }
  return { ...given, path };
}

interface EvidenceFacts {
  readonly started: number;
  readonly decidedAt: number;
  readonly requestHash: Sha256Ref;
  readonly capabilityId: string | null;
  readonly method: string;
  readonly path: string;
}

function evidenceOf(
  call: InvokeCall,
  facts: EvidenceFacts,
  outcome: {
    readonly decision: "allowed" | "denied";
    readonly reason?: string;
    readonly permissionId?: string;
    readonly policy?: {
      readonly policy_hash: string;
      readonly document_hash: string;
      readonly policy_version: string;
    };
    readonly result?: ExecutionResult;
    readonly error?: AuthorityError;
    readonly envelopeId?: string;
  },
  evidenceId: string,
  now: Date,
): InvocationEvidence {
  const { client, binding } = call.workload;
  const result = outcome.result;
  const failure = outcome.error instanceof ExecutionError ? outcome.error : undefined;
  return {
    kind: "binding_invocation",
    evidence_id: evidenceId,
    transport: call.transport,
    binding_id: binding.binding_id,
    partner_id: binding.partner_id,
    client_id: client.client_id,
    subject_id: call.user.derived.subjectId,
    capability_id: facts.capabilityId,
    permission_id: outcome.permissionId ?? null,
    method: facts.method.toUpperCase(),
    path: recordedPath(facts.path),
    decision: outcome.decision,
    reason: outcome.reason ?? null,
    error_code: outcome.error?.code ?? null,
    request_hash: facts.requestHash,
    upstream_request_hash: result?.requestHash ?? failure?.requestHash ?? null,
    response_hash: result?.responseHash ?? null,
    policy_hash: outcome.policy?.policy_hash ?? null,
    document_hash: outcome.policy?.document_hash ?? null,
    policy_version: outcome.policy?.policy_version ?? null,
    upstream_status: result?.status ?? null,
    redaction_events: (result?.redactionEvents ?? []).map((event) => ({ ...event })),
    envelope_id: outcome.envelopeId ?? null,
    timings: {
      total_ms: Math.round((performance.now() - facts.started) * 1000) / 1000,
      decision_ms: Math.round((facts.decidedAt - facts.started) * 1000) / 1000,
      upstream_ms: result?.timings.upstreamMs ?? failure?.timings?.upstreamMs ?? null,
    },
    idempotency_key_hash: call.idempotencyKey === undefined ? null : sha256Ref(call.idempotencyKey),
    requestId: call.requestId,
    time: now.toISOString(),
  };
}

async function record(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  evidence: InvocationEvidence,
): Promise<void> {
  // Evidence is written after the fact: a failure is logged, the caller's answer stands.
  const failed = (what: string) => (error: unknown) => {
    deps.logger?.error({ err: error, evidence_id: evidence.evidence_id }, what);
  };
  // The digest for the shared `evidence` log is handed to the audit writer's queue (which
  // group-commits it on a later turn and flushes it on close) without waiting for the
  // commit; the record `GET …/evidence/{id}` reads is stored before the answer goes out.
  void Promise.resolve()
    .then(() => runtime.decisions.recorder.recordEvidence(evidenceLogInput(evidence)))
    .catch(failed("binding evidence could not be queued"));
  if (deps.holdEvidence !== undefined) {
    deps.holdEvidence(evidenceWrite(evidence));
    return;
  }
  await writeEvidence(deps.store, evidence).catch(failed("binding evidence could not be stored"));
}

/**
 * One idempotent execution: its evidence goes with the kept result (one transaction); when
 * the result is not kept, or the work fails, the evidence is stored on its own.
 */
async function idempotentWork(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
  requestHash: Sha256Ref,
  sending: () => Promise<void>,
  unsent: () => void,
): Promise<WorkResult> {
  const held: StoreWrite[] = [];
  const storeHeld = () =>
    deps.store.writeAll(held).catch((error: unknown) => {
      deps.logger?.error({ err: error }, "binding evidence could not be stored");
    });
  try {
    const result = await execute(
      runtime,
      { ...deps, holdEvidence: (write) => held.push(write), sending, unsent },
      call,
      requestHash,
    );
    if (result.keep) return { ...result, writes: held };
    await storeHeld();
    return result;
  } catch (error) {
    await storeHeld();
    throw error;
  }
}

/** The answer when the record cannot be kept: the outage of the pipeline's one mapping (failure.ts). */
const unavailable = (requestId: string): StoredResponse => {
  const failure = outageFailure();
  return { status_code: failure.status, body: denyOutcome(failure.code, requestId) };
};

interface EvidencePolicyFacts {
  readonly policy_hash: string;
  readonly document_hash: string;
  readonly policy_version: string;
}

/** Steps 1–5 passed: what the pipeline decides and runs, and the facts its evidence needs. */
interface Prepared {
  readonly target: Target;
  readonly facts: Omit<EvidenceFacts, "decidedAt">;
  readonly request: Omit<InvocationRequest, "settleAllowLater">;
  readonly evidenceId: string;
  readonly now: Date;
}

/**
 * The binding's own stages before the shared pipeline: the target, then step 5 (everything
 * refused without opening the policy). A refusal is recorded (audit, usage, evidence) and
 * answered with the spec's Deny shape.
 */
async function prepareCall(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
  requestHash: Sha256Ref,
): Promise<
  { readonly kind: "refused"; readonly result: WorkResult } | ({ readonly kind: "ready" } & Prepared)
> {
  const started = performance.now();
  const now = deps.now();
  const { binding, client } = call.workload;
  const { derived } = call.user;
  const evidenceId = newEvidenceId(now);
  const capabilityId =
    call.body.capability_id === undefined || call.body.capability_id === ""
      ? undefined
      : call.body.capability_id;
  const base = {
    started,
    requestHash,
    capabilityId: capabilityId ?? null,
    method: call.body.method ?? "",
    path: call.body.path ?? call.body.permission_id ?? call.body.operation_id ?? "",
  };

  // Read once per call: the same copy serves the check before decryption and the decision.
  const experience = capabilityId === undefined ? undefined : await runtime.records.experience(binding);
  // Step 1 of the spec's decision: no capability context is the Deny `missing_capability`.
  const resolved: TargetOutcome =
    capabilityId === undefined
      ? { ok: false, reason: "missing_capability" }
      : await resolveTarget(runtime, binding.partner_id, { ...call.body, capability_id: capabilityId });
  const target = resolved.ok ? resolved.target : undefined;
  const facts = target === undefined ? base : { ...base, method: target.method, path: target.path };
  const preDeny =
    resolved.ok && capabilityId !== undefined
      ? await checkBeforeDecryption(runtime, deps, call, capabilityId, resolved.target, experience)
      : resolved.ok
        ? undefined
        : resolved.reason;
  if (preDeny !== undefined || target === undefined || capabilityId === undefined) {
    const reason: DenyReason = preDeny ?? "unknown_operation";
    try {
      await runtime.decisions.recorder.record({
        actor: client.client_id,
        subject_id: derived.subjectId,
        partner_id: binding.partner_id,
        capability_id: capabilityId ?? null,
        method: facts.method,
        path: recordedPath(facts.path),
        decision: "denied",
        reason,
        transport: call.transport,
        requestId: call.requestId,
        time: now,
      });
    } catch {
      return { kind: "refused", result: { response: unavailable(call.requestId), keep: false } };
    }
    await record(
      runtime,
      deps,
      evidenceOf(
        call,
        { ...facts, decidedAt: performance.now() },
        { decision: "denied", reason },
        evidenceId,
        now,
      ),
    );
    return {
      kind: "refused",
      result: {
        response: { status_code: denyReasons[reason].status, body: denyOutcome(reason, call.requestId) },
        keep: false,
      },
    };
  }
  return {
    kind: "ready",
    target,
    facts,
    evidenceId,
    now,
    request: {
      transport: call.transport,
      requestId: call.requestId,
      now,
      actor: client.client_id,
      subjectId: derived.subjectId,
      capabilityId,
      method: target.method,
      path: target.path,
      pathIsTemplate: target.isTemplate,
      expectedContext: derived.context,
      authenticatedAs: { via: "binding", partnerId: binding.partner_id },
      ...(experience === undefined ? {} : { permits: experiencePermits(experience) }),
    },
  };
}

function policyFactsOf(authorization: InvocationResult): EvidencePolicyFacts | undefined {
  const policy = authorization.policy;
  return policy === undefined
    ? undefined
    : {
        policy_hash: policy.policy_hash,
        document_hash: policy.document_hash,
        policy_version: policy.policy_version,
      };
}

/** The decision refused (or failed): already recorded by the pipeline; evidence and the Deny shape. */
async function deniedByDecision(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
  prepared: Prepared,
  authorization: InvocationResult,
  decidedAt: number,
): Promise<WorkResult> {
  const reason = authorization.outcome.status === "denied" ? authorization.outcome.reason : "internal";
  if (!authorization.unavailable) {
    const policyFacts = policyFactsOf(authorization);
    await record(
      runtime,
      deps,
      evidenceOf(
        call,
        { ...prepared.facts, decidedAt },
        { decision: "denied", reason, ...(policyFacts ? { policy: policyFacts } : {}) },
        prepared.evidenceId,
        prepared.now,
      ),
    );
  }
  return {
    response: {
      ...receiptOf(authorization),
      status_code: authorization.httpStatus,
      body: denyOutcome(
        reason,
        call.requestId,
        authorization.outcome.status === "denied" ? authorization.outcome.explanation : undefined,
      ),
    },
    keep: false,
  };
}

/** The pipeline of this runtime's dependencies (src/pipeline/enforce.ts). */

async function execute(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
  requestHash: Sha256Ref,
): Promise<WorkResult> {
  const ready = await prepareCall(runtime, deps, call, requestHash);
  if (ready.kind === "refused") return ready.result;
  const { target, evidenceId, now } = ready;
  const { binding } = call.workload;
  let decidedAt = performance.now();
  let envelopeId: string | undefined;
  const outcome = await runtime.pipeline.run(ready.request, {
    args: (decision) => {
      decidedAt = performance.now();
      return executionArgs(call.body, target, decision);
    },
    // The authority envelope signs the validated arguments: sealed only once they passed.
    headers: async (decision, validated) => {
      const envelopes = runtime.envelopes;
      if (envelopes === undefined)
        throw new EnvelopeCryptoUnavailableError("envelope keys are not configured");
      const claims = buildEnvelopeClaims({
        profile: PARTNER_PROFILE_V2,
        issuer: runtime.issuer,
        partnerId: binding.partner_id,
        bindingId: binding.binding_id,
        operationId: decision.operation.operation_id,
        permissionId: decision.permissionId,
        argsDigest: argumentsDigest({
          path: validated.path,
          query: validated.query,
          body: validated.hasBody ? validated.body : null,
        }),
        now,
      });
      envelopeId = claims.jti;
      // The key's `sending` state is stored while the signature is made (on a pool thread):
      // both exist before the upstream may be contacted, and neither waits for the other. The
      // write waits a turn, so the signature is handed to the pool first. Both settle before
      // either's failure is answered, so a released key stays released.
      const [sealed, stored] = await Promise.allSettled([
        envelopes.seal(claims, binding.partner_id, PARTNER_PROFILE_V2),
        deps.sending === undefined ? undefined : nextTurn().then(deps.sending),
      ]);
      if (sealed.status === "rejected") throw sealed.reason;
      if (stored.status === "rejected") throw stored.reason;
      return { [ENVELOPE_HEADER]: sealed.value, "x-request-id": call.requestId };
    },
    // Whose grant (oauth_user) or token (token exchange) the call uses: the derived subject's.
    endUser: {
      subjectId: call.user.derived.subjectId,
      token: { value: call.user.token, expiresAt: call.user.assertion.expiresAt.getTime() },
    },
    authProfile: (partnerId, profileRef) =>
      runtime.records.authProfile(partnerId, profileRef).catch((error: unknown) => {
        throw new ExecutionError("auth_profile_unavailable", {
          details: {
            issue:
              error instanceof AuthorityError && error.code === "not_found"
                ? "auth_profile_missing"
                : "auth_profile_unreadable",
          },
        });
      }),
  });
  if (outcome.kind === "denied") {
    return deniedByDecision(runtime, deps, call, ready, outcome.authorization, performance.now());
  }
  const { decision } = outcome;
  const policyFacts = policyFactsOf(outcome.authorization);
  const facts = { ...ready.facts, decidedAt };
  if (outcome.kind === "refused") {
    const { error, cause, contacted, recorded } = outcome;
    // The pipeline refused after the decision: the call is recorded as denied, with the code.
    await record(
      runtime,
      deps,
      evidenceOf(
        call,
        facts,
        {
          decision: "denied",
          reason: error.code,
          permissionId: decision.permissionId,
          ...(policyFacts ? { policy: policyFacts } : {}),
          error: cause instanceof ExecutionError ? cause : error,
          ...(envelopeId ? { envelopeId } : {}),
        },
        evidenceId,
        now,
      ),
    );
    // Once the upstream may have acted, the outcome is kept: a retry must not run it twice.
    if (!recorded) return { response: unavailable(call.requestId), keep: contacted };
    if (!contacted) {
      // A refusal with one of the deny reasons (ambiguous_path, the rollout gate's
      // operation_not_allowed, invalid constraint metadata's policy_verification_failed) is
      // answered in the Deny shape.
      if (isDenyReason(error.code)) {
        return {
          response: {
            ...receiptOf(outcome.authorization),
            status_code: error.status,
            body: denyOutcome(error.code, call.requestId, failureExplanation(error)),
          },
          keep: false,
        };
      }
      // A fault is thrown to the route's error handler, which logs it; a caller's fault (the
      // input schema, a constraint) is answered here with the receipt of its recorded deny.
      // Nothing reached the upstream: the key is released even if `sending` was stored.
      if (!error.callerFault) {
        deps.unsent?.();
        throw error;
      }
    }
    return {
      response: {
        ...receiptOf(outcome.authorization),
        status_code: error.status,
        body: { ...error.toJSON(), requestId: call.requestId },
      },
      keep: contacted,
    };
  }
  const { result, recorded } = outcome;
  await record(
    runtime,
    deps,
    evidenceOf(
      call,
      facts,
      {
        decision: "allowed",
        permissionId: decision.permissionId,
        ...(policyFacts ? { policy: policyFacts } : {}),
        result,
        ...(envelopeId ? { envelopeId } : {}),
      },
      evidenceId,
      now,
    ),
  );
  if (!recorded) return { response: unavailable(call.requestId), keep: true };
  return {
    response: {
      ...receiptOf(outcome.authorization),
      status_code: 200,
      body: {
        status: "allowed",
        permissionId: decision.permissionId,
        requestId: call.requestId,
        result: {
          status: result.status,
          headers: result.headers,
          body: result.body,
          redaction_events: result.redactionEvents,
        },
        evidenceId,
      },
    },
    keep: true,
  };
}

/**
 * A stored result is replayed only while the policy still allows the call now: the same
 * decision path runs again (mapping, subject, boundary, verified policy: revocation, expiry,
 * allowlist), recorded like any call. A refusal is answered instead of the stored result.
 */
async function recheckReplay(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
  requestHash: Sha256Ref,
): Promise<StoredResponse | undefined> {
  const ready = await prepareCall(runtime, deps, call, requestHash);
  if (ready.kind === "refused") return ready.result.response;
  const authorization = await runtime.pipeline.authorize(ready.request);
  if (authorization.outcome.status === "allowed") return undefined;
  return (await deniedByDecision(runtime, deps, call, ready, authorization, performance.now())).response;
}

/** Runs one invoke (or broker execute), through the Idempotency-Key when one is given. */
export async function runInvoke(
  runtime: BindingRuntime,
  deps: InvokeDeps,
  call: InvokeCall,
): Promise<InvokeResponse> {
  const { binding } = call.workload;
  let requestHash: Sha256Ref;
  try {
    requestHash = hashCanonical({
      binding_id: binding.binding_id,
      subject_id: call.user.derived.subjectId,
      body: call.body,
    });
  } catch {
    throw badRequest("The body is not plain JSON.");
  }
  if (call.idempotencyKey === undefined) {
    const { response } = await execute(runtime, deps, call, requestHash);
    return answerOf(response, false);
  }
  const work = (sending: () => Promise<void>, unsent: () => void) =>
    idempotentWork(runtime, deps, call, requestHash, sending, unsent);
  const outcome = await runtime.idempotency.run(binding.binding_id, call.idempotencyKey, requestHash, work, {
    recheck: () => recheckReplay(runtime, deps, call, requestHash),
  });
  return answerOf(outcome.response, outcome.replayed);
}

/** A stored result replayed keeps the receipt of the decision that produced it. */
function answerOf(response: StoredResponse, replayed: boolean): InvokeResponse {
  return {
    statusCode: response.status_code,
    body: response.body,
    replayed,
    ...(response.receipt === undefined ? {} : { receipt: response.receipt }),
  };
}
