/**
 * The hosted MCP tools of one authenticated caller: what `tools/list` shows and what
 * `tools/call` does. Transport-free (the SDK server in protocol-server.ts calls it).
 *
 * List: management tools by role, plus one API tool per allowed operation of the caller's
 * verified, active policy (cached per subject and document hash).
 * Call: the policy is loaded and verified again to map the name, then the one enforcement
 * pipeline (src/pipeline/enforce.ts) runs with the snapshot's method and path template:
 * decision, input, constraints, render and re-match, auth profile, send, scrub, redact, and
 * the one record of what happened. A denied tool answers exactly like an unknown one, in
 * words true of both ("not available to this caller"): it neither says whether a tool of
 * that name exists for someone else nor claims that it does not.
 */
import {
  type CallToolResult,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  ProtocolError,
  type Tool,
} from "@modelcontextprotocol/server";
import type { AdminDeps } from "../admin/deps.ts";
import type { McpCallInput } from "../audit/mcp-records.ts";
import { hashCanonical } from "../core/canonical-json.ts";
import { policyStanding } from "../core/decision.ts";
import { isMcpToolSnapshot } from "../core/operation-snapshot.ts";
import { rolloutCovers } from "../core/parameter-constraints.ts";
import type { PolicyDocument } from "../core/policy-document.ts";
import { identityOf, type SubjectAuthentication, subjectAdmits } from "../core/subject-identity.ts";
import { AuthorityError, type DenyReason, toAuthorityError } from "../errors.ts";
import type { AuthProfile } from "../execute/auth-profiles.ts";
import { ExecutionError } from "../execute/errors.ts";
import type { Executor } from "../execute/executor.ts";
import type { EndUserToken } from "../execute/token-exchange.ts";
import { buildUpstreamUrl } from "../execute/url.ts";
import type { Principal } from "../identity/principal.ts";
import type { Logger } from "../observability/logger.ts";
import { createEnforcementPipeline, type EnforcementPipeline } from "../pipeline/enforce.ts";
import { failureExplanation, outageFailure, pipelineFailure } from "../pipeline/failure.ts";
import type { LoadedPolicy } from "../policy/loader.ts";
import { type DecisionRuntime, principalSubject } from "../policy/runtime.ts";
import type { ApiToolTarget } from "./api-tools.ts";
import {
  type ApiToolContent,
  apiToolResult,
  denyToolResult,
  downstreamToolResult,
  errorToolResult,
  jsonToolResult,
  withReceipt,
} from "./call-result.ts";
import type { DownstreamSender } from "./downstream-send.ts";
import { type ManagementToolSet, managementTools } from "./management-tools.ts";
import { createToolIndexCache, type ToolIndexCache } from "./tool-cache.ts";

export interface McpCaller {
  readonly principal: Principal;
  /** The HTTP request's id: sent upstream as X-Request-Id and written to every record. */
  readonly requestId: string;
  /** Aborted when the HTTP client goes away: a call in flight stops (the upstream request too). */
  readonly signal?: AbortSignal;
  /** The caller's verified bearer token: exchanged for token-exchange profiles, never forwarded. */
  readonly token?: EndUserToken;
}

export interface McpServiceOptions {
  /** The decision path every runtime transport shares: subjects, capabilities, policy loader, recorder. */
  readonly runtime: DecisionRuntime;
  /** The upstream client of the pipeline: its rollout gate and its send stage. */
  readonly executor: Pick<Executor, "send" | "rolloutFor">;
  /**
   * The send stage toward downstream MCP servers (their tools are snapshots with `mcp_tool`);
   * without it such a tool is refused by the executor (invalid_operation_snapshot).
   */
  readonly downstream?: DownstreamSender;
  /** The executor's form of a partner's auth profile (secrets stay references); throws when absent. */
  readonly authProfile: (partnerId: string, profileId: string) => Promise<AuthProfile>;
  readonly management: ManagementToolSet;
  /** What the management tools' domain services need (the authority context satisfies it). */
  readonly adminDeps: AdminDeps;
  readonly now: () => Date;
  readonly logger?: Logger;
  /** Built tool lists kept (default 1000). */
  readonly toolCacheSize?: number;
}

