/**
 * The whole system on loopback, for the reliability and security suite: the development
 * IdP twice (the authority's token issuer, and a partner's issuer of user assertions),
 * the authority service with every route group, a controllable upstream API, and on
 * request the upstream crypto service (policy protection through
 * `createUpstreamPolicyProtector` + `createCryptoClient`), the managed crypto API (HTTPS)
 * and a sidecar (ext_authz gRPC + forward proxy, optionally over Redis).
 *
 *   const system = await startSystem({ protection: "upstream", managed: true, sidecar: {} });
 *   await system.authorize(body, await system.agentToken());
 *   await system.crypto?.stop(); …; await system.crypto?.start();
 *   system.scanLogs(); system.leaks.findings()
 *   await system.close();
 *
 * Everything is configured through the public admin API with planted canary secrets
 * (test/helpers/canary.ts); every server logs into one capture; every request made through
 * `call()` is bounded in time, its answer scanned for leaks, and every bearer token it sends
 * watched. The IdPs and the crypto service restart on their ports; the authority reaches
 * the crypto service through a fault proxy (`crypto.proxy.mode = "hang"`).
 *
 * The authority is built by its own composition root (`buildAuthorityService`) from a test
 * configuration, with overrides for what the system supplies: store, caching JWT verifier,
 * policy protector, key rings, egress policy, clock and a policy-change publisher.
 */

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { AuditRecorder } from "../../src/audit/recorder.ts";
import type { DecisionExportConfig } from "../../src/config/decision-export.ts";
import { egressAllowSetting } from "../../src/config/settings.ts";
import type { TracingConfig } from "../../src/config/tracing.ts";
import { type CryptoOwners, policyCredentials } from "../../src/dev/crypto-owners.ts";
import { createEgressPolicy, endpointOfUrl } from "../../src/execute/egress.ts";
import { createJwtVerifier, type RemoteJwksOptions } from "../../src/identity/jwt-verifier.ts";
import { startTracing } from "../../src/observability/tracing.ts";
import { createCapabilityMap } from "../../src/pipeline/capability-map.ts";
import { createPolicyChangePublisher, type PolicyChangePublisher } from "../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import type { PolicyProtector } from "../../src/policy/protector.ts";
import { createUpstreamPolicyProtector } from "../../src/policy/upstream-protector.ts";
import { buildAuthorityService, createCachingVerifier } from "../../src/servers/authority/build.ts";
import type { AuthorityServices } from "../../src/servers/authority/services.ts";
import { createCryptoClient } from "../../src/servers/crypto/index.ts";
import { createDevCertificate, type DevCertificate } from "../../src/servers/managed/dev-certificate.ts";
import { createManagedServer } from "../../src/servers/managed/server.ts";
import { createAuthorityClient } from "../../src/servers/sidecar/authority-client.ts";
import { staticTokenSource } from "../../src/servers/sidecar/service-token.ts";
import { createSidecar, type Sidecar, type SidecarOptions } from "../../src/servers/sidecar/sidecar.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { testAuthorityConfig } from "./authority-config.ts";
import { canary, LeakWatch } from "./canary.ts";
import {
  canaryOwners,
  type PartnerKeys,
  partnerKeysWithCanaries,
  type RestartableCrypto,
  startRestartableCrypto,
} from "./crypto-service.ts";
import { egressAllowValue } from "./egress.ts";
import {
  createExtAuthzClient,
  type ExtAuthzAnswer,
  type ExtAuthzClient,
  type ExtAuthzRequest,
} from "./ext-authz-client.ts";
import { type HttpReply, type HttpRequestOptions, httpRequest } from "./http-client.ts";
import { createLogCapture, type LogCapture } from "./log-capture.ts";
import { type RestartableIdp, startRestartableIdp } from "./restartable-idp.ts";
import { sidecarTestOptions } from "./sidecar-config.ts";
import { makeTempDir, type TempDir } from "./temp-dir.ts";
import { itemsOpenApi, startTestUpstream, type TestUpstream } from "./upstream-api.ts";

export type { ExtAuthzAnswer, ExtAuthzRequest, PartnerKeys, RestartableIdp };

