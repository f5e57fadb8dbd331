/**
 * A real world for sidecar tests: the dev IdP over HTTP, the authority service (SQLite in a
 * temp dir, every route group, in-process key rings), a real upstream HTTP server, optionally
 * a real `redis-server` with the authority's policy-change publisher, and sidecars built
 * with `createSidecar` on ephemeral ports. The sidecars and the authority share one
 * KeyRingSource object, as the brief for in-process tests asks.
 */

import { randomBytes } from "node:crypto";
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Client, credentials } from "@grpc/grpc-js";
import { putAuthProfile } from "../../../src/admin/auth-profiles.ts";
import { importOpenApi } from "../../../src/admin/capabilities.ts";
import { createPartner } from "../../../src/admin/partners.ts";
import { type AssignInput, assignCapability } from "../../../src/admin/policies.ts";
import { createSubject } from "../../../src/admin/subjects.ts";
import { endpointOfUrl } from "../../../src/execute/egress.ts";
import { createJwtVerifier, type JwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { createLogger } from "../../../src/observability/logger.ts";
import { createCapabilityMap } from "../../../src/pipeline/capability-map.ts";
import { createPolicyChangePublisher, type PolicyChangePublisher } from "../../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import type { PolicyProtector } from "../../../src/policy/protector.ts";
import { buildAuthorityService } from "../../../src/servers/authority/build.ts";
import type { AuthorityServices } from "../../../src/servers/authority/services.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/server.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { createNodeJsonFetch } from "../../../src/servers/sidecar/node-json-fetch.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import {
  createSidecar,
  type Sidecar,
  type SidecarOptions,
  type SidecarPorts,
} from "../../../src/servers/sidecar/sidecar.ts";
import { openStore } from "../../../src/store/index.ts";
import type { Store } from "../../../src/store/store.ts";
import { testAuthorityConfig } from "../../helpers/authority-config.ts";
import { egressAllowing } from "../../helpers/egress.ts";
import { checkResponsesAgainstDocument } from "../../helpers/openapi-conformance.ts";
import { type RedisServerHandle, startRedisServer } from "../../helpers/redis-server.ts";
import { sidecarTestOptions } from "../../helpers/sidecar-config.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, type Decoded, envoyCheckRequest, unary } from "./grpc/helpers.ts";

export const PARTNER = "acme";
export const AGENT = "agent-1";
export const OTHER_AGENT = "agent-2";
export const NO_POLICY_AGENT = "agent-3";
export const CAPABILITY = "orders";
export const PROFILE = "orders-key";
export const UPSTREAM_SECRET = "upstream-secret-0123456789";
export const UPSTREAM_HOST = "orders.internal";
/** Large enough for the oversize test (the sidecars use a 64 KiB bound). */
export const BIG_BODY_BYTES = 200 * 1024;
export const TEST_MAX_RESPONSE_BYTES = 64 * 1024;

export const ALLOWED = [
  `${CAPABILITY}:get:/orders`,
  `${CAPABILITY}:get:/orders/{orderId}`,
  `${CAPABILITY}:get:/files/{name}`,
  `${CAPABILITY}:get:/big`,
  `${CAPABILITY}:get:/slow`,
];

export const silent = createLogger("sidecar-test", "silent");

export function ordersApi(): Record<string, unknown> {
  const json = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  return {
    openapi: "3.1.0",
    info: { title: "Orders", version: "1.0.0" },
    paths: {
      "/orders": {
        get: { operationId: "listOrders", responses: json },
        post: {
          operationId: "createOrder",
          requestBody: { content: { "application/json": { schema: { type: "object" } } } },
          responses: { "201": { description: "created" } },
        },
      },
      "/orders/{orderId}": {
        parameters: [{ name: "orderId", in: "path", required: true, schema: { type: "string" } }],
        get: {
          operationId: "getOrder",
          // Declared: the sidecar refuses query parameters the snapshot does not name.
          parameters: [
            { name: "expand", in: "query", schema: { type: "string" } },
            { name: "service_ms", in: "query", schema: { type: "integer", minimum: 0, maximum: 1000 } },
          ],
          responses: json,
          "x-authority-redactions": [{ path: "/card_number", mode: "mask", keep_last: 4 }],
        },
      },
      "/files/{name}": {
        parameters: [{ name: "name", in: "path", required: true, schema: { type: "string" } }],
        get: { operationId: "getFile", responses: { "200": { description: "bytes" } } },
      },
      "/big": { get: { operationId: "getBig", responses: json } },
      "/slow": { get: { operationId: "getSlow", responses: json } },
    },
  };
}

export interface SeenRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
}

