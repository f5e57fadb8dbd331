/**
 * The enforcement pipeline of the authority's paths that reach an upstream (binding invoke,
 * broker execute, MCP `tools/call`), built from its dependencies at construction:
 *
 *   decide + record (authorize.ts: subject → verified policy → decide(), the allow's record
 *   deferred) → prepare the upstream request (src/execute/prepare.ts: path-value rule → input
 *   schema → signed parameter constraints with the rollout gate → render → re-match against
 *   the catalog: the allowed permission, else ambiguous_path) → the transport's trusted headers
 *   and the auth profile → send (src/execute/executor.ts: egress on the resolved address →
 *   inject credentials → call with a deadline → scrub injected secrets → redact, fail closed)
 *   → settle the record: what really happened, allow or deny with the refusal's code.
 *
 * Every failure after the decision is mapped once (failure.ts) and recorded as a deny with
 * that code before the outcome is returned; an answer whose record cannot be kept is not
 * released (`recorded: false`). authorize-invocation uses the first stage alone; the sidecar
 * runs the same decision stage (decision.ts) and prepare stages on its own cached inputs.
 */
import type { AllowedDecision } from "../core/decision.ts";
import type { AuthorityError } from "../errors.ts";
import type { EndUser } from "../execute/auth-injector.ts";
import type { AuthProfile } from "../execute/auth-profiles.ts";
import { ExecutionError } from "../execute/errors.ts";
import type { ExecutionResult, Executor } from "../execute/executor.ts";
import type { ValidatedArgs } from "../execute/input.ts";
import { prepareUpstreamRequest } from "../execute/prepare.ts";
import { allowedRoute } from "../execute/url.ts";
import type { DecisionRuntime } from "../policy/runtime.ts";
import { authorizeInvocation, type InvocationRequest, type InvocationResult } from "./authorize.ts";
import { pipelineFailure } from "./failure.ts";

export interface EnforcementPipelineDeps {
  /** Subjects, capabilities, the verified-policy loader and the audit recorder. */
  readonly decisions: DecisionRuntime;
  /** The upstream client: its rollout gate and its send stage. */
  readonly upstream: Pick<Executor, "send" | "rolloutFor">;
}

/** What the pipeline needs from the transport to run an allowed call. */
export interface UpstreamCall {
  /** The operation's arguments (`{ path?, query?, headers?, body? }`) for the allowed decision. */
  readonly args: (decision: AllowedDecision) => unknown;
  /** The executor's form of the auth profile the policy entry names (secrets stay references). */
  readonly authProfile: (partnerId: string, profileRef: string) => Promise<AuthProfile>;
  /**
   * Trusted headers the transport adds once the arguments are validated (request id, the
   * invoke's authority envelope over the validated arguments); never credentials.
   */
  readonly headers?: (
    decision: AllowedDecision,
    args: ValidatedArgs,
  ) => Readonly<Record<string, string>> | Promise<Readonly<Record<string, string>>>;
  readonly signal?: AbortSignal;
  /** The end user the call is made for (their grant, or their token to exchange); the partner is the policy's. */
  readonly endUser?: Omit<EndUser, "partnerId">;
}

export type PipelineOutcome =
  /** Refused by the decision (or a failure before it): recorded as a deny already. */
  | { readonly kind: "denied"; readonly authorization: InvocationResult }
  /** Allowed, then refused or failed in a later stage: recorded as a deny with `error.code`. */
  | {
      readonly kind: "refused";
      readonly authorization: InvocationResult;
      readonly decision: AllowedDecision;
      readonly error: AuthorityError;
      /** What was thrown (an ExecutionError carries request hash and timings). */
      readonly cause: unknown;
      /** The upstream may have acted (it was called). */
      readonly contacted: boolean;
      readonly recorded: boolean;
    }
  /** The upstream answered (any status) and the answer was scrubbed and redacted. */
  | {
      readonly kind: "completed";
      readonly authorization: InvocationResult;
      readonly decision: AllowedDecision;
      readonly result: ExecutionResult;
      /** False: the allow could not be recorded, and the answer must not be released (503). */
      readonly recorded: boolean;
    };

export interface EnforcementPipeline {
  /** Decide and record only (authorize-invocation, replay re-checks). */
  authorize(request: InvocationRequest): Promise<InvocationResult>;
  /** Every stage, for a path that reaches an upstream. */
  run(request: Omit<InvocationRequest, "settleAllowLater">, call: UpstreamCall): Promise<PipelineOutcome>;
}

const kept = (): boolean => true;
const lost = (): boolean => false;
const noop = (): void => undefined;
/** Resolves after the current turn's callbacks and promise jobs (a check-phase callback). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export function createEnforcementPipeline(deps: EnforcementPipelineDeps): EnforcementPipeline {
  const { decisions, upstream } = deps;
  if (typeof decisions?.recorder?.record !== "function") throw new TypeError("decisions are required");
  if (typeof upstream?.send !== "function" || typeof upstream.rolloutFor !== "function")
    throw new TypeError("upstream must provide send and rolloutFor");

  async function run(
    request: Omit<InvocationRequest, "settleAllowLater">,
    call: UpstreamCall,
  ): Promise<PipelineOutcome> {
    const authorization = await authorizeInvocation(decisions, { ...request, settleAllowLater: true });
    const decision = authorization.decision;
    if (authorization.outcome.status !== "allowed" || decision?.status !== "allowed") {
      return { kind: "denied", authorization };
    }
    const partnerId = authorization.partnerId;
    const settle = authorization.settle ?? (() => Promise.resolve());
    let result: ExecutionResult;
    let headersSettled: Promise<void> | undefined;
    try {
      if (partnerId === null) throw new ExecutionError("invalid_operation_snapshot");
      const { operation } = decision;
      const route = allowedRoute(authorization.capability, decision.permissionId, operation);
      const rollout = await upstream.rolloutFor(operation, partnerId);
      const prepared = prepareUpstreamRequest(route, call.args(decision), rollout);
      // The transport's headers (invoke: its envelope, signed on a pool thread) are awaited by
      // the send stage right before the call: the auth profile, the egress check and the
      // credentials are made ready meanwhile.
      const extraHeaders = call.headers?.(decision, prepared.args);
      headersSettled = Promise.resolve(extraHeaders).then(noop, noop);
      // Headers still in the making get this turn to start their work (a signature handed
      // to a pool thread) before the rest is read.
      if (extraHeaders instanceof Promise) await nextTurn();
      const authProfile = await call.authProfile(partnerId, decision.authProfileRef);
      result = await upstream.send({
        snapshot: operation,
        prepared,
        authProfile,
        redactions: decision.redactions,
        ...(extraHeaders === undefined ? {} : { extraHeaders }),
        ...(call.signal === undefined ? {} : { signal: call.signal }),
        ...(call.endUser === undefined ? {} : { endUser: { ...call.endUser, partnerId } }),
      });
    } catch (cause) {
      // Whatever the headers' step started (invoke: its key's `sending` write) has settled
      // before the refusal is answered and the key released.
      await headersSettled;
      const error = pipelineFailure(cause);
      const recorded = await settle(error.code).then(kept, lost);
      const contacted = cause instanceof ExecutionError && cause.upstreamError !== undefined;
      return { kind: "refused", authorization, decision, error, cause, contacted, recorded };
    }
    // The upstream's answer is released only once the allow is recorded.
    const recorded = await settle().then(kept, lost);
    return { kind: "completed", authorization, decision, result, recorded };
  }

  return {
    authorize: (request) => authorizeInvocation(decisions, request),
    run,
  };
}