export const PARTNER = "acme";
export const OTHER_PARTNER = "globex";
export const CAPABILITY = "items";
export const AUTH_PROFILE = "items-key";
export const AGENT = "agent-1";
export const SECOND_AGENT = "agent-2";
export const BINDING = "acme-app";
export const OTHER_BINDING = "acme-other";
export const USER = "user-123";
export const TENANT = "acme-tenant";
export const USER_AUDIENCE = "acme-api";
export const SERVICE_IDENTITY = "reliability-env";
export const AUTHORITY_SUBJECT = "authority-service";
export const MANAGED_USERNAME = "svc-acme";
export const SIDECAR_HOST = "items.internal";
export const PUBLIC_URL = "http://authority.test";

/** What agent-1, agent-2 and the mapped user may do; `items:get:/items` (list) is in the catalog but not allowed. */
export const ALLOWED = [
  `${CAPABILITY}:get:/items/{itemId}`,
  `${CAPABILITY}:post:/items`,
  `${CAPABILITY}:get:/slow`,
  `${CAPABILITY}:get:/hang`,
] as const;

export interface WorkloadClient {
  readonly clientId: string;
  readonly clientSecret: string;
}

export interface SystemOptions {
  /** Further test upstreams (origins) the egress policy lets through, beside the items upstream. */
  readonly egressAllowAlso?: readonly string[];
  /** Default: SQLite in the system's temp dir. */
  readonly storeUrl?: string;
  /** Policy protection: in-process key rings (default) or the upstream crypto service. */
  readonly protection?: "local" | "upstream";
  /** Start the managed crypto API (and the crypto service). */
  readonly managed?: boolean;
  /** Start a sidecar; with `redisUrl` its verified-policy cache is Redis (and the authority publishes heads). */
  readonly sidecar?: false | { readonly redisUrl?: string; readonly options?: Partial<SidecarOptions> };
  /** Headless binding, workload clients and the mapped user (default true). */
  readonly binding?: boolean;
  /** Upstream deadline of invoke, broker, MCP and proxy executions (default 2000 ms). */
  readonly upstreamTimeoutMs?: number;
  /** Deadline of the authority's and the managed API's crypto client (default 2000 ms). */
  readonly cryptoTimeoutMs?: number;
  readonly auditBuffer?: number;
  readonly bodyLimitBytes?: number;
  /** The authority's parameter-scoping rollout (default: enabled for PARTNER). */
  readonly constraintsRollout?: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  /** JWKS settings of the authority's bearer verifier. */
  readonly jwks?: Omit<RemoteJwksOptions, "url">;
  /** Verified-policy cache of the loader. */
  readonly policyCache?: { readonly max?: number; readonly ttlMs?: number };
  readonly logLevel?: string;
  /** The authority's decision-log export (an operator URL of its egress gate). */
  readonly decisionExport?: DecisionExportConfig;
  /** The authority's tracing (an operator URL of its egress gate); the sidecar shares it. */
  readonly tracing?: TracingConfig;
}

export interface CallOptions extends Omit<HttpRequestOptions, "headers"> {
  readonly headers?: Readonly<Record<string, string>>;
  /** Bearer token for Authorization (watched). */
  readonly token?: string;
  /** See LeakWatch.checkResponse. */
  readonly expectsSecrets?: boolean;
}

