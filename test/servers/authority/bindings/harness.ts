/**
 * A real headless-partner setup for binding tests: the authority service on
 * 127.0.0.1:0 (SQLite in a temp dir, in-process key rings for policies, auth-profile
 * secrets and envelopes), the dev IdP twice — once as the authority's admin issuer,
 * once as the partner's issuer of user assertions (JWKS over real HTTP) — and the sample
 * upstream (examples/upstream) verifying every envelope through /v1/authority/verify.
 *
 * Everything is set up through the public HTTP API: partner, auth profile, OpenAPI
 * import of examples/openapi/customers.yaml, binding, workload clients, mapping, APIs.
 */

import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import { type SampleUpstream, startSampleUpstream } from "../../../../examples/upstream/server.ts";
import type { BindingRuntimeOptions } from "../../../../src/bindings/runtime.ts";
import type { AuthorityConfig } from "../../../../src/config/authority.ts";
import { findFreePort } from "../../../../src/dev/ports.ts";
import { createJwtVerifier } from "../../../../src/identity/jwt-verifier.ts";
import { createLogger } from "../../../../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../../src/policy/process-key-rings.ts";
import { type AuthorityService, buildAuthorityService } from "../../../../src/servers/authority/build.ts";
import type { AuthorityServices } from "../../../../src/servers/authority/services.ts";
import { createIdpServer, type IdpServer } from "../../../../src/servers/idp/server.ts";
import { openStore } from "../../../../src/store/index.ts";
import type { Store } from "../../../../src/store/store.ts";
import { testAuthorityConfig } from "../../../helpers/authority-config.ts";
import { egressAllowing } from "../../../helpers/egress.ts";
import { type Conformance, checkResponsesAgainstDocument } from "../../../helpers/openapi-conformance.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";

export interface Reply {
  readonly status: number;
  readonly headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field
  readonly body: any;
}

export interface CallOptions {
  readonly token?: string;
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
}

export interface Client {
  readonly client_id: string;
  readonly client_secret: string;
}

export const PARTNER = "acme";
export const BINDING = "acme-app";
export const TENANT = "acme-tenant";
export const USER_AUDIENCE = "acme-api";
export const UPSTREAM_API_KEY = "upstream-key-0123456789";
export const SERVICE_IDENTITY = "test-environment";
export const ALLOWED = [
  "customers:get:/customers",
  "customers:get:/customers/{customerId}",
  "customers:get:/customers/{customerId}/payment-methods",
  "customers:post:/customers",
] as const;

export interface App {
  readonly url: string;
  readonly app: FastifyInstance;
  readonly context: AuthorityServices;
}

export interface BindingsHarness {
  readonly url: string;
  readonly store: Store;
  readonly context: AuthorityServices;
  readonly keyRings: ReturnType<typeof createProcessKeyRings>;
  readonly partnerIdp: IdpServer;
  /** The authority's configured identity provider (admin tokens, IdP tokens for verify). */
  readonly adminIdp: IdpServer;
  readonly upstream: SampleUpstream;
  readonly admin: string;
  /** A token of the admin issuer with these roles (and partner claim). */
  adminToken(roles: string[], partnerId?: string): Promise<string>;
  readonly agent: Client;
  readonly upstreamClient: Client;
  /** The mapped subject of external user "user-123". */
  readonly subjectId: string;
  call(method: string, path: string, options?: CallOptions, base?: string): Promise<Reply>;
  workloadToken(client: Client, scope?: string, bindingId?: string): Promise<string>;
  userAssertion(subject?: string, options?: { tenant?: string; audience?: string }): Promise<string>;
  /** Maps an external user and assigns it the ALLOWED permissions; returns its subject id. */
  mapUser(external: string): Promise<string>;
  invoke(
    body: unknown,
    options?: { token?: string; assertion?: string; key?: string | null; base?: string },
  ): Promise<Reply>;
  /** A second authority app on the same store and keys (another replica). */
  startReplica(replica?: ReplicaOptions): Promise<App>;
  close(): Promise<void>;
}

/** How a replica differs from the main app. */
export interface ReplicaOptions {
  readonly config?: Partial<AuthorityConfig>;
  /** null: no key rings for secrets and envelopes (503 paths). */
  readonly secretKeyRings?: null;
  readonly bindings?: BindingRuntimeOptions;
  /** The replica's view of the shared store (a fault-injecting wrapper); default the store itself. */
  readonly store?: Store;
}

