import type { Capability } from "../../core/capability.ts";
import { isMcpToolSnapshot, type OperationSnapshot } from "../../core/operation-snapshot.ts";
import { isValidCapabilityId } from "../../core/permission-id.ts";
import type { RedactionRule } from "../../core/redaction.ts";
import { type SubjectAuthentication, subjectCandidates } from "../../core/subject-identity.ts";
import { type DenyExplanation, type ErrorCode, errorCodes } from "../../errors.ts";
import { NO_AUTH_PROFILE_ID } from "../../execute/auth-profiles.ts";
import { enforceOperationInput, type ValidatedArgs } from "../../execute/input.ts";
import { extractBearer } from "../../identity/bearer.ts";
import { decisionOutcome, traced } from "../../observability/tracing.ts";
import {
  type DecisionNotes,
  decideStage,
  decisionNotes,
  subjectStandsFor,
  withShadow,
} from "../../pipeline/decision.ts";
import { failureExplanation, pipelineFailure } from "../../pipeline/failure.ts";
import type {
  CacheLayer,
  PolicyLookup,
  VerifiedPolicy,
  VerifiedPolicyCache,
} from "../../policy/cache/index.ts";
import type { CapabilityMap } from "./capability-map.ts";
import { SidecarConfigError } from "./errors.ts";
import { type HeaderBag, operationArguments, type RequestBody } from "./request-input.ts";
import type { SidecarShadowPolicies } from "./shadow-policies.ts";
import type { TokenCheck, VerifiedTokenCache } from "./token-cache.ts";

/**
 * The enforcement pipeline's stages on the sidecar, shared by ext_authz and the forward proxy
 * (docs/decisions/1301-one-enforcement-pipeline.md): authenticate (cached bearer verification)
 * → derive the subject (the token's `sub`, admitted by the subject's identity) → capability
 * (explicit, else the capability map) → the verified policy (local → Redis → authority, signed
 * policies verified with public keys) → the pipeline's decision stage (src/pipeline/decision.ts,
 * around `decide()`) → the request's path parameters, query, declared headers and body against
 * the snapshot's input schema and signed parameter constraints with the rollout gate
 * (`enforceOperationInput`, the same stage as the executor's) → the auth profile's credentials.
 * The proxy then renders and re-matches the upstream request (src/execute/url.ts), sends,
 * scrubs and redacts. Total: every failure is a deny with the error table's status and reason
 * through the pipeline's one failure mapping; nothing but the decision stage's allow is an allow.
 * Each stage continues synchronously when its input is cached: the common Check allocates no promise.
 */

export type Transport = "grpc" | "proxy";

export interface SidecarRequest {
  readonly transport: Transport;
  /** The caller's `Authorization` (or, for the proxy, `Proxy-Authorization`) header. */
  readonly authorization: string | undefined;
  /** From context_extensions / the proxy header; undefined → the capability map decides. */
  readonly capabilityId: string | undefined;
  readonly host: string;
  readonly method: string;
  /** Path and query as received. */
  readonly path: string;
  /** The caller's headers (lower-case names); the declared ones are inputs of the operation. */
  readonly headers?: HeaderBag;
  /**
   * The body when the transport has it (the proxy; ext_authz with Envoy's with_request_body).
   * Absent: a body the framing headers announce was not seen, and an operation that takes or
   * constrains a body is then denied with request_body_required.
   */
  readonly body?: RequestBody;
  readonly requestId: string;
  /**
   * Aborted when the transport has answered without waiting for this decision (its deadline,
   * the caller cancelling, shutdown): the audit then records the 503 that was sent instead.
   */
  readonly signal?: AbortSignal;
}

export interface InjectedCredentials {
  readonly headers: Readonly<Record<string, string>>;
  readonly query: Readonly<Record<string, string>>;
}

const FRESH_ARGUMENTS = { fresh: true } as const;

const NO_CREDENTIALS: InjectedCredentials = Object.freeze({ headers: {}, query: {} });

