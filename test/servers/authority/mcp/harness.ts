/**
 * A real authority service for the hosted-MCP tests: SQLite store in a temp dir, the dev
 * IdP over real HTTP, in-process key rings, a real upstream HTTP server on loopback, and
 * the app on 127.0.0.1:0. Data is seeded through the admin domain services, and clients
 * are the SDK's own Client over StreamableHTTPClientTransport.
 */

import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { putAuthProfile } from "../../../../src/admin/auth-profiles.ts";
import { importOpenApi } from "../../../../src/admin/capabilities.ts";
import type { Actor } from "../../../../src/admin/deps.ts";
import { createPartner } from "../../../../src/admin/partners.ts";
import { assignCapability } from "../../../../src/admin/policies.ts";
import { createSubject } from "../../../../src/admin/subjects.ts";
import type { RedactionRule } from "../../../../src/core/redaction.ts";
import { findFreePort } from "../../../../src/dev/ports.ts";
import { createJwtVerifier } from "../../../../src/identity/jwt-verifier.ts";
import type { McpConfig } from "../../../../src/mcp/config.ts";
import { createLogger } from "../../../../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../../src/policy/process-key-rings.ts";
import { buildAuthorityService } from "../../../../src/servers/authority/build.ts";
import type { AuthorityServices } from "../../../../src/servers/authority/services.ts";
import type { DevUser } from "../../../../src/servers/idp/authorization-code.ts";
import { createIdpServer, type IdpServer } from "../../../../src/servers/idp/server.ts";
import { openStore } from "../../../../src/store/index.ts";
import type { Store } from "../../../../src/store/store.ts";
import { testAuthorityConfig } from "../../../helpers/authority-config.ts";
import { egressAllowing } from "../../../helpers/egress.ts";
import { checkResponsesAgainstDocument } from "../../../helpers/openapi-conformance.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";

export const PUBLIC_URL = "http://127.0.0.1:8080";
export const ALLOWED_ORIGIN = "http://app.example";
export const UPSTREAM_SECRET = "upstream-api-key-123";
export const PARTNER = "acme";
export const CAPABILITY = "orders";

export interface UpstreamRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface Upstream {
  readonly url: string;
  readonly requests: UpstreamRequest[];
  close(): Promise<void>;
}