export interface System {
  readonly dir: TempDir;
  readonly logs: LogCapture;
  readonly leaks: LeakWatch;
  readonly store: Store;
  readonly context: AuthorityServices;
  readonly recorder: AuditRecorder;
  readonly protector: PolicyProtector;
  readonly app: FastifyInstance;
  readonly url: string;
  readonly upstream: TestUpstream;
  readonly idp: RestartableIdp;
  readonly partnerIdp: RestartableIdp;
  /** Service clock offset (tokens use real time). */
  readonly clock: { offsetMs: number };
  readonly secrets: {
    readonly upstreamApiKey: string;
    readonly managedPassword: string;
    readonly partnerKeys: PartnerKeys | undefined;
  };
  readonly crypto: RestartableCrypto | undefined;
  readonly managed: { readonly url: string; readonly certificate: DevCertificate } | undefined;
  readonly sidecar:
    | {
        readonly sidecar: Sidecar;
        readonly grpcPort: number;
        readonly proxyPort: number;
        readonly metricsPort: number;
        readonly publisher: PolicyChangePublisher | undefined;
        readonly cacheKey: Uint8Array;
      }
    | undefined;
  readonly binding:
    | {
        readonly agent: WorkloadClient;
        readonly upstreamClient: WorkloadClient;
        readonly other: WorkloadClient;
        /** The authority subject the mapped user USER derives to. */
        readonly subjectId: string;
      }
    | undefined;
  adminToken(): Promise<string>;
  /** A token of the authority's issuer for a v1 subject (AGENT by default). */
  agentToken(subject?: string, extra?: { roles?: string[]; lifetimeSec?: number }): Promise<string>;
  /** A user assertion of the partner's issuer. */
  userAssertion(
    subject?: string,
    extra?: { tenant?: string; audience?: string; tokenUse?: string },
  ): Promise<string>;
  workloadToken(client?: WorkloadClient, scope?: string, bindingId?: string): Promise<string>;
  /** One request to a URL of the system: bounded, watched, scanned. */
  call(method: string, url: string, options?: CallOptions): Promise<HttpReply>;
  /** POST /v1/authorize-invocation. */
  authorize(body: unknown, token?: string, timeoutMs?: number): Promise<HttpReply>;
  /** POST /v1/bindings/{BINDING}/invoke. */
  invoke(
    body: unknown,
    options?: {
      token?: string;
      assertion?: string;
      key?: string | null;
      timeoutMs?: number;
      binding?: string;
    },
  ): Promise<HttpReply>;
  /** One JSON-RPC request to /mcp. */
  mcp(method: string, params: unknown, token: string, timeoutMs?: number): Promise<HttpReply>;
  /** One managed crypto API operation with the five headers (overridable). */
  managedCall(
    operation: string,
    body: unknown,
    options?: { headers?: Record<string, string>; expectsSecrets?: boolean; timeoutMs?: number },
  ): Promise<HttpReply>;
  /** One ext_authz Check through the sidecar's gRPC port. */
  check(request: ExtAuthzRequest, deadlineMs?: number): Promise<ExtAuthzAnswer>;
  /** One request through the sidecar's forward proxy (origin-form with the upstream's Host). */
  proxy(
    path: string,
    token: string | null,
    options?: { method?: string; timeoutMs?: number },
  ): Promise<HttpReply>;
  /** Runs the leak watch over the log lines captured since the last scan. */
  scanLogs(): void;
  close(): Promise<void>;
}

type Call = System["call"];

/** Runs cleanups newest first and keeps going past failures. */
function cleanupStack() {
  const steps: Array<() => Promise<unknown>> = [];
  return {
    push: (step: () => Promise<unknown>) => void steps.push(step),
    async run() {
      for (const step of steps.splice(0).reverse()) {
        try {
          await step();
        } catch {
          // Keep closing the rest.
        }
      }
    },
  };
}

function expectStatus(reply: HttpReply, status: number, what: string): HttpReply {
  if (reply.status !== status) {
    throw new Error(
      `system setup, ${what}: expected ${status}, got ${reply.status} ${reply.text.slice(0, 300)}`,
    );
  }
  return reply;
}

/** A token source that reuses a token until a minute before it expires. */
function cachedToken(issue: () => Promise<{ accessToken: string; expiresAt: Date }>): () => Promise<string> {
  let current: { value: string; expiresAtMs: number } | undefined;
  return async () => {
    if (current === undefined || current.expiresAtMs - Date.now() < 60_000) {
      const issued = await issue();
      current = { value: issued.accessToken, expiresAtMs: issued.expiresAt.getTime() };
    }
    return current.value;
  };
}

/** `call()`: bounded requests whose tokens are watched and whose answers are scanned. */
function watchedCaller(leaks: LeakWatch): Call {
  return async (method, target, options = {}) => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    for (const name of ["x-authority-user-assertion", "authorization", "proxy-authorization"]) {
      const value = headers[name];
      if (value !== undefined) leaks.token(value.replace(/^(Bearer|Basic) /i, ""));
    }
    const reply = await httpRequest(target, {
      ...options,
      method,
      headers,
      timeoutMs: options.timeoutMs ?? 15_000,
    });
    leaks.checkResponse(
      `${method} ${new URL(target).pathname}`,
      `${JSON.stringify(reply.headers)}\n${reply.text}`,
      options.expectsSecrets === true ? { expectsSecrets: true } : {},
    );
    return reply;
  };
}