export interface HarnessOptions {
  /** Upstream answer delay (concurrency tests). */
  readonly upstreamDelayMs?: number;
  /** More origins egress may reach (an OAuth provider and its API). */
  readonly egressAllow?: readonly string[];
  /** The shared store's URL (default: SQLite in the harness's temp dir). */
  readonly storeUrl?: string;
}

async function send(url: string, method: string, path: string, options: CallOptions = {}): Promise<Reply> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${url}${path}`, {
    method,
    headers,
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = text.length === 0 ? undefined : JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: response.status, headers: response.headers, body };
}

function expectStatus(reply: Reply, status: number, what: string): void {
  if (reply.status !== status) {
    throw new Error(`${what}: expected ${status}, got ${reply.status} ${JSON.stringify(reply.body)}`);
  }
}

export async function startBindingsHarness(options: HarnessOptions = {}): Promise<BindingsHarness> {
  const dir: TempDir = await makeTempDir("authority-bindings-");
  const store = await openStore(options.storeUrl ?? `sqlite:${join(dir.path, "authority.db")}`);
  const adminIdp = await createIdpServer({ audience: "authority" });
  const adminIssuer = await adminIdp.listen();
  const partnerIdp = await createIdpServer({ audience: USER_AUDIENCE, tenantClaim: "tenant" });
  await partnerIdp.listen();
  const keyRings = createProcessKeyRings();
  const services: AuthorityService[] = [];
  // The upstream's port is chosen first: `egress-allow` opens exactly that address:port, and
  // the partner's IdP (its JWKS is fetched through the same gate).
  const upstreamPort = await findFreePort();
  const egress = egressAllowing([
    `http://127.0.0.1:${upstreamPort}`,
    partnerIdp.issuer,
    ...(options.egressAllow ?? []),
  ]);

  const conformances: Conformance[] = [];
  /** One authority replica, built by the service's composition root on the shared store and keys. */
  async function startApp(replica: ReplicaOptions = {}): Promise<App> {
    const defaults = testAuthorityConfig();
    const service = await buildAuthorityService(
      testAuthorityConfig({
        // Each replica is its own pod: its own chain stream and decision write-ahead file.
        auditChain: { ...defaults.auditChain, replicaId: `replica-${services.length}` },
        publicUrl: "http://authority.test",
        issuer: adminIssuer,
        audience: "authority",
        bodyLimitBytes: 1024 * 1024,
        serviceIdentity: SERVICE_IDENTITY,
        parameterScoping: { enabled: true, partnerAllowlist: [PARTNER] },
        ...replica.config,
      }),
      {
        store: replica.store ?? store,
        verifier: createJwtVerifier({
          issuer: adminIssuer,
          audience: "authority",
          jwks: `${adminIssuer}/.well-known/jwks.json`,
        }),
        protector: createLocalPolicyProtector({ keyRings, serviceIdentity: SERVICE_IDENTITY }),
        keyRings,
        ...(replica.secretKeyRings === null ? { secretKeyRings: null } : {}),
        ...(replica.bindings === undefined ? {} : { bindings: replica.bindings }),
        logger: createLogger("bindings-test", "silent"),
        now: () => new Date(),
        egress,
        platform: null,
      },
    );
    conformances.push(checkResponsesAgainstDocument(service.app));
    const url = await service.listen();
    services.push(service);
    return { url, app: service.app, context: service.context };
  }

  const main = await startApp();
  const url = main.url;
  const call = (method: string, path: string, callOptions: CallOptions = {}, base = url) =>
    send(base, method, path, callOptions);
  const admin = (await adminIdp.issueToken({ subject: "root-admin", roles: ["admin"] })).accessToken;

  expectStatus(
    await call("POST", "/partners", { token: admin, body: { partner_id: PARTNER, name: "Acme" } }),
    201,
    "partner",
  );
  expectStatus(
    await call("PUT", `/partners/${PARTNER}/caab/auth-profiles/customers-key`, {
      token: admin,
      body: { type: "static", kind: "api_key", in: "header", name: "x-api-key", secret: UPSTREAM_API_KEY },
    }),
    201,
    "auth profile",
  );
  const binding = await call("POST", `/partners/${PARTNER}/bindings`, {
    token: admin,
    body: {
      binding_id: BINDING,
      issuer: partnerIdp.issuer,
      jwks_url: partnerIdp.jwksUri,
      audience: USER_AUDIENCE,
      tenant_claim: "tenant",
      tenant_value: TENANT,
      auth_profile_ref: "customers-key",
    },
  });
  expectStatus(binding, 201, "binding");
  const newClient = async (name: string, scopes: string[]): Promise<Client> => {
    const reply = await call("POST", `/v1/bindings/${BINDING}/workload-clients`, {
      token: admin,
      body: { name, scopes },
    });
    expectStatus(reply, 201, "workload client");
    return { client_id: reply.body.client.client_id, client_secret: reply.body.client_secret };
  };
  const agent = await newClient("agent-runtime", [
    "authority/bindings.invoke",
    "authority/authority.broker.execute",
  ]);
  const upstreamClient = await newClient("customers-api", ["authority/authority.broker.execute"]);

  const upstream = await startSampleUpstream({
    authorityUrl: url,
    bindingId: BINDING,
    credentials: { clientId: upstreamClient.client_id, clientSecret: upstreamClient.client_secret },
    apiKey: UPSTREAM_API_KEY,
    port: upstreamPort,
    ...(options.upstreamDelayMs === undefined ? {} : { delayMs: options.upstreamDelayMs }),
  });
  const document = await readFile(
    new URL("../../../../examples/openapi/customers.yaml", import.meta.url),
    "utf8",
  );
  expectStatus(
    await call("POST", `/partners/${PARTNER}/api-specs/import-openapi`, {
      token: admin,
      body: {
        capability_id: "customers",
        name: "Customer records",
        document,
        format: "yaml",
        upstream_base_url: upstream.url,
        auth_profile_ref: "customers-key",
      },
    }),
    201,
    "import",
  );

  async function mapUser(external: string): Promise<string> {
    const mapped = await call("POST", `/v1/bindings/${BINDING}/subjects`, {
      token: admin,
      body: { external_subject: external, display_name: `External ${external}` },
    });
    expectStatus(mapped, 201, "mapping");
    const subjectId: string = mapped.body.mapping.subject_id;
    expectStatus(
      await call("POST", `/v1/bindings/${BINDING}/apis`, {
        token: admin,
        body: {
          subject_id: subjectId,
          capability_id: "customers",
          allowed_permission_ids: [...ALLOWED],
          ttl_seconds: 3600,
        },
      }),
      200,
      "assign",
    );
    return subjectId;
  }
  const subjectId = await mapUser("user-123");

  async function workloadToken(client: Client, scope?: string, bindingId = BINDING): Promise<string> {
    const reply = await call("POST", `/v1/bindings/${bindingId}/token`, {
      body: {
        grant_type: "client_credentials",
        client_id: client.client_id,
        client_secret: client.client_secret,
        ...(scope === undefined ? {} : { scope }),
      },
    });
    expectStatus(reply, 200, "workload token");
    return reply.body.access_token;
  }
  const agentToken = await workloadToken(agent, "authority/bindings.invoke");
  let keys = 0;

  return {
    url,
    store,
    context: main.context,
    keyRings,
    partnerIdp,
    adminIdp,
    upstream,
    admin,
    async adminToken(roles, partnerId) {
      const issued = await adminIdp.issueToken({
        subject: `${roles.join("-")}-${partnerId ?? "all"}`,
        roles,
        ...(partnerId === undefined ? {} : { claims: { partner_id: partnerId } }),
      });
      return issued.accessToken;
    },
    agent,
    upstreamClient,
    subjectId,
    call,
    workloadToken,
    mapUser,
    async userAssertion(subject = "user-123", assertionOptions = {}) {
      const issued = await partnerIdp.issueToken({
        subject,
        audience: assertionOptions.audience ?? USER_AUDIENCE,
        tenant: assertionOptions.tenant ?? TENANT,
      });
      return issued.accessToken;
    },
    async invoke(body, invokeOptions = {}) {
      const assertion =
        invokeOptions.assertion ??
        (await partnerIdp.issueToken({ subject: "user-123", audience: USER_AUDIENCE, tenant: TENANT }))
          .accessToken;
      const key = invokeOptions.key === undefined ? `key-${++keys}-${Date.now()}` : invokeOptions.key;
      return send(invokeOptions.base ?? url, "POST", `/v1/bindings/${BINDING}/invoke`, {
        token: invokeOptions.token ?? agentToken,
        body,
        headers: {
          "x-authority-user-assertion": assertion,
          ...(key === null ? {} : { "idempotency-key": key }),
        },
      });
    },
    startReplica: (replica = {}) => startApp(replica),
    async close() {
      await upstream.close();
      for (const service of services) await service.close();
      await adminIdp.close();
      await partnerIdp.close();
      await store.close();
      await dir.cleanup();
      for (const conformance of conformances) conformance.assertConforming();
    },
  };
}