export interface SidecarAllow {
  readonly allow: true;
  readonly requestId: string;
  readonly subjectId: string;
  readonly partnerId: string;
  readonly capabilityId: string;
  readonly permissionId: string;
  /** The policy's reviewed snapshot (upstream URL template, response rules). */
  readonly operation: OperationSnapshot;
  /** The policy entry's response redactions for this permission. */
  readonly redactions: readonly RedactionRule[];
  readonly params: Readonly<Record<string, string>>;
  /** The catalog the decision matched: the forward proxy matches its rendered request against it again. */
  readonly capability: Capability;
  /** The arguments as validated and constrained: what may be forwarded (the proxy renders them). */
  readonly input: ValidatedArgs;
  readonly credentials: InjectedCredentials;
  readonly policyHead: number;
  readonly policyLayer: CacheLayer;
  /** The shadow policy's outcome, for the record (decision 2761). */
  readonly notes?: DecisionNotes;
}

/** Who and what a deny was about, as far as the engine got before denying (for the audit record). */
export interface DenyContext {
  readonly subjectId: string;
  readonly partnerId?: string;
  readonly capabilityId?: string;
  /** The shadow policy's outcome, for the record (decision 2761). */
  readonly notes?: DecisionNotes;
}

export interface SidecarDeny {
  readonly allow: false;
  readonly httpStatus: number;
  readonly reason: ErrorCode;
  readonly requestId: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly context?: DenyContext;
  /** The refusing step's rule and remedy (errors.ts explainDeny fills in the rest). */
  readonly explanation?: DenyExplanation;
}

export type SidecarDecision = SidecarAllow | SidecarDeny;

export interface CatalogSource {
  /** The partner's capability, or undefined when it does not resolve. */
  get(partnerId: string, capabilityId: string): Promise<Capability | undefined>;
  /** A cached answer without waiting (`{ value }`, the value possibly undefined), else undefined. */
  peek?(partnerId: string, capabilityId: string): { readonly value: Capability | undefined } | undefined;
  /**
   * Starts loading the capability unless cached, without waiting (a later `get` joins the load). Called
   * while the caller's policy is fetched, so a first Check waits for one round trip less.
   */
  prefetch?(partnerId: string, capabilityId: string): void;
}

export interface CredentialSource {
  get(partnerId: string, profileId: string): Promise<InjectedCredentials>;
  /** Cached credentials without waiting, else undefined. */
  peek?(partnerId: string, profileId: string): InjectedCredentials | undefined;
}

export interface SidecarEngineOptions {
  readonly tokens: VerifiedTokenCache;
  readonly policies: VerifiedPolicyCache;
  readonly catalogs: CatalogSource;
  readonly credentials: CredentialSource;
  readonly capabilityMap: CapabilityMap;
  /**
   * The parameter-scoping rollout, as the authority service's (AUTHORITY_PARAMETER_SCOPING,
   * AUTHORITY_PARAMETER_SCOPING_PARTNERS). Default off: an operation with constraints is denied.
   */
  readonly constraintsRollout?: { readonly enabled: boolean; readonly partnerAllowlist: Iterable<string> };
  readonly now?: () => Date;
  /** Told of token checks (metrics): `cached`, `verified`, `rejected`, `unavailable`. */
  readonly onTokenCheck?: (result: "cached" | "verified" | "rejected" | "unavailable") => void;
  /** The subjects' shadow policies (decision 2761); absent: none are evaluated. */
  readonly shadows?: SidecarShadowPolicies;
  /** Whether a capability is in the platform-wide log-only mode (decision 2761); absent: none is. */
  readonly logOnly?: (capability: Capability) => boolean;
}

export interface SidecarEngine {
  authorize(request: SidecarRequest): Promise<SidecarDecision>;
  /**
   * The same decision, synchronously when every input is cached (the common case: no
   * promise, no microtask), else a promise. Never throws or rejects: failures are denies.
   */
  decide(request: SidecarRequest): SidecarDecision | Promise<SidecarDecision>;
}

const CHALLENGE = 'Bearer realm="authority"';

/** What a principal sees of a subject that does not stand for it: no subject, no policy. */
function notAdmitted(policy: VerifiedPolicy): VerifiedPolicy {
  return {
    subjectId: policy.subjectId,
    head: policy.head,
    partnerId: undefined,
    identity: undefined,
    verifiedAt: policy.verifiedAt,
    load: { ok: false, reason: "missing_policy" },
  };
}

export function denyOf(
  reason: ErrorCode,
  requestId: string,
  headers?: Readonly<Record<string, string>>,
): SidecarDeny {
  const status = errorCodes[reason].status;
  const merged: Record<string, string> = { ...headers };
  if (status === 401) {
    merged["www-authenticate"] =
      reason === "invalid_token" ? `${CHALLENGE}, error="invalid_token"` : CHALLENGE;
  }
  return Object.keys(merged).length === 0
    ? { allow: false, httpStatus: status, reason, requestId }
    : { allow: false, httpStatus: status, reason, requestId, headers: merged };
}