interface AuthorityParts {
  readonly store: Store;
  readonly context: AuthorityServices;
  readonly recorder: AuditRecorder;
  readonly protector: PolicyProtector;
  readonly app: FastifyInstance;
  readonly url: string;
  readonly clock: { offsetMs: number };
  readonly publisher: PolicyChangePublisher | undefined;
}

async function startAuthority(
  options: SystemOptions,
  deps: {
    readonly dir: string;
    readonly logs: LogCapture;
    readonly idp: RestartableIdp;
    readonly crypto: RestartableCrypto | undefined;
    readonly owners: CryptoOwners | undefined;
    readonly sidecarRedisUrl: string | undefined;
    /** The `egress-allow` setting: exactly the test upstream and the partner's IdP. */
    readonly egressAllow: string;
    readonly cleanups: ReturnType<typeof cleanupStack>;
  },
): Promise<AuthorityParts> {
  const { idp, crypto, owners, cleanups } = deps;
  const store = await openStore(options.storeUrl ?? `sqlite:${join(deps.dir, "authority.db")}`);
  cleanups.push(() => store.close());
  const keyRings = createProcessKeyRings();
  const protector: PolicyProtector =
    options.protection === "upstream" && crypto !== undefined && owners !== undefined
      ? createUpstreamPolicyProtector({
          client: createCryptoClient({
            baseUrl: crypto.proxy.url,
            timeoutMs: options.cryptoTimeoutMs ?? 2000,
          }),
          credentialsFor: policyCredentials({
            owners,
            serviceIdentity: SERVICE_IDENTITY,
            token: cachedToken(() =>
              idp.server().issueToken({ subject: AUTHORITY_SUBJECT, lifetimeSec: 900 }),
            ),
            authoritySubject: AUTHORITY_SUBJECT,
          }),
          token: cachedToken(() => idp.server().issueToken({ subject: AUTHORITY_SUBJECT, lifetimeSec: 900 })),
        })
      : createLocalPolicyProtector({ keyRings, serviceIdentity: SERVICE_IDENTITY });
  const verifier = createCachingVerifier(
    createJwtVerifier({
      issuer: idp.issuer,
      audience: "authority",
      jwks: { url: idp.jwksUri, ...options.jwks },
      requireTokenUse: "access",
    }),
    { max: 10_000 },
  );
  const publisher =
    deps.sidecarRedisUrl === undefined
      ? undefined
      : createPolicyChangePublisher({ url: deps.sidecarRedisUrl });
  if (publisher !== undefined) cleanups.push(() => publisher.close());

  const clock = { offsetMs: 0 };
  const upstreamTimeoutMs = options.upstreamTimeoutMs ?? 2000;
  // Configured as `authority serve` builds it: the allow list, and the platform's own services.
  const egress = createEgressPolicy({
    allow: egressAllowSetting.parse(deps.egressAllow, "egress-allow"),
    operatorUrls: [options.decisionExport?.url, options.tracing?.url].filter((u) => u !== undefined),
    platformEndpoints: [idp.issuer, crypto?.url, deps.sidecarRedisUrl, options.storeUrl]
      .map(endpointOfUrl)
      .filter((endpoint) => endpoint !== undefined),
  });
  cleanups.push(() => egress.close());
  const defaults = testAuthorityConfig();
  const config = testAuthorityConfig({
    publicUrl: PUBLIC_URL,
    issuer: idp.issuer,
    audience: "authority",
    bodyLimitBytes: options.bodyLimitBytes ?? 1024 * 1024,
    serviceIdentity: SERVICE_IDENTITY,
    parameterScoping: options.constraintsRollout ?? { enabled: true, partnerAllowlist: [PARTNER] },
    mcp: { upstreamTimeoutMs },
    bindings: { upstreamTimeoutMs },
    auditBuffer: options.auditBuffer ?? 100_000,
    policyCache: { ...defaults.policyCache, ...options.policyCache },
    ...(options.decisionExport === undefined ? {} : { decisionExport: options.decisionExport }),
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
  });
  // The process's own composition root, with what the system supplies instead of config.
  const service = await buildAuthorityService(config, {
    store,
    verifier,
    protector,
    keyRings,
    egress,
    platform: null,
    logger: deps.logs.logger("authority"),
    now: () => new Date(Date.now() + clock.offsetMs),
    ...(publisher === undefined
      ? {}
      : {
          onPolicyChange: async (subjectId: string, head: number) => {
            await publisher.publish(subjectId, head);
          },
        }),
  });
  const url = await service.listen();
  cleanups.push(() => service.close());
  return {
    store,
    context: service.context,
    recorder: service.recorder,
    protector,
    app: service.app,
    url,
    clock,
    publisher,
  };
}