export interface McpService {
  listTools(caller: McpCaller): Promise<Tool[]>;
  callTool(caller: McpCaller, name: string, args: unknown, signal?: AbortSignal): Promise<CallToolResult>;
  /**
   * Whether a tools/call of `name` by this caller may relay a downstream's notifications: the
   * name maps to a downstream MCP tool of the caller's policy (or the policy could not be read).
   * The policy is read through the scope the caller's next callTool then uses: one read per call.
   */
  mayRelay(caller: McpCaller, name: string): Promise<boolean>;
  readonly toolCache: ToolIndexCache;
}

/** Longest tool name echoed back in the unavailable-tool error. */
const MAX_ECHOED_NAME = 128;

/** The one answer for a tool that does not exist and for one the caller may not use. */
export function unknownToolError(name: string): ProtocolError {
  const shown = name.length > MAX_ECHOED_NAME ? `${name.slice(0, MAX_ECHOED_NAME)}…` : name;
  return new ProtocolError(INVALID_PARAMS, `Tool not available to this caller: ${shown}`);
}

/** A policy that stands for the caller (src/core/decision.ts policyStanding): its document, else why not. */
function listable(
  loaded: LoadedPolicy,
  subjectId: string,
  at: Date,
):
  | { readonly ok: true; readonly document: PolicyDocument }
  | { readonly ok: false; readonly reason: DenyReason } {
  const reason = policyStanding(loaded.policy, subjectId, at);
  if (reason !== undefined || !loaded.policy.ok) return { ok: false, reason: reason ?? "missing_policy" };
  return { ok: true, document: loaded.policy.document };
}

function checkOptions(options: McpServiceOptions): void {
  if (typeof options !== "object" || options === null)
    throw new TypeError("MCP service options are required");
  const runtime = options.runtime;
  if (
    typeof runtime?.subjects?.get !== "function" ||
    typeof runtime.policies?.load !== "function" ||
    typeof runtime.capabilities?.resolve !== "function" ||
    typeof runtime.recorder?.record !== "function" ||
    typeof runtime.recorder.recordMcpCall !== "function"
  ) {
    throw new TypeError("runtime must provide subjects, policies, capabilities and recorder");
  }
  if (typeof options.executor?.send !== "function" || typeof options.executor.rolloutFor !== "function")
    throw new TypeError("executor.send and executor.rolloutFor are required");
  if (typeof options.authProfile !== "function") throw new TypeError("authProfile must be a function");
  if (typeof options.management?.find !== "function") throw new TypeError("management tools are required");
  if (typeof options.now !== "function") throw new TypeError("now must be a function");
}

/** The MCP caller as a bearer principal: its `partner_id` claim decides which subject it may be. */
function bearerOf(caller: McpCaller): SubjectAuthentication {
  return { via: "bearer", partnerId: caller.principal.partnerId, vouchable: caller.principal.vouchable };
}

function plainRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/** The upstream URL as the executor built it (before credential injection), for its audit hash. */
function auditUrl(target: { readonly upstream_url_template: string }, args: unknown): string | null {
  const parts = plainRecord(args);
  if (parts === undefined) return null;
  try {
    const path = plainRecord(parts.path);
    const query = plainRecord(parts.query);
    return buildUpstreamUrl(target, {
      ...(path === undefined ? {} : { path }),
      ...(query === undefined ? {} : { query }),
    }).toString();
  } catch {
    return null;
  }
}

/**
 * The runtime for one tool call: the subject record and the verified policy are read once
 * and the same copies serve both the name lookup and the decision (one store read of a
 * possibly large policy record instead of two, and no window between them).
 */
function requestScoped(runtime: DecisionRuntime): DecisionRuntime {
  const subjects = new Map<string, ReturnType<DecisionRuntime["subjects"]["get"]>>();
  // A per-request memo dropped with the request, not a cache: no bound or TTL to give lru-cache.
  const policies = new Map<string, Promise<LoadedPolicy>>();
  return {
    ...runtime,
    subjects: {
      get(subjectId) {
        let pending = subjects.get(subjectId);
        if (pending === undefined) {
          pending = runtime.subjects.get(subjectId);
          subjects.set(subjectId, pending);
        }
        return pending;
      },
    },
    policies: {
      load(subjectId, expect) {
        const key = `${subjectId}\u0000${expect?.partnerId ?? ""}`;
        let pending = policies.get(key);
        if (pending === undefined) {
          pending = runtime.policies.load(subjectId, expect);
          policies.set(key, pending);
        }
        return pending;
      },
      stats: () => runtime.policies.stats(),
      clear: () => runtime.policies.clear(),
    },
  };
}