function denyAbout(
  reason: ErrorCode,
  requestId: string,
  context: DenyContext,
  explanation?: DenyExplanation,
): SidecarDeny {
  const deny = { ...denyOf(reason, requestId), context };
  return explanation === undefined ? deny : { ...deny, explanation };
}

/**
 * Any failure's deny, through the pipeline's one mapping (src/pipeline/failure.ts): a refusal
 * keeps its code, an outage is 503 upstream_unavailable, any other fault 500 internal.
 */
export function denyForError(error: unknown, requestId: string): SidecarDeny {
  const failure = pipelineFailure(error);
  return { ...denyOf(failure.code, requestId), explanation: failureExplanation(failure) };
}

export function createSidecarEngine(options: SidecarEngineOptions): SidecarEngine {
  if (typeof options !== "object" || options === null)
    throw new SidecarConfigError("engine options are required");
  const { tokens, policies, catalogs, credentials, capabilityMap } = options;
  if (typeof tokens?.check !== "function") throw new SidecarConfigError("tokens are required");
  if (typeof policies?.get !== "function") throw new SidecarConfigError("policies are required");
  if (typeof catalogs?.get !== "function") throw new SidecarConfigError("catalogs are required");
  if (typeof credentials?.get !== "function") throw new SidecarConfigError("credentials are required");
  if (typeof capabilityMap?.resolve !== "function") throw new SidecarConfigError("capabilityMap is required");
  const now = options.now ?? (() => new Date());
  const onTokenCheck = options.onTokenCheck ?? (() => undefined);
  const rolloutEnabled = options.constraintsRollout?.enabled === true;
  const rolloutPartners = new Set(options.constraintsRollout?.partnerAllowlist ?? []);

  // The decision in stages; each stage continues at once when its input is cached and
  // through a promise when it has to wait, so the all-cached path allocates no promise.
  type Step = SidecarDecision | Promise<SidecarDecision>;

  const evaluate = (request: SidecarRequest): Step => {
    const { requestId } = request;
    let token: string | undefined;
    try {
      token = extractBearer(request.authorization);
    } catch {
      onTokenCheck("rejected");
      return denyOf("invalid_token", requestId);
    }
    if (token === undefined) return denyOf("missing_subject", requestId);
    const checked = traced("authority.verify_token", () => tokens.check(token));
    return checked instanceof Promise
      ? checked.then((result) => withToken(request, result))
      : withToken(request, checked);
  };

  const withToken = (request: SidecarRequest, checked: TokenCheck): Step => {
    const { requestId } = request;
    if (!checked.ok) {
      onTokenCheck(checked.unavailable ? "unavailable" : "rejected");
      return denyOf(checked.unavailable ? "upstream_unavailable" : "invalid_token", requestId);
    }
    onTokenCheck(checked.cached ? "cached" : "verified");
    const capabilityId = request.capabilityId || capabilityMap.resolve(request.host, request.path);
    if (capabilityId === undefined || capabilityId === "")
      return denyAbout("missing_capability", requestId, { subjectId: checked.principal.subject });
    // A caller's header that no capability id can match resolves to nothing, without asking the authority.
    if (!isValidCapabilityId(capabilityId))
      return denyAbout("unknown_capability", requestId, { subjectId: checked.principal.subject });
    const bearer = {
      via: "bearer",
      partnerId: checked.principal.partnerId,
      vouchable: checked.principal.vouchable,
    } as const;
    // A partner's token names the partner whose catalog the decision will most likely read:
    // fetched alongside the policy instead of after it (only for a verified token).
    if (bearer.partnerId !== undefined) catalogs.prefetch?.(bearer.partnerId, capabilityId);
    const candidates = subjectCandidates(checked.principal.subject, bearer.partnerId);
    return withSubject(request, candidates, 0, capabilityId, bearer);
  };

  /**
   * The policy of the first candidate subject id that has one (the token's partner namespace,
   * then the global one), each looked up as it is cached and announced, under its own id.
   */
  const withSubject = (
    request: SidecarRequest,
    candidates: readonly string[],
    index: number,
    capabilityId: string,
    bearer: SubjectAuthentication,
  ): Step => {
    const subjectId = candidates[index] ?? "";
    const next = (lookup: PolicyLookup): Step =>
      lookup.policy.partnerId === undefined && index + 1 < candidates.length
        ? withSubject(request, candidates, index + 1, capabilityId, bearer)
        : withPolicy(request, subjectId, capabilityId, admitted(lookup, bearer));
    const cached = policies.peek?.(subjectId);
    return cached !== undefined
      ? next(cached)
      : traced("authority.load_policy", () => policies.get(subjectId)).then(next);
  };

  /**
   * A subject stands only for the principals its identity admits (src/core/subject-identity.ts):
   * for any other token with the same `sub` it is no subject at all (missing_policy).
   */
  const admitted = (lookup: PolicyLookup, bearer: SubjectAuthentication): PolicyLookup => {
    const { policy } = lookup;
    if (subjectStandsFor(policy.partnerId, policy.identity, bearer)) return lookup;
    return lookup.policy.partnerId === undefined ? lookup : { ...lookup, policy: notAdmitted(policy) };
  };

  const withPolicy = (
    request: SidecarRequest,
    subjectId: string,
    capabilityId: string,
    { policy, layer }: PolicyLookup,
  ): Step => {
    // No record: the partner (and so the capability's scope) is unknown; the spec's answer is missing_policy.
    if (policy.partnerId === undefined)
      return denyAbout(policy.load.ok ? "internal" : policy.load.reason, request.requestId, {
        subjectId,
        capabilityId,
      });
    const partnerId = policy.partnerId;
    const cached = catalogs.peek?.(partnerId, capabilityId);
    const rollout = { enabled: rolloutEnabled, partnerAllowlisted: rolloutPartners.has(partnerId) };
    const decideWith = (capability: Capability | undefined): Step => {
      const decision = traced(
        "authority.decide",
        () =>
          decideStage({
            subjectId,
            capabilityId,
            capability,
            policy: withShadow(policy.load, options.shadows?.peek(subjectId, partnerId)),
            logOnly: capability !== undefined && options.logOnly?.(capability) === true,
            method: request.method,
            path: request.path,
            now: now(),
            constraintsEnforced: rollout.enabled && rollout.partnerAllowlisted,
          }),
        decisionOutcome,
      );
      const notes = decisionNotes(decision);
      const context = { subjectId, partnerId, capabilityId, notes };
      if (decision.status === "denied")
        return denyAbout(decision.reason, request.requestId, context, decision.explanation);
      // A downstream MCP tool is called only through /mcp (decision 2661): as a plain HTTP
      // request its method and path name no operation of the capability.
      if (isMcpToolSnapshot(decision.operation))
        return denyAbout("unknown_operation", request.requestId, context);
      let input: ValidatedArgs;
      try {
        const args = operationArguments(
          decision.operation,
          decision.params,
          request.path,
          request.headers ?? {},
          request.body,
        );
        // operationArguments built every section for this request alone.
        input = enforceOperationInput(decision.operation, args, rollout, FRESH_ARGUMENTS);
      } catch (error) {
        return { ...denyForError(error, request.requestId), context };
      }
      const allow = (injected: InjectedCredentials): SidecarAllow => ({
        allow: true,
        requestId: request.requestId,
        subjectId,
        partnerId,
        capabilityId,
        permissionId: decision.permissionId,
        operation: decision.operation,
        redactions: decision.redactions,
        params: decision.params,
        capability: decision.capability,
        input,
        credentials: injected,
        policyHead: policy.head,
        policyLayer: layer,
        notes,
      });
      // Authorization only: nothing to fetch, nothing to inject.
      if (decision.authProfileRef === NO_AUTH_PROFILE_ID) return allow(NO_CREDENTIALS);
      const injected = credentials.peek?.(partnerId, decision.authProfileRef);
      return injected !== undefined
        ? allow(injected)
        : credentials.get(partnerId, decision.authProfileRef).then(allow);
    };
    return cached !== undefined
      ? decideWith(cached.value)
      : catalogs.get(partnerId, capabilityId).then(decideWith);
  };

  const decideNow = (request: SidecarRequest): Step => {
    let step: Step;
    try {
      step = evaluate(request);
    } catch (error) {
      return denyForError(error, request.requestId);
    }
    return step instanceof Promise
      ? step.catch((error: unknown) => denyForError(error, request.requestId))
      : step;
  };

  return {
    authorize(request) {
      const step = decideNow(request);
      return step instanceof Promise ? step : Promise.resolve(step);
    },
    decide: decideNow,
  };
}