type Admin = (
  method: string,
  path: string,
  body: unknown,
  status: number,
  what: string,
) => Promise<HttpReply>;

/** Partners, the auth profile (canary secret), the imported catalog, two agents with policies. */
async function seedPartnerData(admin: Admin, upstreamUrl: string, upstreamApiKey: string): Promise<void> {
  await admin("POST", "/partners", { partner_id: PARTNER, name: "Acme" }, 201, "partner");
  await admin("POST", "/partners", { partner_id: OTHER_PARTNER, name: "Globex" }, 201, "other partner");
  await admin(
    "PUT",
    `/partners/${PARTNER}/caab/auth-profiles/${AUTH_PROFILE}`,
    { type: "static", kind: "api_key", in: "header", name: "x-api-key", secret: upstreamApiKey },
    201,
    "auth profile",
  );
  await admin(
    "POST",
    `/partners/${PARTNER}/api-specs/import-openapi`,
    {
      capability_id: CAPABILITY,
      name: "Items",
      document: itemsOpenApi(),
      upstream_base_url: upstreamUrl,
      auth_profile_ref: AUTH_PROFILE,
    },
    201,
    "import",
  );
  for (const subjectId of [AGENT, SECOND_AGENT]) {
    await admin(
      "POST",
      `/partners/${PARTNER}/users`,
      { subject_id: subjectId, subject_type: "agent", display_name: `Agent ${subjectId}` },
      201,
      `subject ${subjectId}`,
    );
    await admin(
      "PUT",
      `/partners/${PARTNER}/caab/subjects/${subjectId}/policies/${CAPABILITY}`,
      { allowed_permission_ids: [...ALLOWED], ttl_seconds: 3600 },
      200,
      `policy ${subjectId}`,
    );
  }
}

/** Two bindings on the partner's issuer, their workload clients, and USER mapped with ALLOWED. */
async function seedBindings(
  admin: Admin,
  partnerIdp: RestartableIdp,
  leaks: LeakWatch,
): Promise<NonNullable<System["binding"]>> {
  for (const bindingId of [BINDING, OTHER_BINDING]) {
    await admin(
      "POST",
      `/partners/${PARTNER}/bindings`,
      {
        binding_id: bindingId,
        issuer: partnerIdp.issuer,
        jwks_url: partnerIdp.jwksUri,
        audience: USER_AUDIENCE,
        tenant_claim: "tenant",
        tenant_value: TENANT,
        auth_profile_ref: AUTH_PROFILE,
      },
      201,
      `binding ${bindingId}`,
    );
  }
  const newClient = async (bindingId: string, name: string, scopes: string[]): Promise<WorkloadClient> => {
    const reply = await admin(
      "POST",
      `/v1/bindings/${bindingId}/workload-clients`,
      { name, scopes },
      201,
      `workload client ${name}`,
    );
    const client = { clientId: reply.json.client.client_id, clientSecret: reply.json.client_secret };
    leaks.secret(client.clientSecret);
    return client;
  };
  const bothScopes = ["authority/bindings.invoke", "authority/authority.broker.execute"];
  const agent = await newClient(BINDING, "agent-runtime", bothScopes);
  const upstreamClient = await newClient(BINDING, "items-api", ["authority/authority.broker.execute"]);
  const other = await newClient(OTHER_BINDING, "other-runtime", bothScopes);
  const mapped = await admin(
    "POST",
    `/v1/bindings/${BINDING}/subjects`,
    { external_subject: USER, display_name: "External user" },
    201,
    "mapping",
  );
  const subjectId: string = mapped.json.mapping.subject_id;
  await admin(
    "POST",
    `/v1/bindings/${BINDING}/apis`,
    {
      subject_id: subjectId,
      capability_id: CAPABILITY,
      allowed_permission_ids: [...ALLOWED],
      ttl_seconds: 3600,
    },
    200,
    "binding apis",
  );
  return { agent, upstreamClient, other, subjectId };
}

