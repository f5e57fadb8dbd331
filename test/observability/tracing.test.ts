/**
 * OpenTelemetry tracing end to end (decision 2741): a real Envoy → the sidecar's ext_authz
 * Check → the upstream, and the authority's binding invoke → the upstream, each one trace
 * with its parent/child links, spans exported over OTLP/HTTP to a receiver this test starts.
 * The exported spans hold no canary, secret or token. Off by default, the SDK is not loaded.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { parse, stringify } from "yaml";
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { type EnvoyHandle, renderBootstrap, startEnvoy } from "../helpers/envoy.ts";
import { httpRequest } from "../helpers/http-client.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { AGENT, CAPABILITY, SIDECAR_HOST, type System, startSystem } from "../helpers/system.ts";
import { eventually } from "../servers/sidecar/world.ts";

interface ExportedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly name: string;
  readonly kind: number;
  readonly service: string;
}

const SERVER = 2;
const CLIENT = 3;

/** Every span the receiver got, with its resource's service.name. */
function exportedSpans(receiver: OtlpReceiver): ExportedSpan[] {
  // biome-ignore lint/suspicious/noExplicitAny: OTLP JSON is read field by field
  return receiver.bodies.flatMap((entry: any) =>
    entry.path !== "/v1/traces"
      ? []
      : // biome-ignore lint/suspicious/noExplicitAny: as above
        entry.body.resourceSpans.flatMap((resource: any) => {
          const service = resource.resource.attributes.find(
            (attribute: { key: string }) => attribute.key === "service.name",
          )?.value.stringValue;
          // biome-ignore lint/suspicious/noExplicitAny: as above
          return resource.scopeSpans.flatMap((scope: any) =>
            // biome-ignore lint/suspicious/noExplicitAny: as above
            scope.spans.map((span: any) => ({
              ...span,
              parentSpanId: span.parentSpanId || undefined,
              service,
            })),
          );
        }),
  );
}

/** The traceparent's trace id and parent span id. */
function traceparentOf(value: unknown): { traceId: string; spanId: string } {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/.exec(String(value));
  assert.ok(match !== null, `a W3C traceparent reached the upstream: ${String(value)}`);
  return { traceId: match[1] as string, spanId: match[2] as string };
}

function one(spans: readonly ExportedSpan[], name: string): ExportedSpan {
  const found = spans.filter((span) => span.name === name);
  assert.equal(found.length, 1, `one ${name} span in ${JSON.stringify(spans.map((s) => s.name))}`);
  return found[0] as ExportedSpan;
}

/** A rendered bootstrap with Envoy's OpenTelemetry tracer exporting OTLP/HTTP to the receiver's port. */
function withEnvoyTracing(bootstrap: string, receiverPort: number): string {
  const config = parse(bootstrap);
  const hcm = config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  hcm.tracing = {
    random_sampling: { value: 100 },
    provider: {
      name: "envoy.tracers.opentelemetry",
      typed_config: {
        "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
        service_name: "envoy",
        http_service: {
          http_uri: {
            uri: `http://127.0.0.1:${receiverPort}/v1/traces`,
            cluster: "otlp_receiver",
            timeout: "1s",
          },
        },
      },
    },
  };
  config.static_resources.clusters.push({
    name: "otlp_receiver",
    type: "STATIC",
    connect_timeout: "1s",
    load_assignment: {
      cluster_name: "otlp_receiver",
      endpoints: [
        {
          lb_endpoints: [
            { endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: receiverPort } } } },
          ],
        },
      ],
    },
  });
  return stringify(config);
}