/** The upstream API the policies point at. */
export interface Upstream {
  readonly url: string;
  readonly seen: SeenRequest[];
  readonly fileBytes: Buffer;
  close(): Promise<void>;
}

export async function startUpstream(): Promise<Upstream> {
  const seen: SeenRequest[] = [];
  // A PNG signature first: random bytes starting with "{" would sniff as JSON (and be refused).
  const fileBytes = Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    randomBytes(TEST_MAX_RESPONSE_BYTES / 2),
  ]);
  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", headers: { ...req.headers } });
    const path = (req.url ?? "").split("?")[0] ?? "";
    req.resume();
    const sendJson = (value: unknown) => {
      const text = JSON.stringify(value);
      res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(text),
        "set-cookie": "upstream-session=abc; HttpOnly",
        server: "upstream/1.0",
      });
      res.end(text);
    };
    if (path.startsWith("/orders/")) {
      const order = {
        id: decodeURIComponent(path.slice("/orders/".length)),
        card_number: "4111111111111111",
        customer: { email: "ada@example.com", password: "hunter2" },
        total: 42,
      };
      // `?service_ms=N`: answer after N ms, like a service doing real work (the benchmark's second baseline).
      const serviceMs = Number(
        new URLSearchParams((req.url ?? "").split("?")[1] ?? "").get("service_ms") ?? 0,
      );
      if (serviceMs > 0 && serviceMs <= 1000) setTimeout(() => sendJson(order), serviceMs);
      else sendJson(order);
    } else if (path === "/orders") {
      sendJson({ items: [{ id: "1", api_key: "leaked-key" }], next: null });
    } else if (path.startsWith("/files/")) {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": fileBytes.length });
      res.end(fileBytes);
    } else if (path === "/big") {
      // Chunked, no Content-Length: the bound must hold while reading.
      res.writeHead(200, { "content-type": "application/json" });
      const filler = "x".repeat(1024);
      res.write('{"items":[');
      for (let i = 0; i < BIG_BODY_BYTES / 1024; i++) res.write(`${i === 0 ? "" : ","}"${filler}"`);
      res.end("]}");
    } else if (path === "/slow") {
      setTimeout(() => sendJson({ slow: true }), 3000).unref();
    } else {
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"error":"not_found"}');
    }
  });
  // Node's default (5 s): a shorter one makes keep-alive clients (the proxy) drop every connection.
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    fileBytes,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export interface SidecarHandle {
  readonly sidecar: Sidecar;
  readonly ports: SidecarPorts;
  readonly client: Client;
  /** One ext_authz Check with a bearer token (or none), as Envoy sends it. */
  check(options: CheckOptions): Promise<Decoded>;
  /** One request through the forward proxy. */
  proxy(options: ProxyOptions): Promise<ProxyReply>;
  metricsText(): Promise<string>;
  close(): Promise<void>;
}

export interface CheckOptions {
  readonly token?: string | null;
  readonly authorization?: string;
  readonly method?: string;
  readonly path?: string;
  readonly host?: string;
  readonly capability?: string | null;
  /** Further caller headers (the authorization comes from token/authorization). */
  readonly headers?: Record<string, string>;
}