export async function startSystem(options: SystemOptions = {}): Promise<System> {
  const dir = await makeTempDir("authority-system-");
  const logs = createLogCapture(options.logLevel ?? "debug");
  const leaks = new LeakWatch();
  const cleanups = cleanupStack();
  cleanups.push(() => dir.cleanup());
  try {
    const upstreamApiKey = canary("upk-");
    const managedPassword = canary("pw-");
    const wantsCrypto = options.protection === "upstream" || options.managed === true;

    const idp = await startRestartableIdp({
      dir: dir.path,
      name: "idp",
      audience: "authority",
      logs,
      setup: async (server) => {
        if (!wantsCrypto) return;
        await server.directory.addServiceAccount({
          username: MANAGED_USERNAME,
          password: managedPassword,
          scopes: ["crypto"],
        });
      },
    });
    cleanups.push(() => idp.stop());
    const partnerIdp = await startRestartableIdp({
      dir: dir.path,
      name: "partner-idp",
      audience: USER_AUDIENCE,
      tenantClaim: "tenant",
      logs,
    });
    cleanups.push(() => partnerIdp.stop());
    const upstream = await startTestUpstream();
    cleanups.push(() => upstream.close());

    let crypto: RestartableCrypto | undefined;
    let partnerKeys: PartnerKeys | undefined;
    if (wantsCrypto) {
      const started = await startRestartableCrypto({
        dir: dir.path,
        logs,
        issuer: idp.issuer,
        jwksUri: idp.jwksUri,
      });
      crypto = started;
      cleanups.push(() => started.close());
      partnerKeys = partnerKeysWithCanaries();
      await started.server().provisionOwner({
        id: `partner-${PARTNER}`,
        kind: "partner",
        credentials: partnerKeys,
        allowedSubjects: [MANAGED_USERNAME],
      });
    }

    const sidecarRedisUrl =
      options.sidecar === undefined || options.sidecar === false ? undefined : options.sidecar.redisUrl;
    const authority = await startAuthority(options, {
      dir: dir.path,
      logs,
      idp,
      crypto,
      owners: crypto === undefined ? undefined : canaryOwners(crypto),
      sidecarRedisUrl,
      // The partner's IdP too: its JWKS is fetched through the same gate as upstream calls.
      egressAllow: egressAllowValue(upstream.url, partnerIdp.issuer, ...(options.egressAllowAlso ?? [])),
      cleanups,
    });
    const { url } = authority;
    const call = watchedCaller(leaks);
    const adminToken = cachedToken(() =>
      idp.server().issueToken({ subject: "root-admin", roles: ["admin"], lifetimeSec: 900 }),
    );
    const admin: Admin = async (method, path, body, status, what) =>
      expectStatus(
        await call(method, `${url}${path}`, {
          token: await adminToken(),
          ...(body === undefined ? {} : { json: body }),
          expectsSecrets: true,
        }),
        status,
        what,
      );
    await seedPartnerData(admin, upstream.url, upstreamApiKey);
    const binding = options.binding === false ? undefined : await seedBindings(admin, partnerIdp, leaks);

    let managed: System["managed"];
    if (options.managed === true && crypto !== undefined) {
      const certificate = await createDevCertificate();
      const server = await createManagedServer({
        idpTokenUrl: idp.tokenEndpoint,
        cryptoUrl: crypto.url,
        upstreamTimeoutMs: options.cryptoTimeoutMs ?? 2000,
        https: { key: certificate.key, cert: certificate.cert },
        rateLimit: { perUserPerMinute: 1_000_000, burst: 100_000 },
        logger: logs.logger("managed"),
      });
      const managedUrl = await server.listen({ host: "127.0.0.1", port: 0 });
      cleanups.push(() => server.close());
      managed = { url: managedUrl, certificate };
    }

    let sidecar: System["sidecar"];
    let extAuthz: ExtAuthzClient | undefined;
    if (options.sidecar !== undefined && options.sidecar !== false) {
      const sidecarToken = (
        await idp
          .server()
          .issueToken({ subject: "sidecar-1", roles: ["sidecar", "sidecar_platform"], lifetimeSec: 3600 })
      ).accessToken;
      leaks.token(sidecarToken);
      const cacheKey = new Uint8Array(randomBytes(32));
      // The sidecar's own tracing (as `authority sidecar` builds it), to the same endpoint.
      const sidecarTracing = await startTracing(options.tracing, {
        fetch: (input, init) => fetch(input, init),
        serviceName: "authority-sidecar",
        onExportError: () => undefined,
      });
      const created = createSidecar({
        ...sidecarTestOptions(),
        authority: createAuthorityClient({ baseUrl: url, token: staticTokenSource(sidecarToken) }),
        verifier: createJwtVerifier({
          issuer: idp.issuer,
          audience: "authority",
          jwks: idp.jwksUri,
          requireTokenUse: "access",
        }),
        policyKeys: { serviceIdentity: SERVICE_IDENTITY },
        capabilityMap: createCapabilityMap({ [SIDECAR_HOST]: CAPABILITY }),
        ...(sidecarRedisUrl === undefined ? {} : { redis: { url: sidecarRedisUrl, cacheKey } }),
        listen: {
          grpc: { host: "127.0.0.1", port: 0 },
          proxy: { host: "127.0.0.1", port: 0 },
          metrics: { host: "127.0.0.1", port: 0 },
        },
        // A loaded 2-core machine may need more than Envoy's 200 ms for a cold decision.
        decisionTimeoutMs: 3000,
        proxyDecisionTimeoutMs: 3000,
        upstreamTimeoutMs: options.upstreamTimeoutMs ?? 2000,
        logger: logs.logger("sidecar"),
        egress: createEgressPolicy({
          allow: egressAllowSetting.parse(
            egressAllowValue(upstream.url, ...(options.egressAllowAlso ?? [])),
            "egress-allow",
          ),
          platformEndpoints: [url, idp.issuer, sidecarRedisUrl]
            .map(endpointOfUrl)
            .filter((e) => e !== undefined),
        }),
        ...(sidecarTracing === undefined ? {} : { tracing: sidecarTracing }),
        ...options.sidecar.options,
      });
      const ports = await created.start();
      cleanups.push(() => created.close({ graceMs: 1000 }));
      if (sidecarRedisUrl !== undefined) await created.redis?.waitReady(5000);
      const client = createExtAuthzClient(ports.grpc);
      extAuthz = client;
      cleanups.push(async () => client.close());
      sidecar = {
        sidecar: created,
        grpcPort: ports.grpc,
        proxyPort: ports.proxy,
        metricsPort: ports.metrics,
        publisher: authority.publisher,
        cacheKey,
      };
    }

    const userAssertion: System["userAssertion"] = async (subject = USER, extra = {}) =>
      (
        await partnerIdp.server().issueToken({
          subject,
          audience: extra.audience ?? USER_AUDIENCE,
          tenant: extra.tenant ?? TENANT,
          ...(extra.tokenUse === undefined ? {} : { tokenUse: extra.tokenUse }),
        })
      ).accessToken;
    const workloadTokens = new Map<string, () => Promise<string>>();
    const workloadToken: System["workloadToken"] = (client, scope, bindingId = BINDING) => {
      const chosen = client ?? binding?.agent;
      if (chosen === undefined) throw new Error("system: no binding");
      const key = `${chosen.clientId}|${scope ?? ""}|${bindingId}`;
      let source = workloadTokens.get(key);
      if (source === undefined) {
        source = cachedToken(async () => {
          const reply = await call("POST", `${url}/v1/bindings/${bindingId}/token`, {
            json: {
              grant_type: "client_credentials",
              client_id: chosen.clientId,
              client_secret: chosen.clientSecret,
              ...(scope === undefined ? {} : { scope }),
            },
            expectsSecrets: true,
          });
          expectStatus(reply, 200, "workload token");
          return {
            accessToken: reply.json.access_token,
            expiresAt: new Date(Date.now() + reply.json.expires_in * 1000),
          };
        });
        workloadTokens.set(key, source);
      }
      return source();
    };
    let counter = 0;
    let scannedLines = 0;

    return {
      dir,
      logs,
      leaks,
      store: authority.store,
      context: authority.context,
      recorder: authority.recorder,
      protector: authority.protector,
      app: authority.app,
      url,
      upstream,
      idp,
      partnerIdp,
      clock: authority.clock,
      secrets: { upstreamApiKey, managedPassword, partnerKeys },
      crypto,
      managed,
      sidecar,
      binding,
      adminToken,
      async agentToken(subject = AGENT, extra = {}) {
        const issued = await idp.server().issueToken({
          subject,
          ...(extra.roles === undefined ? {} : { roles: extra.roles }),
          ...(extra.lifetimeSec === undefined ? {} : { lifetimeSec: extra.lifetimeSec }),
        });
        return issued.accessToken;
      },
      userAssertion,
      workloadToken,
      call,
      authorize: (body, token, timeoutMs) =>
        call("POST", `${url}/v1/authorize-invocation`, {
          json: body,
          ...(token === undefined ? {} : { token }),
          ...(timeoutMs === undefined ? {} : { timeoutMs }),
        }),
      async invoke(body, invokeOptions = {}) {
        const assertion = invokeOptions.assertion ?? (await userAssertion());
        const token = invokeOptions.token ?? (await workloadToken(undefined, "authority/bindings.invoke"));
        const key = invokeOptions.key === undefined ? `key-${++counter}-${Date.now()}` : invokeOptions.key;
        return call("POST", `${url}/v1/bindings/${invokeOptions.binding ?? BINDING}/invoke`, {
          token,
          json: body,
          headers: {
            "x-authority-user-assertion": assertion,
            ...(key === null ? {} : { "idempotency-key": key }),
          },
          ...(invokeOptions.timeoutMs === undefined ? {} : { timeoutMs: invokeOptions.timeoutMs }),
        });
      },
      mcp: (method, params, token, timeoutMs) =>
        call("POST", `${url}/mcp`, {
          token,
          json: { jsonrpc: "2.0", id: ++counter, method, params },
          headers: { accept: "application/json, text/event-stream" },
          ...(timeoutMs === undefined ? {} : { timeoutMs }),
        }),
      async managedCall(operation, body, managedOptions = {}) {
        if (managed === undefined || partnerKeys === undefined) throw new Error("system: no managed API");
        return call("POST", `${managed.url}/v1/${operation}`, {
          json: body,
          ca: managed.certificate.cert,
          headers: {
            username: MANAGED_USERNAME,
            password: managedPassword,
            api_key: partnerKeys.apiKey,
            access_key: partnerKeys.accessKey,
            secret_key: partnerKeys.secretKey,
            ...managedOptions.headers,
          },
          ...(managedOptions.expectsSecrets === true ? { expectsSecrets: true } : {}),
          ...(managedOptions.timeoutMs === undefined ? {} : { timeoutMs: managedOptions.timeoutMs }),
        });
      },
      async check(request, deadlineMs) {
        if (extAuthz === undefined) throw new Error("system: no sidecar");
        if (typeof request.token === "string") leaks.token(request.token);
        const answer = await extAuthz.check(
          request,
          { host: SIDECAR_HOST, capability: CAPABILITY },
          deadlineMs,
        );
        const denied = answer.response.denied_response;
        if (denied !== undefined && denied !== null) {
          leaks.checkResponse("ext_authz Check", `${JSON.stringify(denied.headers)}\n${denied.body}`);
        }
        return answer;
      },
      proxy(path, token, proxyOptions = {}) {
        if (sidecar === undefined) throw new Error("system: no sidecar");
        return call(proxyOptions.method ?? "GET", `http://127.0.0.1:${sidecar.proxyPort}${path}`, {
          headers: {
            host: SIDECAR_HOST,
            ...(token === null ? {} : { "proxy-authorization": `Bearer ${token}` }),
          },
          ...(proxyOptions.timeoutMs === undefined ? {} : { timeoutMs: proxyOptions.timeoutMs }),
        });
      },
      scanLogs() {
        const lines = logs.lines();
        leaks.checkLogs(lines.slice(scannedLines));
        scannedLines = lines.length;
      },
      close: () => cleanups.run(),
    };
  } catch (error) {
    await cleanups.run();
    throw error;
  }
}

/** Polls `probe` every `intervalMs` until it is true; resolves to the time it took, or undefined. */
export async function recoveryTime(
  probe: () => Promise<boolean>,
  boundMs: number,
  intervalMs = 50,
): Promise<number | undefined> {
  const started = performance.now();
  for (;;) {
    if (await probe().catch(() => false)) return performance.now() - started;
    if (performance.now() - started > boundMs) return undefined;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