describe("tracing: Envoy → sidecar → upstream, and invoke → upstream, in one trace each", () => {
  let receiver: OtlpReceiver;
  let system: System;
  let envoy: EnvoyHandle;

  before(async () => {
    receiver = await startOtlpReceiver();
    system = await startSystem({ tracing: { url: `${receiver.url}/v1/traces` }, sidecar: {} });
    const sidecarPort = system.sidecar?.grpcPort;
    assert.ok(sidecarPort !== undefined);
    envoy = await startEnvoy((accessLogPath) =>
      renderBootstrap({
        sidecarPort,
        appPort: Number(new URL(system.upstream.url).port),
        capability: CAPABILITY,
        // A cold first decision on a loaded machine: outcomes, not deadlines, are tested here.
        timeout: "3s",
        accessLogPath,
      }),
    );
  });
  after(async () => {
    await envoy?.stop();
    await system?.close();
    await receiver?.close();
  });

  it("the Check continues the caller's trace; its stages are its children; the upstream is its child", async () => {
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const callerSpan = "00f067aa0ba902b7";
    const before = system.upstream.hits.length;
    const token = await system.agentToken(AGENT);
    const reply = await httpRequest(`${envoy.url}/items/7`, {
      headers: {
        host: SIDECAR_HOST,
        authorization: `Bearer ${token}`,
        traceparent: `00-${traceId}-${callerSpan}-01`,
      },
    });
    assert.equal(reply.status, 200, reply.text);
    const hit = system.upstream.hits.slice(before).find((h) => h.path === "/items/7");
    assert.ok(hit !== undefined, "the request reached the upstream");
    const upstreamParent = traceparentOf(hit.headers.traceparent);
    assert.equal(upstreamParent.traceId, traceId, "the upstream continues the caller's trace");

    const inTrace = () => exportedSpans(receiver).filter((span) => span.traceId === traceId);
    const complete = () =>
      ["authority.check", "authority.decide"].every((n) => inTrace().some((s) => s.name === n));
    assert.ok(await eventually(async () => complete()), "the sidecar's spans reached the receiver");
    const spans = inTrace();
    const check = one(spans, "authority.check");
    assert.equal(check.parentSpanId, callerSpan, "the Check's parent is the caller's span");
    assert.equal(check.kind, SERVER);
    assert.equal(check.service, "authority-sidecar");
    assert.equal(upstreamParent.spanId, check.spanId, "the upstream's parent is the Check span");
    const stages = spans.filter((span) => span.parentSpanId === check.spanId);
    for (const name of ["authority.verify_token", "authority.load_policy", "authority.decide"])
      one(stages, name);
    // The sidecar's policy fetch is served by the authority inside the same trace.
    const load = one(stages, "authority.load_policy");
    assert.ok(
      await eventually(async () =>
        inTrace().some((span) => span.kind === SERVER && span.parentSpanId === load.spanId),
      ),
      "the authority's span of the policy fetch is a child of the sidecar's policy load",
    );
  });

  it("with Envoy's own tracing: Envoy's ext_authz span is the Check's parent, one trace to the upstream", async () => {
    // deploy/envoy/envoy.yaml with Envoy's OpenTelemetry tracer sending to the same receiver.
    const traced = await startEnvoy(async (accessLogPath) =>
      withEnvoyTracing(
        await renderBootstrap({
          sidecarPort: system.sidecar?.grpcPort ?? 0,
          appPort: Number(new URL(system.upstream.url).port),
          capability: CAPABILITY,
          timeout: "3s",
          accessLogPath,
        }),
        Number(new URL(receiver.url).port),
      ),
    );
    try {
      const before = system.upstream.hits.length;
      const token = await system.agentToken(AGENT);
      const reply = await httpRequest(`${traced.url}/items/8`, {
        headers: { host: SIDECAR_HOST, authorization: `Bearer ${token}` },
      });
      assert.equal(reply.status, 200, reply.text);
      const hit = system.upstream.hits.slice(before).find((h) => h.path === "/items/8");
      assert.ok(hit !== undefined);
      const { traceId, spanId } = traceparentOf(hit.headers.traceparent);
      const inTrace = () => exportedSpans(receiver).filter((span) => span.traceId === traceId);
      const seen = () => {
        const spans = inTrace();
        return spans.some((s) => s.name === "authority.check") && spans.some((s) => s.spanId === spanId);
      };
      assert.ok(await eventually(async () => seen()), "Envoy's and the sidecar's spans reached the receiver");
      const spans = inTrace();
      const byId = new Map(spans.map((span) => [span.spanId, span]));
      const rootOf = (span: ExportedSpan): ExportedSpan => {
        const parent = span.parentSpanId === undefined ? undefined : byId.get(span.parentSpanId);
        return parent === undefined ? span : rootOf(parent);
      };
      const check = one(spans, "authority.check");
      const authz = byId.get(check.parentSpanId ?? "");
      assert.ok(
        authz !== undefined && authz.service === "envoy",
        "the Check's parent is Envoy's ext_authz span",
      );
      const upstreamCall = byId.get(spanId);
      assert.ok(upstreamCall !== undefined && upstreamCall.service === "envoy", "Envoy's upstream call span");
      const root = rootOf(check);
      assert.equal(root.service, "envoy");
      assert.equal(root.parentSpanId, undefined);
      assert.equal(
        rootOf(upstreamCall).spanId,
        root.spanId,
        "the Check and the upstream call share Envoy's request span",
      );
    } finally {
      await traced.stop();
    }
  });

  it("the forward proxy continues a B3 trace: proxy span → stages, upstream call → the upstream (W3C and B3)", async () => {
    const traceId = "80f198ee56343ba864fe8b2a57d3eff7";
    const callerSpan = "e457b5a2e4d86bd1";
    const before = system.upstream.hits.length;
    const token = await system.agentToken(AGENT);
    const reply = await system.call("GET", `http://127.0.0.1:${system.sidecar?.proxyPort}/items/9`, {
      headers: {
        host: SIDECAR_HOST,
        "proxy-authorization": `Bearer ${token}`,
        b3: `${traceId}-${callerSpan}-1`,
      },
    });
    assert.equal(reply.status, 200, reply.text);
    const hit = system.upstream.hits.slice(before).find((h) => h.path === "/items/9");
    assert.ok(hit !== undefined);
    const { spanId } = traceparentOf(hit.headers.traceparent);
    assert.equal(hit.headers.b3, `${traceId}-${spanId}-1`, "the caller's stale b3 header is replaced");
    assert.equal(hit.headers["x-b3-spanid"], spanId);
    const inTrace = () => exportedSpans(receiver).filter((span) => span.traceId === traceId);
    assert.ok(await eventually(async () => inTrace().some((s) => s.name === "authority.proxy")));
    const spans = inTrace();
    const proxy = one(spans, "authority.proxy");
    assert.equal(proxy.parentSpanId, callerSpan, "the proxy span's parent is the caller's B3 span");
    const upstream = one(spans, "authority.upstream");
    assert.equal(upstream.spanId, spanId);
    assert.equal(upstream.parentSpanId, proxy.spanId);
    const stages = spans.filter((span) => span.parentSpanId === proxy.spanId);
    for (const name of ["authority.verify_token", "authority.decide"]) one(stages, name);
  });

  it("a binding invoke: server span → decide, execute → upstream call → the upstream", async () => {
    const before = system.upstream.hits.length;
    const reply = await system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/7" });
    assert.equal(reply.status, 200, reply.text);
    const hit = system.upstream.hits.slice(before).find((h) => h.path === "/items/7");
    assert.ok(hit !== undefined, "the invoke reached the upstream");
    const { traceId, spanId } = traceparentOf(hit.headers.traceparent);

    const inTrace = () => exportedSpans(receiver).filter((span) => span.traceId === traceId);
    assert.ok(
      await eventually(async () => inTrace().some((s) => s.kind === SERVER && s.parentSpanId === undefined)),
      "the invoke's spans reached the receiver",
    );
    const spans = inTrace();
    const server = spans.find((s) => s.kind === SERVER && s.parentSpanId === undefined);
    assert.ok(server !== undefined);
    assert.equal(server.name, "HTTP POST");
    const upstream = one(spans, "authority.upstream");
    assert.equal(upstream.spanId, spanId, "the upstream's parent is the upstream-call span");
    assert.equal(upstream.kind, CLIENT);
    const execute = one(spans, "authority.execute");
    assert.equal(upstream.parentSpanId, execute.spanId);
    assert.equal(execute.parentSpanId, server.spanId);
    for (const name of ["authority.load_policy", "authority.decide"]) {
      assert.equal(one(spans, name).parentSpanId, server.spanId, `${name} is a child of the request`);
    }
    // The workload token and the user assertion are both verified under the request.
    const verified = spans.filter((s) => s.name === "authority.verify_token");
    assert.ok(
      verified.length >= 1 && verified.every((s) => s.parentSpanId === server.spanId),
      JSON.stringify(spans.map((s) => [s.name, s.spanId, s.parentSpanId])),
    );
  });

  it("no exported span holds a canary, a watched secret or a token", () => {
    assert.ok(receiver.bodies.length > 0);
    system.leaks.checkLogs(receiver.bodies.map((entry) => JSON.stringify(entry.body)));
    assert.deepEqual(system.leaks.findings(), []);
  });
});