export interface ProxyOptions {
  readonly token?: string | null;
  readonly method?: string;
  /** Absolute-form target (default) or origin-form path with `host`. */
  readonly target: string;
  readonly host?: string;
  readonly headers?: Record<string, string>;
  /** Request body (sent with its Content-Length). */
  readonly body?: string;
}

export interface ProxyReply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field
  json(): any;
}

export interface World {
  readonly idp: IdpServer;
  readonly store: Store;
  readonly context: AuthorityServices;
  readonly authorityUrl: string;
  readonly upstream: Upstream;
  readonly redis: RedisServerHandle | undefined;
  readonly publisher: PolicyChangePublisher | undefined;
  readonly cacheKey: Uint8Array;
  readonly protector: PolicyProtector;
  readonly tokens: {
    readonly admin: string;
    readonly sidecar: string;
    readonly agent: string;
    readonly otherAgent: string;
    readonly noPolicyAgent: string;
  };
  token(subject: string, extra?: TokenExtra): Promise<string>;
  startSidecar(overrides?: Partial<SidecarOptions>): Promise<SidecarHandle>;
  assign(subjectId: string, input: Partial<AssignInput>): Promise<void>;
  /** Revokes through the real admin HTTP route; resolves when the authority answered. */
  revoke(subjectId: string): Promise<number>;
  close(): Promise<void>;
}

export interface TokenExtra {
  readonly roles?: string[];
  readonly lifetimeSec?: number;
  readonly claims?: Record<string, unknown>;
  readonly scopes?: string[];
}

export interface WorldOptions {
  readonly redis?: boolean;
  /** The authority enforces signed parameter constraints for PARTNER (default off). */
  readonly parameterScoping?: boolean;
  /** More test upstreams the platform's egress-allow opens, beside the world's own. */
  readonly allowUpstreams?: readonly string[];
  /** The verifier of the authority and every sidecar, given the dev IdP's issuer (default: that issuer alone). */
  readonly verifier?: (issuer: string) => JwtVerifier;
  /** The authority's `sidecar-lease-ms` (default: the setting's default). */
  readonly sidecarLeaseMs?: number;
}

