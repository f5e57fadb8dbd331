/**
 * A real authority service for admin-API tests: SQLite store in a temp dir, the dev IdP
 * over real HTTP (JWKS fetched by the verifier), in-process key rings for policies and
 * auth-profile secrets, and the app listening on 127.0.0.1:0.
 */

import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { PlatformEndpoints } from "../../../../src/admin/platform-diagnostics.ts";
import type { EgressPolicy } from "../../../../src/execute/egress.ts";
import { createJwtVerifier } from "../../../../src/identity/jwt-verifier.ts";
import type { McpConfig } from "../../../../src/mcp/config.ts";
import { createLogger } from "../../../../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../../src/policy/process-key-rings.ts";
import type { PolicyProtector } from "../../../../src/policy/protector.ts";
import { buildAuthorityService } from "../../../../src/servers/authority/build.ts";
import type { AuthorityServices } from "../../../../src/servers/authority/services.ts";
import { createIdpServer, type IdpServer } from "../../../../src/servers/idp/server.ts";
import { openStore } from "../../../../src/store/index.ts";
import type { Store } from "../../../../src/store/store.ts";
import { testAuthorityConfig } from "../../../helpers/authority-config.ts";
import { egressAllowing } from "../../../helpers/egress.ts";
import { checkResponsesAgainstDocument } from "../../../helpers/openapi-conformance.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";

export interface Reply {
  readonly status: number;
  readonly text: string;
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field
  readonly body: any;
}

export interface CallOptions {
  readonly token?: string;
  readonly body?: unknown;
}

export interface Harness {
  readonly url: string;
  readonly app: FastifyInstance;
  readonly store: Store;
  readonly protector: PolicyProtector;
  readonly context: AuthorityServices;
  readonly secretKeyRings: ReturnType<typeof createProcessKeyRings>;
  /** Every (subject, head) the policy-change hook was told about. */
  readonly notifications: Array<{ subjectId: string; head: number }>;
  /** Service clock; tokens use real time. */
  clock: { offsetMs: number };
  token(roles: readonly string[], partnerId?: string, subject?: string): Promise<string>;
  call(method: string, path: string, options?: CallOptions): Promise<Reply>;
  close(): Promise<void>;
}

export interface HarnessOptions {
  /** Default: `egress-allow=127.0.0.1:18080`, the sample API of examples/openapi/customers.yaml. */
  readonly egress?: EgressPolicy;
  readonly secretKeyRings?: boolean;
  /** Platform services the diagnostics probe. */
  readonly platform?: PlatformEndpoints;
  readonly mcp?: McpConfig;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const dir: TempDir = await makeTempDir("authority-admin-");
  const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  const idp: IdpServer = await createIdpServer({ audience: "authority" });
  const issuer = await idp.listen();
  const verifier = createJwtVerifier({
    issuer,
    audience: "authority",
    jwks: `${issuer}/.well-known/jwks.json`,
  });
  const protector = createLocalPolicyProtector({
    keyRings: createProcessKeyRings(),
    serviceIdentity: "test-environment",
  });
  const secretKeyRings = createProcessKeyRings();
  const notifications: Array<{ subjectId: string; head: number }> = [];
  const clock = { offsetMs: 0 };
  const service = await buildAuthorityService(
    testAuthorityConfig({
      publicUrl: "http://127.0.0.1:8080",
      issuer,
      audience: "authority",
      bodyLimitBytes: 8 * 1024 * 1024,
      serviceIdentity: "test-environment",
      parameterScoping: { enabled: true, partnerAllowlist: ["acme"] },
      ...(options.mcp === undefined ? {} : { mcp: options.mcp }),
    }),
    {
      store,
      verifier,
      protector,
      keyRings: secretKeyRings,
      ...(options.secretKeyRings === false ? { secretKeyRings: null } : {}),
      platform: options.platform ?? null,
      logger: createLogger("authority-test", "silent"),
      now: () => new Date(Date.now() + clock.offsetMs),
      egress: options.egress ?? egressAllowing(["http://127.0.0.1:18080"]),
      onPolicyChange: (subjectId, head) => {
        notifications.push({ subjectId, head });
      },
    },
  );
  const { app, context } = service;
  const conformance = checkResponsesAgainstDocument(app);
  const url = await service.listen();
  let counter = 0;
  return {
    url,
    app,
    store,
    protector,
    context,
    secretKeyRings,
    notifications,
    clock,
    async token(roles, partnerId, subject) {
      const issued = await idp.issueToken({
        subject: subject ?? `tester-${++counter}`,
        roles,
        ...(partnerId === undefined ? {} : { claims: { partner_id: partnerId } }),
      });
      return issued.accessToken;
    },
    async call(method, path, callOptions = {}) {
      const headers: Record<string, string> = {};
      if (callOptions.token !== undefined) headers.authorization = `Bearer ${callOptions.token}`;
      if (callOptions.body !== undefined) headers["content-type"] = "application/json";
      const response = await fetch(`${url}${path}`, {
        method,
        headers,
        ...(callOptions.body === undefined ? {} : { body: JSON.stringify(callOptions.body) }),
      });
      const text = await response.text();
      let body: unknown;
      try {
        body = text.length === 0 ? undefined : JSON.parse(text);
      } catch {
        body = undefined;
      }
      return { status: response.status, text, body };
    },
    async close() {
      await service.close();
      await idp.close();
      await store.close();
      await dir.cleanup();
      conformance.assertConforming();
    },
  };
}

/** Tokens for the usual cast of callers. */
export async function cast(h: Harness) {
  return {
    admin: await h.token(["admin"], undefined, "root-admin"),
    auditor: await h.token(["auditor"], undefined, "the-auditor"),
    acmeAdmin: await h.token(["partner_admin"], "acme", "acme-admin"),
    globexAdmin: await h.token(["partner_admin"], "globex", "globex-admin"),
    agent: await h.token(["agent"], "acme", "some-agent"),
  };
}

/** A small OpenAPI 3.1 document; `extra` adds operations (a changed catalog). */
export function smallApi(extra = false): Record<string, unknown> {
  const paths: Record<string, unknown> = {
    "/orders": {
      get: {
        operationId: "listOrders",
        responses: {
          "200": {
            description: "ok",
            content: { "application/json": { schema: { type: "array", items: { type: "object" } } } },
          },
        },
      },
      post: {
        operationId: "createOrder",
        requestBody: { content: { "application/json": { schema: { type: "object" } } } },
        responses: { "201": { description: "created" } },
      },
    },
    "/orders/{orderId}": {
      parameters: [{ name: "orderId", in: "path", required: true, schema: { type: "string" } }],
      get: { operationId: "getOrder", responses: { "200": { description: "ok" } } },
      delete: { operationId: "deleteOrder", responses: { "204": { description: "gone" } } },
    },
  };
  if (extra) {
    paths["/orders/{orderId}/refunds"] = {
      parameters: [{ name: "orderId", in: "path", required: true, schema: { type: "string" } }],
      post: { operationId: "refundOrder", responses: { "201": { description: "refunded" } } },
    };
  }
  return {
    openapi: "3.1.0",
    info: { title: "Orders", version: extra ? "1.1.0" : "1.0.0" },
    servers: [{ url: "https://orders.example.com/v1" }],
    paths,
  };
}