/** The upstream API: a real HTTP server that records every request it receives. */
export async function startUpstream(): Promise<Upstream> {
  const requests: UpstreamRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      const path = new URL(req.url ?? "/", "http://upstream").pathname;
      const json = (status: number, value: unknown, headers: Record<string, string | string[]> = {}) => {
        res.writeHead(status, { "content-type": "application/json", ...headers });
        res.end(JSON.stringify(value));
      };
      if (path === "/v1/orders" && req.method === "GET") return json(200, [{ id: "o-1" }, { id: "o-2" }]);
      if (path === "/v1/orders" && req.method === "POST")
        return json(201, { id: "o-3", request: JSON.parse(body) });
      if (path.startsWith("/v1/orders/") && req.method === "GET") return json(200, { id: path.slice(11) });
      if (path.startsWith("/v1/orders/") && req.method === "DELETE") {
        res.writeHead(204);
        return res.end();
      }
      if (path.startsWith("/v1/customers/")) {
        return json(
          200,
          {
            id: path.slice(14),
            email: "jane.doe@example.com",
            api_token: "tok_live_abcdef",
            profile: { card_number: "4111111111111111", nickname: "JD" },
          },
          { "set-cookie": "session=abc", "x-powered-by": "upstream", "x-trace": "t-1" },
        );
      }
      if (path === "/v1/reports")
        return json(200, { region: new URL(req.url ?? "/", "http://u").searchParams.get("region") });
      if (path === "/v1/fail") return json(500, { error: "boom", client_secret: "s3cr3t" });
      if (path === "/v1/slow") {
        const timer = setTimeout(() => json(200, { late: true }), 5000);
        res.on("close", () => clearTimeout(timer));
        return;
      }
      return json(404, { error: "not found" });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The OpenAPI document of the upstream; `extra` adds `count` long, similar operations. */
export function ordersApi(upstreamUrl: string, extra = 0): Record<string, unknown> {
  const paths: Record<string, unknown> = {
    "/orders": {
      get: {
        operationId: "listOrders",
        summary: "List orders",
        parameters: [{ name: "limit", in: "query", schema: { type: "integer", minimum: 1, maximum: 100 } }],
        responses: { "200": { description: "ok" } },
      },
      post: {
        operationId: "createOrder",
        summary: "Create an order",
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["item"],
                properties: { item: { type: "string" }, quantity: { type: "integer", minimum: 1 } },
                additionalProperties: false,
              },
            },
          },
        },
        responses: { "201": { description: "created" } },
      },
    },
    "/orders/{orderId}": {
      parameters: [
        { name: "orderId", in: "path", required: true, schema: { type: "string", pattern: "^o-[0-9]+$" } },
      ],
      get: { operationId: "getOrder", summary: "Get an order", responses: { "200": { description: "ok" } } },
      delete: {
        operationId: "deleteOrder",
        summary: "Delete an order",
        responses: { "204": { description: "gone" } },
      },
    },
    "/customers/{customerId}": {
      parameters: [{ name: "customerId", in: "path", required: true, schema: { type: "string" } }],
      get: { operationId: "getCustomer", responses: { "200": { description: "ok" } } },
    },
    "/reports": {
      get: {
        operationId: "getReport",
        parameters: [{ name: "region", in: "query", schema: { type: "string" } }],
        "x-authority-constraints": [
          { in: "query", name: "region", required: true, allowed_values: ["eu", "us"] },
        ],
        responses: { "200": { description: "ok" } },
      },
    },
    "/fail": { get: { operationId: "alwaysFails", responses: { "200": { description: "ok" } } } },
    "/slow": { get: { operationId: "neverAnswersInTime", responses: { "200": { description: "ok" } } } },
  };
  for (let i = 0; i < extra; i++) {
    paths[`/tenants/{tenantId}/very-long-resource-collection-name/subresources/items-${i}`] = {
      parameters: [{ name: "tenantId", in: "path", required: true, schema: { type: "string" } }],
      get: {
        operationId: `getTenantVeryLongResourceCollectionNameSubresourceItemsNumber${i}`,
        responses: { "200": { description: "ok" } },
      },
    };
  }
  return {
    openapi: "3.1.0",
    info: { title: "Orders", version: "1.0.0" },
    servers: [{ url: `${upstreamUrl}/v1` }],
    paths,
  };
}

export const permission = (method: string, path: string): string => `${CAPABILITY}:${method}:${path}`;

export interface Harness {
  readonly url: string;
  /** The service's public URL (PUBLIC_URL unless started for the OAuth flow). */
  readonly publicUrl: string;
  readonly store: Store;
  readonly context: AuthorityServices;
  readonly upstream: Upstream;
  readonly actor: Actor;
  /** Service clock offset (tokens keep real time). */
  readonly clock: { offsetMs: number };
  token(
    subject: string,
    roles?: readonly string[],
    partnerId?: string,
    /** Another audience than the configured one, and scopes (tokens a client asked for itself). */
    grant?: { audience?: string; scopes?: readonly string[] },
  ): Promise<string>;
  /** Creates the subject (agent) and assigns the capability with these permissions. */
  grant(
    subjectId: string,
    permissionIds: readonly string[],
    options?: { ttlSeconds?: number; redactions?: Record<string, RedactionRule[]> },
  ): Promise<void>;
  connect(token: string): Promise<Client>;
  close(): Promise<void>;
}

