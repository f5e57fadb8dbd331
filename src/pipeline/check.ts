import type { Capability } from "../core/capability.ts";
import type { Decision, PolicyLoad, ShadowLoad } from "../core/decision.ts";
import { isMcpToolSnapshot, type OperationSnapshot } from "../core/operation-snapshot.ts";
import { isValidCapabilityId } from "../core/permission-id.ts";
import { policyEntryFor } from "../core/policy-document.ts";
import type { RedactionRule } from "../core/redaction.ts";
import { subjectCandidates } from "../core/subject-identity.ts";
import { type DenyExplanation, type ErrorCode, errorCodes } from "../errors.ts";
import { NO_AUTH_PROFILE_ID } from "../execute/auth-profiles.ts";
import { enforceOperationInput, type ValidatedArgs } from "../execute/input.ts";
import { extractBearer } from "../identity/bearer.ts";
import { traced } from "../observability/tracing.ts";
import type { CacheLayer, PolicyLookup, VerifiedPolicyCache } from "../policy/cache/index.ts";
import {
  type DecisionNotes,
  type DecisionSources,
  decisionNotes,
  decisionStages,
  type StageRequest,
  type Step,
  withShadow,
} from "./decision.ts";
import { failureExplanation, pipelineFailure } from "./failure.ts";
import { type HeaderBag, operationArguments, type RequestBody } from "./request-arguments.ts";

/**
 * The enforcement pipeline on the sidecar's cached inputs, shared by ext_authz and the forward
 * proxy (docs/decisions/1301-one-enforcement-pipeline.md, 2701): authenticate (cached bearer
 * verification) → the capability context (explicit, else the capability map) → the decision
 * stages every path runs in one order (decision.ts: the subject's record admitted for the
 * principal → capability → verified policy → decide()), here on the verified-policy cache
 * (local → Redis → authority, signed policies verified with public keys) and the catalog
 * cache → the request's path parameters, query, declared headers and body against the
 * snapshot's input schema and signed parameter constraints with the rollout gate
 * (`enforceOperationInput`, the same stage as the executor's) → the auth profile's credentials.
 * Recording is the next step, the caller's (the sidecar's decision log); a forward-proxy allow
 * is recorded through its `settle` once the outcome is known. Total: every failure is a deny
 * with the error table's status and reason through the pipeline's one failure mapping;
 * nothing but the decision stage's allow is an allow. Each stage continues synchronously when
 * its input is cached: the common Check allocates no promise.
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

/** A bearer token's verified principal. */
export interface VerifiedPrincipal {
  readonly subject: string;
  readonly partnerId: string | undefined;
  /** May stand for platform_vouched subjects (its issuer's setting). */
  readonly vouchable: boolean;
}

export type TokenCheck =
  | { readonly ok: true; readonly principal: VerifiedPrincipal; readonly cached: boolean }
  | { readonly ok: false; readonly unavailable: boolean };

export interface TokenSource {
  /** A cached answer comes back as it is (no promise): the decision path stays synchronous. */
  check(token: string): TokenCheck | Promise<TokenCheck>;
}

export interface CapabilityRoutes {
  /** The capability id mapped to a host and path, or undefined when no key matches. */
  resolve(host: string, path: string): string | undefined;
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
  /** The shadow policy's outcome and a log-only allow, for the record (decision 2761). */
  readonly notes?: DecisionNotes;
  /**
   * Records what became of an allow whose record waits for its outcome (the forward proxy):
   * null when the upstream's answer was passed on, else the code the transport refused with.
   * Set by the record step (the sidecar's decision log); once per decision.
   */
  readonly settle?: (refusal: ErrorCode | null) => void;
  /** The receipt that finds this decision's record (set by the record step; decision 2771). */
  readonly receipt?: string;
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
  /** The receipt that finds this decision's record (set by the record step; decision 2771). */
  readonly receipt?: string;
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
  /** Starts loading the credentials unless cached, without waiting (a later `get` joins the load). */
  prefetch?(partnerId: string, profileId: string): void;
}

