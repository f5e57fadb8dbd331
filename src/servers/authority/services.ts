/**
 * Every service the authority's route groups use, built once per process from its context
 * (store, verifier, protector, key rings, egress — see build.ts) and handed to the route
 * groups as one typed object. Nothing is built on first use and no module keeps a service
 * of its own: a second authority in the same process (tests, `authority dev` replicas) gets
 * its own set, and one process has exactly one of each — one decision runtime, one
 * client-credentials token cache shared by the binding executor, the MCP executor and the
 * sidecar credentials route.
 */
import { LRUCache } from "lru-cache";
import { createAuthProfileSecretResolver, loadExecutionAuthProfile } from "../../admin/auth-profiles.ts";
import type { DownstreamToolLister } from "../../admin/mcp-servers.ts";
import { auditUserGrantEvent, type UserGrantServices } from "../../admin/user-grants.ts";
import { createSealedTokenSetStore } from "../../admin/user-token-sets.ts";
import type { AdminChain } from "../../audit/admin-chain.ts";
import type { AuditSeal } from "../../audit/checkpoints.ts";
import {
  type BindingRuntime,
  type BindingRuntimeOptions,
  createBindingRuntime,
} from "../../bindings/runtime.ts";
import { createOperationIndex, type OperationIndex } from "../../bindings/verify.ts";
import { constraintsRolloutGate } from "../../core/parameter-constraints.ts";
import { createAuthInjector } from "../../execute/auth-injector.ts";
import {
  type ClientCredentialsTokens,
  createClientCredentialsTokens,
} from "../../execute/client-credentials.ts";
import { createExecutor, type Executor } from "../../execute/executor.ts";
import { createOAuthUserClient } from "../../execute/oauth-user.ts";
import { createTokenExchangeTokens } from "../../execute/token-exchange.ts";
import { mcpConfigOf, type ResolvedMcpConfig, resolveMcpConfig } from "../../mcp/config.ts";
import { createDownstreamCaller } from "../../mcp/downstream-client.ts";
import { createDownstreamLister } from "../../mcp/downstream-lister.ts";
import { createDownstreamSender } from "../../mcp/downstream-send.ts";
import { createManagementToolSet } from "../../mcp/management-tools.ts";
import { createCachedSecretResolver } from "../../mcp/secret-cache.ts";
import { createMcpService, type McpService } from "../../mcp/service.ts";
import {
  createDecisionRuntime,
  type DecisionRuntime,
  type DecisionRuntimeSettings,
} from "../../policy/runtime.ts";
import type { AuthorityContext } from "./context.ts";

/**
 * Signed policy blobs by subject, crypto version and artifact hash, as the sidecar policy
 * route hands them out: one crypto call per policy version, not per sidecar fetch.
 */
export type SignedPolicyCache = LRUCache<string, { readonly blob: string | null }>;

/** The context plus the services built from it: what every route group receives. */
export interface AuthorityServices extends AuthorityContext {
  /** Subject source, capability resolver, policy loader and audit recorder of the process. */
  readonly decisions: DecisionRuntime;
  /** Workload tokens, assertions, idempotency, envelopes and the binding executor. */
  readonly bindings: BindingRuntime;
  /** Hosted MCP: its resolved settings and the service behind /mcp. */
  readonly mcp: {
    readonly config: ResolvedMcpConfig;
    readonly service: McpService;
    /** Lists a downstream MCP server's tools for an admin's preview and import. */
    readonly downstreamTools: DownstreamToolLister;
  };
  /** The process's one client-credentials token cache (per grant: one token). */
  readonly clientCredentials: ClientCredentialsTokens;
  /** Users' grants (one refresh in flight per grant) and exchanged tokens, shared by every executor. */
  readonly userGrants: UserGrantServices;
  /** Signed policy blobs handed to sidecars, one crypto call per policy version. */
  readonly signedPolicies: SignedPolicyCache;
  /** The partners' operation index the verify route checks envelopes against. */
  readonly verifyOperations: OperationIndex;
  /** Seals this replica's decision chains now (POST /admin/audit/checkpoints); absent: not offered. */
  readonly auditSeal?: AuditSeal;
}

/** How the services are tuned (from the validated configuration) and what a caller supplies ready-made. */
export interface AuthorityServiceOptions {
  /** Record caching, policy cache and audit recorder of the decision runtime. */
  readonly decisions: Omit<DecisionRuntimeSettings, "constraintsRollout">;
  /** Upstream deadline, workload-token lifetime, idempotency, key rings of the binding runtime. */
  readonly bindings?: BindingRuntimeOptions;
  /** A ready MCP executor (tests, benchmarks); default one from the MCP settings. */
  readonly mcpExecutor?: Executor;
  /** The process's checkpoints, for a seal on demand. */
  readonly auditSeal?: AuditSeal;
  /** This replica's chain of policy and binding changes (the admin services read it from the context). */
  readonly adminChain?: AdminChain;
}