export async function startWorld(options: WorldOptions = {}): Promise<World> {
  const dir: TempDir = await makeTempDir("sidecar-world-");
  const cleanups: Array<() => Promise<void>> = [() => dir.cleanup()];
  try {
    const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
    cleanups.unshift(() => store.close());
    const idp = await createIdpServer({ audience: "authority" });
    const issuer = await idp.listen();
    cleanups.unshift(() => idp.close());
    const upstream = await startUpstream();
    cleanups.unshift(() => upstream.close());
    const redis = options.redis === true ? await startRedisServer() : undefined;
    if (redis !== undefined) cleanups.unshift(() => redis.stop());
    const publisher = redis === undefined ? undefined : createPolicyChangePublisher({ url: redis.url });
    if (publisher !== undefined) cleanups.unshift(() => publisher.close());

    const verifierOf = (): JwtVerifier =>
      options.verifier?.(issuer) ??
      createJwtVerifier({ issuer, audience: "authority", jwks: `${issuer}/.well-known/jwks.json` });
    // One KeyRingSource object for the authority and every sidecar.
    const keyRings = createProcessKeyRings();
    const protector = createLocalPolicyProtector({ keyRings, serviceIdentity: "test-environment" });
    const service = await buildAuthorityService(
      testAuthorityConfig({
        publicUrl: "http://127.0.0.1:8080",
        issuer,
        audience: "authority",
        bodyLimitBytes: 8 * 1024 * 1024,
        serviceIdentity: "test-environment",
        ...(options.sidecarLeaseMs === undefined ? {} : { sidecarLeaseMs: options.sidecarLeaseMs }),
        parameterScoping:
          options.parameterScoping === true
            ? { enabled: true, partnerAllowlist: [PARTNER] }
            : { enabled: false, partnerAllowlist: [] },
      }),
      {
        store,
        verifier: verifierOf(),
        protector,
        keyRings: createProcessKeyRings(),
        logger: silent,
        now: () => new Date(),
        // The IdP also plays a partner's OAuth token endpoint (client-credentials profiles).
        egress: egressAllowing([upstream.url, issuer, ...(options.allowUpstreams ?? [])]),
        platform: null,
        ...(publisher === undefined
          ? {}
          : {
              onPolicyChange: async (subjectId: string, head: number) => {
                await publisher.publish(subjectId, head);
              },
            }),
      },
    );
    const { context } = service;
    const conformance = checkResponsesAgainstDocument(service.app);
    cleanups.push(async () => conformance.assertConforming());
    const authorityUrl = await service.listen();
    cleanups.unshift(async () => void (await service.close()));

    const actor = { subject: "root-admin", requestId: "seed" };
    await createPartner(context, { partner_id: PARTNER, name: "Acme" });
    for (const subjectId of [AGENT, OTHER_AGENT, NO_POLICY_AGENT]) {
      await createSubject(context, PARTNER, {
        subject_id: subjectId,
        subject_type: "agent",
        display_name: subjectId,
      });
    }
    await putAuthProfile(context, PARTNER, PROFILE, {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: UPSTREAM_SECRET,
    });
    await importOpenApi(context, actor, PARTNER, {
      capability_id: CAPABILITY,
      name: "Orders",
      document: ordersApi(),
      upstream_base_url: upstream.url,
      auth_profile_ref: PROFILE,
    });
    const assign = async (subjectId: string, input: Partial<AssignInput>) => {
      await assignCapability(context, actor, PARTNER, subjectId, CAPABILITY, {
        allowed_permission_ids: ALLOWED,
        ttl_seconds: 3600,
        response_redactions: {
          [`${CAPABILITY}:get:/orders/{orderId}`]: [{ path: "/total", mode: "remove" }],
        },
        ...input,
      });
    };
    await assign(AGENT, {});
    await assign(OTHER_AGENT, {});

    const token = async (subject: string, extra: TokenExtra = {}) =>
      (
        await idp.issueToken({
          subject,
          ...(extra.roles === undefined ? {} : { roles: extra.roles }),
          ...(extra.lifetimeSec === undefined ? {} : { lifetimeSec: extra.lifetimeSec }),
          ...(extra.claims === undefined ? {} : { claims: extra.claims }),
          ...(extra.scopes === undefined ? {} : { scopes: extra.scopes }),
        })
      ).accessToken;
    const tokens = {
      admin: await token("root-admin", { roles: ["admin"] }),
      sidecar: await token("sidecar-1", { roles: ["sidecar", "sidecar_platform"] }),
      agent: await token(AGENT),
      otherAgent: await token(OTHER_AGENT),
      noPolicyAgent: await token(NO_POLICY_AGENT),
    };
    const cacheKey = new Uint8Array(randomBytes(32));
    const sidecars = new Set<SidecarHandle>();

    const startSidecar = async (overrides: Partial<SidecarOptions> = {}): Promise<SidecarHandle> => {
      const sidecar = createSidecar({
        ...sidecarTestOptions(),
        authority: createAuthorityClient({
          baseUrl: authorityUrl,
          token: staticTokenSource(tokens.sidecar),
          // The sidecar's own transport, as build.ts gives it.
          fetch: createNodeJsonFetch({ maxAnswerBytes: 32 * 1024 * 1024 }),
        }),
        verifier: verifierOf(),
        // No key ring: signed policies verified with the public keys the authority hands out.
        policyKeys: { serviceIdentity: "test-environment" },
        capabilityMap: createCapabilityMap({ [UPSTREAM_HOST]: CAPABILITY }),
        ...(redis === undefined ? {} : { redis: { url: redis.url, cacheKey } }),
        listen: {
          grpc: { host: "127.0.0.1", port: 0 },
          proxy: { host: "127.0.0.1", port: 0 },
          metrics: { host: "127.0.0.1", port: 0 },
        },
        maxResponseBytes: TEST_MAX_RESPONSE_BYTES,
        // Cold decisions (JWKS, policy, catalog and credentials fetches) on a loaded test
        // machine may take longer than Envoy's 200 ms; deadlines have their own tests.
        decisionTimeoutMs: 3000,
        proxyDecisionTimeoutMs: 3000,
        upstreamTimeoutMs: 1000,
        logger: silent,
        egress: egressAllowing([upstream.url, ...(options.allowUpstreams ?? [])], {
          platformEndpoints: [authorityUrl, issuer].map(endpointOfUrl).filter((e) => e !== undefined),
        }),
        ...overrides,
      });
      const ports = await sidecar.start();
      if (redis !== undefined) await sidecar.redis?.waitReady(5000);
      const client = new Client(`127.0.0.1:${ports.grpc}`, credentials.createInsecure());
      const handle: SidecarHandle = {
        sidecar,
        ports,
        client,
        check(check) {
          const headers: Record<string, string> = { ...check.headers };
          const bearer = check.token === undefined ? tokens.agent : check.token;
          if (check.authorization !== undefined) headers.authorization = check.authorization;
          else if (bearer !== null) headers.authorization = `Bearer ${bearer}`;
          return unary(
            client,
            checkMethod,
            envoyCheckRequest({
              method: check.method ?? "GET",
              path: check.path ?? "/orders/42",
              host: check.host ?? UPSTREAM_HOST,
              headers,
              contextExtensions:
                check.capability === null ? {} : { capability_id: check.capability ?? CAPABILITY },
              id: `req-${randomBytes(6).toString("hex")}`,
            }),
          );
        },
        proxy(request) {
          return proxyRequest(
            ports.proxy,
            request,
            request.token === undefined ? tokens.agent : request.token,
          );
        },
        async metricsText() {
          const response = await fetch(`http://127.0.0.1:${ports.metrics}/metrics`);
          return response.text();
        },
        async close() {
          sidecars.delete(handle);
          client.close();
          await sidecar.close({ graceMs: 1000 });
        },
      };
      sidecars.add(handle);
      return handle;
    };

    return {
      idp,
      store,
      context,
      authorityUrl,
      upstream,
      redis,
      publisher,
      cacheKey,
      protector,
      tokens,
      token,
      startSidecar,
      assign,
      async revoke(subjectId) {
        const response = await fetch(
          `${authorityUrl}/partners/${PARTNER}/caab/subjects/${encodeURIComponent(subjectId)}/policy/revoke`,
          { method: "POST", headers: { authorization: `Bearer ${tokens.admin}` } },
        );
        await response.arrayBuffer();
        return response.status;
      },
      async close() {
        for (const handle of [...sidecars]) await handle.close();
        for (const cleanup of cleanups) await cleanup();
      },
    };
  } catch (error) {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
    throw error;
  }
}

export function proxyRequest(port: number, options: ProxyOptions, token: string | null): Promise<ProxyReply> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...options.headers };
    if (token !== null) headers["proxy-authorization"] = `Bearer ${token}`;
    if (options.host !== undefined) headers.host = options.host;
    const req = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method: options.method ?? "GET",
        path: options.target,
        headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => {
          const body = Buffer.concat(chunks);
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body,
            json: () => JSON.parse(body.toString("utf8")),
          });
        });
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Polls `probe` until it returns true or `timeoutMs` passes; resolves to whether it did. */
export async function eventually(
  probe: () => Promise<boolean>,
  timeoutMs = 10_000,
  intervalMs = 25,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

export function deniedBody(response: Decoded): Decoded {
  return JSON.parse(response.denied_response.body) as Decoded;
}

export function headerMap(response: Decoded): Record<string, string> {
  const out: Record<string, string> = {};
  for (const option of response.ok_response.headers as Decoded[])
    out[option.header.key] = option.header.value;
  return out;
}