export async function startHarness(
  options: {
    extraOperations?: number;
    mcp?: McpConfig;
    /**
     * The dev IdP's authorization-code flow signing in this user, and the service on the port
     * its public URL names (an OAuth client checks the advertised resource against the URL it uses).
     */
    oauthUser?: DevUser;
    /** More servers the egress gate lets the service reach (downstream MCP servers). */
    egressAllow?: readonly string[];
  } = {},
): Promise<Harness> {
  const dir: TempDir = await makeTempDir("authority-mcp-");
  const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  const port = options.oauthUser === undefined ? undefined : await findFreePort("127.0.0.1");
  const publicUrl = port === undefined ? PUBLIC_URL : `http://127.0.0.1:${port}`;
  const idp: IdpServer = await createIdpServer({
    audience: "authority",
    ...(options.oauthUser === undefined
      ? {}
      : {
          authorizationCode: {
            user: options.oauthUser,
            resources: [`${publicUrl}/mcp`],
            scopes: ["authority/mcp"],
            maxClients: 5,
          },
        }),
  });
  const issuer = await idp.listen();
  const upstream = await startUpstream();
  const clock = { offsetMs: 0 };
  // A first call on a loaded machine can take a few hundred ms; /v1/slow answers after 5 s.
  const mcp: McpConfig = options.mcp ?? { allowedOrigins: [ALLOWED_ORIGIN], upstreamTimeoutMs: 2_000 };
  const service = await buildAuthorityService(
    testAuthorityConfig({
      publicUrl,
      ...(port === undefined ? {} : { listen: { host: "127.0.0.1", port } }),
      issuer,
      audience: "authority",
      bodyLimitBytes: 4 * 1024 * 1024,
      serviceIdentity: "test-environment",
      parameterScoping: { enabled: true, partnerAllowlist: [PARTNER] },
      mcp,
    }),
    {
      store,
      verifier: createJwtVerifier({ issuer, audience: "authority", jwks: `${issuer}/.well-known/jwks.json` }),
      // As build.ts makes it from the trusted issuers: also the MCP resource URL (RFC 8707).
      mcpVerifier: createJwtVerifier({
        issuer,
        audience: ["authority", `${publicUrl}/mcp`],
        jwks: `${issuer}/.well-known/jwks.json`,
      }),
      protector: createLocalPolicyProtector({
        keyRings: createProcessKeyRings(),
        serviceIdentity: "test-environment",
      }),
      keyRings: createProcessKeyRings(),
      logger: createLogger("authority-mcp-test", "silent"),
      now: () => new Date(Date.now() + clock.offsetMs),
      egress: egressAllowing([upstream.url, ...(options.egressAllow ?? [])]),
      platform: null,
    },
  );
  const { app, context } = service;
  const conformance = checkResponsesAgainstDocument(app);
  const url = await service.listen();

  const actor: Actor = { subject: "seed-admin", requestId: "req_seed_0001" };
  await createPartner(context, { partner_id: PARTNER, name: "Acme" });
  await putAuthProfile(context, PARTNER, "orders-key", {
    type: "static",
    kind: "api_key",
    in: "header",
    name: "x-api-key",
    secret: UPSTREAM_SECRET,
  });
  await importOpenApi(context, actor, PARTNER, {
    capability_id: CAPABILITY,
    name: "Orders",
    document: ordersApi(upstream.url, options.extraOperations ?? 0),
    auth_profile_ref: "orders-key",
  });

  const clients: Client[] = [];
  return {
    url,
    publicUrl,
    store,
    context,
    upstream,
    actor,
    clock,
    async token(subject, roles = ["agent"], partnerId, grant = {}) {
      const issued = await idp.issueToken({
        subject,
        roles,
        ...(grant.audience === undefined ? {} : { audience: grant.audience }),
        ...(grant.scopes === undefined ? {} : { scopes: grant.scopes }),
        ...(partnerId === undefined ? {} : { claims: { partner_id: partnerId } }),
      });
      return issued.accessToken;
    },
    async grant(subjectId, permissionIds, grantOptions = {}) {
      await createSubject(context, PARTNER, {
        subject_id: subjectId,
        subject_type: "agent",
        display_name: subjectId,
      });
      await assignCapability(context, actor, PARTNER, subjectId, CAPABILITY, {
        allowed_permission_ids: permissionIds,
        ttl_seconds: grantOptions.ttlSeconds ?? 3600,
        ...(grantOptions.redactions === undefined ? {} : { response_redactions: grantOptions.redactions }),
      });
    },
    async connect(token) {
      const client = new Client({ name: "authority-test", version: "1.0.0" });
      const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      });
      await client.connect(transport);
      clients.push(client);
      return client;
    },
    async close() {
      for (const client of clients) await client.close();
      // A client socket that connected but never sent a request is not "idle" to Node's
      // server.close(); tests end every connection instead of waiting for keep-alive.
      const closing = service.close();
      app.server.closeAllConnections();
      await closing;
      await upstream.close();
      await idp.close();
      await store.close();
      await dir.cleanup();
      conformance.assertConforming();
    },
  };
}