describe("tracing is off by default and costs no module", () => {
  it("no setting: no tracing configured", () => {
    const config = resolveAuthorityConfig({ flags: { "policy-protection": "embedded" }, env: {} });
    assert.equal(config.tracing, undefined);
  });

  it("the composition roots load no OpenTelemetry SDK module until tracing is started", async () => {
    // A fresh process: which modules the roots' imports and a start without tracing resolve.
    const script = `
      import { registerHooks } from "node:module";
      const loaded = new Set();
      registerHooks({
        resolve(specifier, context, next) {
          const result = next(specifier, context);
          const sdk = /@opentelemetry\\/(?!api\\/)([^/]+)|tracing-sdk\\.ts/.exec(result.url);
          if (sdk !== null) loaded.add(sdk[1] ?? "tracing-sdk.ts");
          return result;
        },
      });
      await import("./src/servers/sidecar/build.ts");
      await import("./src/servers/authority/build.ts");
      const { startTracing } = await import("./src/observability/tracing.ts");
      const deps = { fetch: async () => new Response(), serviceName: "t", onExportError: () => {} };
      await startTracing(undefined, deps);
      const off = [...loaded];
      const on = await startTracing({ url: "http://127.0.0.1:9/v1/traces" }, deps);
      await on.shutdown(100);
      console.log(JSON.stringify({ off, on: [...loaded] }));
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
      cwd: process.cwd(),
      timeout: 60_000,
    });
    const { off, on } = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}");
    assert.deepEqual(off, [], "nothing of the SDK is loaded while tracing is off");
    assert.ok(
      on.includes("sdk-trace") && on.includes("tracing-sdk.ts"),
      `the probe sees the SDK once on: ${on}`,
    );
  });
});