/** Deadline of listing a downstream MCP server's tools at preview and import. */
const DOWNSTREAM_LISTING_TIMEOUT_MS = 10_000;

export function composeAuthorityServices(
  context: AuthorityContext,
  options: AuthorityServiceOptions,
): AuthorityServices {
  const { egress } = context;
  // One parameter-scoping gate: the decision stage of every path and both executors read it.
  const decisions = createDecisionRuntime(context, {
    ...options.decisions,
    constraintsRollout: constraintsRolloutGate(context.config.parameterScoping),
  });
  // Token endpoints are a partner's upstreams too: their connections pass the egress policy.
  const clientCredentials = createClientCredentialsTokens({
    fetch: egress.partnerFetch,
    secretResolver: createAuthProfileSecretResolver(context),
  });
  // Users' token sets, sealed at rest; one client refreshes each grant once at a time for the
  // whole process, and one cache keeps exchanged tokens per user.
  const secretResolver = createAuthProfileSecretResolver(context);
  const tokenSetStore = createSealedTokenSetStore(context);
  const userGrants = {
    tokenSetStore,
    oauthUser: createOAuthUserClient({
      fetch: egress.partnerFetch,
      secretResolver,
      tokenSetStore,
      onEvent: (event) => auditUserGrantEvent(context, event),
    }),
    tokenExchange: createTokenExchangeTokens({ fetch: egress.partnerFetch, secretResolver }),
  };
  // One cache of opened auth-profile secrets for the binding and MCP executors (src/mcp/secret-cache.ts).
  const executorSecrets = createCachedSecretResolver(context);
  const bindingExecutor = createExecutor({
    secretResolver: executorSecrets,
    clientCredentials,
    oauthUser: userGrants.oauthUser,
    tokenExchange: userGrants.tokenExchange,
    constraintsRollout: decisions.constraintsRollout,
    ...(options.bindings?.upstreamTimeoutMs === undefined
      ? {}
      : { timeoutMs: options.bindings.upstreamTimeoutMs }),
    egress,
  });
  const bindings = createBindingRuntime(context, { decisions, executor: bindingExecutor }, options.bindings);
  const mcpConfig = resolveMcpConfig(mcpConfigOf(context.config), context.config.publicUrl);
  const mcpExecutor =
    options.mcpExecutor ??
    createExecutor({
      secretResolver: executorSecrets,
      oauthUser: userGrants.oauthUser,
      tokenExchange: userGrants.tokenExchange,
      constraintsRollout: decisions.constraintsRollout,
      timeoutMs: mcpConfig.upstreamTimeoutMs,
      maxResponseBytes: mcpConfig.maxResponseBytes,
      egress,
      clientCredentials,
    });
  // Downstream MCP servers: the same egress gate, secrets and token caches as the executor's.
  const injector = createAuthInjector({
    secretResolver: executorSecrets,
    clientCredentials: mcpExecutor.clientCredentials,
    oauthUser: mcpExecutor.oauthUser,
    tokenExchange: userGrants.tokenExchange,
  });
  const downstreamLimits = {
    timeoutMs: mcpConfig.upstreamTimeoutMs,
    maxResponseBytes: mcpConfig.maxResponseBytes,
  };
  const downstream = createDownstreamSender({
    egress,
    injector,
    caller: createDownstreamCaller(),
    ...downstreamLimits,
  });
  const downstreamTools = createDownstreamLister({
    egress,
    injector,
    authProfile: (partnerId, profileId) => loadExecutionAuthProfile(context, partnerId, profileId),
    // An admin's import lists every page of a server: its own deadline, not one call's.
    timeoutMs: DOWNSTREAM_LISTING_TIMEOUT_MS,
    maxResponseBytes: mcpConfig.maxResponseBytes,
  });
  const mcpService = createMcpService({
    runtime: decisions,
    executor: mcpExecutor,
    downstream,
    authProfile: (partnerId, profileId) => loadExecutionAuthProfile(context, partnerId, profileId),
    management: createManagementToolSet(),
    adminDeps: context,
    now: context.now,
    logger: context.logger,
    toolCacheSize: mcpConfig.toolCacheSize,
  });
  return {
    ...context,
    decisions,
    bindings,
    mcp: { config: mcpConfig, service: mcpService, downstreamTools },
    clientCredentials,
    userGrants,
    verifyOperations: createOperationIndex(bindings, context),
    signedPolicies: new LRUCache<string, { readonly blob: string | null }>({ max: 10_000, ttl: 300_000 }),
    ...(options.auditSeal === undefined ? {} : { auditSeal: options.auditSeal }),
    ...(options.adminChain === undefined ? {} : { adminChain: options.adminChain }),
  };
}