export interface SidecarEngineOptions {
  readonly tokens: TokenSource;
  readonly policies: VerifiedPolicyCache;
  readonly catalogs: CatalogSource;
  readonly credentials: CredentialSource;
  readonly capabilityMap: CapabilityRoutes;
  /**
   * The parameter-scoping rollout, as the authority service's (AUTHORITY_PARAMETER_SCOPING,
   * AUTHORITY_PARAMETER_SCOPING_PARTNERS). Default off: an operation with constraints is denied.
   */
  readonly constraintsRollout?: { readonly enabled: boolean; readonly partnerAllowlist: Iterable<string> };
  readonly now?: () => Date;
  /** Told of token checks (metrics): `cached`, `verified`, `rejected`, `unavailable`. */
  readonly onTokenCheck?: (result: "cached" | "verified" | "rejected" | "unavailable") => void;
  /** The subjects' shadow policies (decision 2761); absent: none are evaluated. */
  readonly shadows?: { peek(subjectId: string, partnerId: string): ShadowLoad | undefined };
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

/** The stage request of one Check: what the stages read, and the transport's request. */
interface CheckStageRequest extends StageRequest {
  readonly subjectId: string;
  readonly capabilityId: string;
  readonly sidecar: SidecarRequest;
}

/** Four frozen answers of the rollout gate: none is built per Check. */
const ROLLOUTS = Object.freeze({
  off: Object.freeze({ enabled: false, partnerAllowlisted: false }),
  offListed: Object.freeze({ enabled: false, partnerAllowlisted: true }),
  on: Object.freeze({ enabled: true, partnerAllowlisted: false }),
  onListed: Object.freeze({ enabled: true, partnerAllowlisted: true }),
});

export function createSidecarEngine(options: SidecarEngineOptions): SidecarEngine {
  if (typeof options !== "object" || options === null) throw new TypeError("engine options are required");
  const { tokens, policies, catalogs, credentials, capabilityMap } = options;
  if (typeof tokens?.check !== "function") throw new TypeError("tokens are required");
  if (typeof policies?.get !== "function") throw new TypeError("policies are required");
  if (typeof catalogs?.get !== "function") throw new TypeError("catalogs are required");
  if (typeof credentials?.get !== "function") throw new TypeError("credentials are required");
  if (typeof capabilityMap?.resolve !== "function") throw new TypeError("capabilityMap is required");
  const now = options.now ?? (() => new Date());
  const onTokenCheck = options.onTokenCheck ?? (() => undefined);
  const { shadows, logOnly } = options;
  const rolloutEnabled = options.constraintsRollout?.enabled === true;
  const rolloutPartners = new Set(options.constraintsRollout?.partnerAllowlist ?? []);
  const rolloutOf = (partnerId: string) =>
    rolloutPartners.has(partnerId)
      ? rolloutEnabled
        ? ROLLOUTS.onListed
        : ROLLOUTS.offListed
      : rolloutEnabled
        ? ROLLOUTS.on
        : ROLLOUTS.off;

  type Check = Step<SidecarDecision>;

  /**
   * The policy of the first candidate subject id that has one (the token's partner namespace,
   * then the global one), each looked up as it is cached and announced, under its own id.
   */
  const lookupSubject = (candidates: readonly string[], index: number): Step<PolicyLookup> => {
    const cached = policies.peek?.(candidates[index] ?? "");
    return cached !== undefined
      ? nextCandidate(candidates, index, cached)
      : traced("authority.load_policy", () => policies.get(candidates[index] ?? "")).then((lookup) =>
          nextCandidate(candidates, index, lookup),
        );
  };
  const nextCandidate = (
    candidates: readonly string[],
    index: number,
    lookup: PolicyLookup,
  ): Step<PolicyLookup> =>
    lookup.policy.partnerId === undefined && index + 1 < candidates.length
      ? lookupSubject(candidates, index + 1)
      : lookup;

  /**
   * While the catalog is fetched, the credentials the subject's verified policy names for the
   * capability are fetched too, instead of after the decision (a first Check waits for one round
   * trip less). They are only cached: the decision alone decides whether they are injected.
   */
  const prefetchCredentials = (load: PolicyLoad, partnerId: string, capabilityId: string): void => {
    if (credentials.prefetch === undefined || !load.ok || load.document.revoked_at !== null) return;
    const profileRef = policyEntryFor(load.document, capabilityId)?.auth_profile_ref;
    if (profileRef !== undefined && profileRef !== NO_AUTH_PROFILE_ID)
      credentials.prefetch(partnerId, profileRef);
  };

  /** The caches as the decision stages' sources: the subject's record comes with its verified policy. */
  const sources: DecisionSources<PolicyLookup> = {
    subject: (subjectId, auth) =>
      lookupSubject(subjectCandidates(subjectId, auth.via === "bearer" ? auth.partnerId : undefined), 0),
    recordOf: (lookup) => lookup.policy,
    // No record: the partner (and so the capability's scope) is unknown; the spec's answer is
    // missing_policy (or why the policy could not be verified).
    unrecorded: (lookup) => (lookup.policy.load.ok ? "missing_policy" : lookup.policy.load.reason),
    capability: (partnerId, capabilityId, lookup) => {
      const cached = catalogs.peek?.(partnerId, capabilityId);
      if (cached !== undefined) return cached.value;
      prefetchCredentials(lookup.policy.load, partnerId, capabilityId);
      return catalogs.get(partnerId, capabilityId);
    },
    policy: (lookup, partnerId) =>
      shadows === undefined
        ? lookup.policy.load
        : withShadow(lookup.policy.load, shadows.peek(lookup.policy.subjectId, partnerId)),
    logOnly: (_partnerId, capability) => logOnly?.(capability) === true,
    constraintsEnforced: (partnerId) => rolloutEnabled && rolloutPartners.has(partnerId),
  };

  const evaluate = (request: SidecarRequest): Check => {
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

  const withToken = (request: SidecarRequest, checked: TokenCheck): Check => {
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
    const { principal } = checked;
    // A partner's token names the partner whose catalog the decision will most likely read:
    // fetched alongside the policy instead of after it (only for a verified token).
    if (principal.partnerId !== undefined) catalogs.prefetch?.(principal.partnerId, capabilityId);
    const stage: CheckStageRequest = {
      subjectId: principal.subject,
      authenticatedAs: { via: "bearer", partnerId: principal.partnerId, vouchable: principal.vouchable },
      capabilityId,
      method: request.method,
      path: request.path,
      now: now(),
      sidecar: request,
    };
    return decisionStages(sources, stage, decided);
  };

  /** After the decision stages: the input stage, then the credentials (the record is the caller's step). */
  const decided = (
    decision: Decision,
    lookup: PolicyLookup | undefined,
    partnerId: string | undefined,
    _capability: Capability | undefined,
    stage: CheckStageRequest,
  ): Check => {
    const request = stage.sidecar;
    const { capabilityId } = stage;
    const subjectId = lookup?.policy.subjectId ?? stage.subjectId;
    if (partnerId === undefined || lookup === undefined) {
      const reason = decision.status === "denied" ? decision.reason : "internal";
      return denyAbout(reason, request.requestId, { subjectId, capabilityId });
    }
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
      input = enforceOperationInput(decision.operation, args, rolloutOf(partnerId), FRESH_ARGUMENTS);
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
      policyHead: lookup.policy.head,
      policyLayer: lookup.layer,
      notes,
    });
    // Authorization only: nothing to fetch, nothing to inject.
    if (decision.authProfileRef === NO_AUTH_PROFILE_ID) return allow(NO_CREDENTIALS);
    const injected = credentials.peek?.(partnerId, decision.authProfileRef);
    return injected !== undefined
      ? allow(injected)
      : credentials.get(partnerId, decision.authProfileRef).then(allow);
  };

  const decideNow = (request: SidecarRequest): Check => {
    let step: Check;
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