export function createMcpService(options: McpServiceOptions): McpService {
  checkOptions(options);
  const { runtime, executor, management, adminDeps, now, logger } = options;
  /** The pipeline over this call's scoped runtime (the policy read once serves lookup and decision). */
  const { downstream } = options;
  // One pipeline, two senders: HTTP operations go to the executor, downstream MCP tools to tools/call.
  const upstream: Pick<Executor, "send" | "rolloutFor"> =
    downstream === undefined
      ? executor
      : {
          rolloutFor: (snapshot, partnerId) => executor.rolloutFor(snapshot, partnerId),
          send: (request) =>
            isMcpToolSnapshot(request.snapshot) ? downstream.send(request) : executor.send(request),
        };
  const pipeline = (scope: DecisionRuntime): EnforcementPipeline =>
    createEnforcementPipeline({ decisions: scope, upstream });
  /**
   * The scope mayRelay opened for a caller (one HTTP request), taken by that caller's callTool:
   * a memo of one call, never reused by another.
   */
  const scopes = new WeakMap<McpCaller, DecisionRuntime>();
  const toolCache = createToolIndexCache({
    max: options.toolCacheSize ?? 1000,
    reserved: managementTools.map((entry) => entry.tool.name),
    onCollision: (info) =>
      logger?.warn(
        { subjectId: info.subjectId, count: info.permissionIds.length },
        "mcp tool names collided",
      ),
  });

  function documentHash(loaded: LoadedPolicy): string | undefined {
    if (!loaded.policy.ok) return undefined;
    // The loader checked that the opened document hashes to the record's document_hash.
    return loaded.record?.document_hash ?? hashCanonical(loaded.policy.document);
  }

  function targetFor(loaded: LoadedPolicy, subjectId: string, name: string): ApiToolTarget | undefined {
    const hash = documentHash(loaded);
    if (!loaded.policy.ok || hash === undefined) return undefined;
    return toolCache.indexFor(subjectId, hash, loaded.policy.document).byName.get(name);
  }

  /**
   * The caller's policy, or undefined when the caller has no subject: none with its `sub`,
   * or one that does not stand for this principal (another partner's, or named after it).
   */
  async function loadPolicy(
    scope: DecisionRuntime,
    caller: McpCaller,
  ): Promise<{ loaded?: LoadedPolicy; subjectId?: string; partnerId: string | null }> {
    const subject = await principalSubject(scope.subjects, caller.principal.subject, bearerOf(caller));
    const partnerId = typeof subject?.partner_id === "string" ? subject.partner_id : null;
    if (subject === undefined || partnerId === null) return { partnerId: null };
    if (!subjectAdmits({ partner_id: partnerId, identity: identityOf(subject) }, bearerOf(caller))) {
      return { partnerId: null };
    }
    // The stored id (the partner's namespace, or the global one): what its policy is filed under.
    const subjectId = subject.subject_id;
    return { loaded: await scope.policies.load(subjectId, { partnerId }), subjectId, partnerId };
  }

  /**
   * Hands the call's MCP row to the audit writer, which keeps it (queued through a store
   * outage) and stores it in order. The answer does not wait for the store: the decision
   * record — the one that must exist before anything acts — was already kept (stored, or
   * written ahead: decision 2931).
   */
  function audit(input: Omit<McpCallInput, "time">): void {
    // The call has happened (or was refused); losing its MCP row must not change the answer.
    const lost = (error: unknown): void => {
      logger?.error({ err: error, requestId: input.requestId }, "mcp audit row could not be written");
    };
    try {
      // Queued now (so a flush sees it), stored without holding up the answer.
      runtime.recorder.recordMcpCall({ ...input, time: now() }).catch(lost);
    } catch (error) {
      lost(error);
    }
  }

  /** A name that maps to no allowed operation is a deny like any other, and recorded as one. */
  async function recordUnmapped(
    caller: McpCaller,
    partnerId: string | null,
    reason: DenyReason,
  ): Promise<void> {
    const subjectId = caller.principal.subject;
    try {
      await runtime.recorder.record({
        actor: subjectId,
        subject_id: subjectId,
        partner_id: partnerId,
        capability_id: null,
        method: null,
        path: null,
        permission_id: null,
        decision: "denied",
        reason,
        transport: "mcp",
        requestId: caller.requestId,
        time: now(),
      });
    } catch (error) {
      logger?.error({ err: error, requestId: caller.requestId }, "mcp deny could not be recorded");
    }
  }

  async function listTools(caller: McpCaller): Promise<Tool[]> {
    const tools = management.toolsFor(caller.principal).map((entry) => entry.tool);
    let loaded: LoadedPolicy | undefined;
    let subjectId: string | undefined;
    let partnerId: string | null;
    try {
      ({ loaded, subjectId, partnerId } = await loadPolicy(runtime, caller));
    } catch (error) {
      throw new ProtocolError(INTERNAL_ERROR, pipelineFailure(error).message);
    }
    if (loaded === undefined || subjectId === undefined || partnerId === null) return tools;
    const gate = listable(loaded, subjectId, now());
    const hash = documentHash(loaded);
    if (!gate.ok || hash === undefined) return tools;
    const index = toolCache.indexFor(subjectId, hash, gate.document);
    // Outside the parameter-scoping rollout a constrained operation is refused by the decision:
    // not listed either.
    const apiTools = rolloutCovers(runtime.constraintsRollout, partnerId)
      ? index.tools
      : index.unconstrainedTools;
    return [...tools, ...apiTools];
  }

  async function callManagementTool(
    caller: McpCaller,
    name: string,
    args: unknown,
    run: () => Promise<Record<string, unknown>>,
  ): Promise<CallToolResult> {
    const started = performance.now();
    const base = {
      actor: caller.principal.subject,
      subject_id: null,
      partner_id: caller.principal.partnerId ?? null,
      capability_id: null,
      tool: name,
      permission_id: null,
      method: null,
      url: null,
      status: null,
      request: args,
      requestId: caller.requestId,
    };
    try {
      const value = await run();
      audit({ ...base, duration_ms: performance.now() - started, response: value });
      return jsonToolResult(value);
    } catch (error) {
      const failure = toAuthorityError(error);
      if (failure.status >= 500) logger?.error({ err: error, tool: name }, "mcp management tool failed");
      audit({ ...base, duration_ms: performance.now() - started, error_code: failure.code });
      return errorToolResult(failure, caller.requestId);
    }
  }

  async function callApiTool(
    caller: McpCaller,
    name: string,
    args: unknown,
    signal: AbortSignal | undefined,
  ): Promise<CallToolResult> {
    const started = performance.now();
    const subjectId = caller.principal.subject;
    const row = {
      actor: subjectId,
      subject_id: subjectId,
      tool: name,
      request: args,
      requestId: caller.requestId,
    };
    const refuse = (partnerId: string | null, target: ApiToolTarget | undefined, errorCode: string): void => {
      audit({
        ...row,
        partner_id: partnerId,
        capability_id: target?.capabilityId ?? null,
        permission_id: target?.permissionId ?? null,
        method: target?.method ?? null,
        url: null,
        status: null,
        duration_ms: performance.now() - started,
        error_code: errorCode,
      });
    };

    // 1. The policy again (a cached tool list never grants anything), to map the name.
    // Loaded once for this call (mayRelay may have begun it): the decision reads the same copy.
    const scope = scopes.get(caller) ?? requestScoped(runtime);
    scopes.delete(caller);
    let partnerId: string | null = null;
    let target: ApiToolTarget | undefined;
    let mappingDenial: DenyReason = "unknown_operation";
    try {
      const found = await loadPolicy(scope, caller);
      partnerId = found.partnerId;
      if (found.loaded === undefined || found.subjectId === undefined) mappingDenial = "missing_policy";
      else {
        // Policy-wide reasons come first, in decide()'s order, before "no such operation".
        const gate = listable(found.loaded, found.subjectId, now());
        if (!gate.ok) mappingDenial = gate.reason;
        target = targetFor(found.loaded, found.subjectId, name);
      }
    } catch (error) {
      const failure = pipelineFailure(error);
      refuse(partnerId, undefined, failure.code);
      return errorToolResult(failure, caller.requestId);
    }
    if (target === undefined) {
      await recordUnmapped(caller, partnerId, mappingDenial);
      refuse(partnerId, undefined, mappingDenial);
      throw unknownToolError(name);
    }

    // 2–5. The one enforcement pipeline (src/pipeline/enforce.ts) with the snapshot's method
    // and path template: decide and record, input, constraints, render and re-match, auth
    // profile, send, scrub, redact; its record says what really happened.
    const outcome = await pipeline(scope).run(
      {
        transport: "mcp",
        requestId: caller.requestId,
        now: now(),
        actor: subjectId,
        subjectId,
        capabilityId: target.capabilityId,
        method: target.method,
        path: target.pathTemplate,
        pathIsTemplate: true,
        authenticatedAs: bearerOf(caller),
      },
      {
        // A downstream tool takes its own arguments: they are the body of its snapshot.
        args: () => (target.kind === "downstream_mcp" ? { body: args ?? {} } : args),
        authProfile: (owner, profileRef) =>
          options.authProfile(owner, profileRef).catch((error: unknown) => {
            logger?.warn({ err: error, requestId: caller.requestId }, "mcp auth profile could not be loaded");
            throw new ExecutionError("auth_profile_unavailable");
          }),
        headers: () => ({ "x-request-id": caller.requestId }),
        // The authenticated user's grant or token (docs/execution.md, "Whose grant").
        endUser: { subjectId, ...(caller.token === undefined ? {} : { token: caller.token }) },
        ...(signal === undefined ? {} : { signal }),
      },
    );
    const { authorization } = outcome;
    const receipted = (result: CallToolResult) => withReceipt(result, authorization.receipt);
    if (outcome.kind === "denied") {
      if (authorization.unavailable) {
        const failure = new AuthorityError(
          authorization.outcome.status === "denied" ? authorization.outcome.reason : "internal",
        );
        refuse(authorization.partnerId, target, failure.code);
        return receipted(errorToolResult(failure, caller.requestId));
      }
      const denial = authorization.outcome.status === "denied" ? authorization.outcome : undefined;
      const reason = denial?.reason ?? "missing_policy";
      refuse(authorization.partnerId, target, reason);
      // The tool is in the caller's own policy: say why it was refused, and what to do.
      return receipted(denyToolResult(new AuthorityError(reason), caller.requestId, denial?.explanation));
    }
    const { decision } = outcome;
    const snapshot = decision.operation;
    const executed = {
      ...row,
      partner_id: authorization.partnerId,
      capability_id: target.capabilityId,
      permission_id: decision.permissionId,
      method: snapshot.method,
    };
    if (outcome.kind === "completed") {
      const { result } = outcome;
      const content: ApiToolContent = {
        status: result.status,
        headers: result.headers,
        body: result.body,
        redaction_events: result.redactionEvents,
      };
      audit({
        ...executed,
        url: auditUrl(snapshot, args),
        status: result.status,
        duration_ms: performance.now() - started,
        error_code: result.upstreamError === undefined ? null : "upstream_http_error",
        response: content,
      });
      if (!outcome.recorded) return errorToolResult(outageFailure(), caller.requestId);
      if (target.kind === "downstream_mcp")
        return receipted(downstreamToolResult(result.body, result.redactionEvents));
      return receipted(apiToolResult(content, result.upstreamError !== undefined));
    }
    const { error: failure, cause } = outcome;
    if (!outcome.recorded) {
      logger?.error({ requestId: caller.requestId }, "mcp refusal could not be recorded");
    }
    if (failure.status >= 500 && !(cause instanceof ExecutionError)) {
      logger?.error({ err: cause, requestId: caller.requestId }, "mcp tool call failed");
    }
    audit({
      ...executed,
      url:
        cause instanceof ExecutionError && cause.requestHash !== undefined ? auditUrl(snapshot, args) : null,
      status: null,
      duration_ms: performance.now() - started,
      error_code:
        signal?.aborted === true
          ? "cancelled"
          : cause instanceof ExecutionError
            ? cause.reason
            : failure.code,
    });
    // The client went away: there is no one to answer.
    if (signal?.aborted === true) throw cause;
    const answer =
      failure.status >= 500
        ? errorToolResult(failure, caller.requestId)
        : denyToolResult(failure, caller.requestId, failureExplanation(failure));
    return outcome.recorded ? receipted(answer) : answer;
  }

  return {
    toolCache,
    listTools,
    async mayRelay(caller, name) {
      if (management.find(caller.principal, name) !== undefined) return false;
      const scope = requestScoped(runtime);
      scopes.set(caller, scope);
      try {
        const found = await loadPolicy(scope, caller);
        if (found.loaded === undefined || found.subjectId === undefined) return false;
        return targetFor(found.loaded, found.subjectId, name)?.kind !== "api";
      } catch {
        // The call will say what failed; until then, nothing is ruled out.
        return true;
      }
    },
    async callTool(caller, name, args, signal) {
      const tool = management.find(caller.principal, name);
      if (tool !== undefined) {
        return callManagementTool(caller, name, args, () =>
          tool.run(adminDeps, { principal: caller.principal, requestId: caller.requestId }, args),
        );
      }
      return callApiTool(caller, name, args, signal);
    },
  };
}
