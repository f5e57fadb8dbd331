/**
 * Who decides whether a request is traced (decision 2862): a caller's unsampled flag
 * (`traceparent …-00`, `b3 …-0`, `x-b3-sampled: 0`) no longer turns tracing off for its own
 * requests. By default the operator's sampler decides (every request, while tracing is on);
 * with `tracing-honour-caller-sampling` the caller's flag is kept for allows, and a deny is
 * traced whatever the flag. Spans go to a local OTLP/HTTP receiver.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { startTracing, type TraceCarrier, type Tracing } from "../../src/observability/tracing.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../helpers/otlp-receiver.ts";

const hex = (bytes: number) => randomBytes(bytes).toString("hex");

/** Unsampled parents as a caller sends them, one per propagation format. */
function unsampledCarriers(): Array<{ format: string; traceId: string; headers: Record<string, string> }> {
  const w3c = hex(16);
  const single = hex(16);
  const multi = hex(16);
  return [
    { format: "traceparent -00", traceId: w3c, headers: { traceparent: `00-${w3c}-${hex(8)}-00` } },
    { format: "b3 -0", traceId: single, headers: { b3: `${single}-${hex(8)}-0` } },
    {
      format: "x-b3-sampled: 0",
      traceId: multi,
      headers: { "x-b3-traceid": multi, "x-b3-spanid": hex(8), "x-b3-sampled": "0" },
    },
  ];
}

const carrierOf =
  (headers: Record<string, string>): TraceCarrier =>
  (name) =>
    headers[name];

/** The trace ids of the server spans the receiver got. */
function exportedTraceIds(receiver: OtlpReceiver): Set<string> {
  const ids = new Set<string>();
  for (const entry of receiver.bodies) {
    if (entry.path !== "/v1/traces") continue;
    const body = entry.body as {
      resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ traceId: string; name: string }> }> }>;
    };
    for (const resource of body.resourceSpans)
      for (const scope of resource.scopeSpans) for (const span of scope.spans) ids.add(span.traceId);
  }
  return ids;
}

async function traced(receiver: OtlpReceiver, honourCallerSampling?: boolean): Promise<Tracing> {
  const tracing = await startTracing(
    {
      url: `${receiver.url}/v1/traces`,
      ...(honourCallerSampling === undefined ? {} : { honourCallerSampling }),
    },
    {
      fetch: (url, init) => fetch(url, init),
      serviceName: "authority-sidecar",
      onExportError: () => undefined,
    },
  );
  assert.ok(tracing);
  return tracing;
}

describe("tracing: the caller's sampled flag", () => {
  let receiver: OtlpReceiver;
  before(async () => {
    receiver = await startOtlpReceiver();
  });
  after(() => receiver.close());

  it("by default does not turn tracing off: allows and denies of unsampled callers are traced", async () => {
    receiver.bodies.length = 0;
    const tracing = await traced(receiver);
    const sent = unsampledCarriers().map((carrier, i) => {
      const span = tracing.open("authority.check", "server", [carrierOf(carrier.headers)]);
      const outbound = span.headers();
      span.end({ "authority.decision": i % 2 === 0 ? "allow" : "deny" });
      return { ...carrier, outbound };
    });
    await tracing.shutdown(10_000);
    const exported = exportedTraceIds(receiver);
    for (const { format, traceId, outbound } of sent) {
      assert.ok(exported.has(traceId), `${format}: the request is traced, in the caller's trace`);
      assert.match(String(outbound.traceparent), /-01$/, `${format}: the upstream sees it sampled`);
    }
  });

  it("when the operator honours the caller's flag: unsampled allows are not traced, unsampled denies are", async () => {
    receiver.bodies.length = 0;
    const tracing = await traced(receiver, true);
    const [allowW3c, denyW3c, denyB3] = unsampledCarriers();
    assert.ok(allowW3c && denyW3c && denyB3);
    const serve = (headers: Record<string, string>, decision: "allow" | "deny") => {
      const span = tracing.open("authority.check", "server", [carrierOf(headers)]);
      span.run(() => tracing.span("authority.decide", () => decision));
      span.end({
        "authority.decision": decision,
        ...(decision === "deny" ? { "authority.reason": "policy_revoked" } : {}),
      });
    };
    serve(allowW3c.headers, "allow");
    serve(denyW3c.headers, "deny");
    serve(denyB3.headers, "deny");
    const sampled = hex(16);
    serve({ traceparent: `00-${sampled}-${hex(8)}-01` }, "allow");
    await tracing.shutdown(10_000);
    const exported = exportedTraceIds(receiver);
    assert.ok(!exported.has(allowW3c.traceId), "an unsampled allow is left untraced, as the caller asked");
    assert.ok(exported.has(denyW3c.traceId), "an unsampled deny is traced (W3C)");
    assert.ok(exported.has(denyB3.traceId), "an unsampled deny is traced (B3)");
    assert.ok(exported.has(sampled), "a sampled allow is traced");
  });

  it("is an operator setting, off by default", () => {
    const base = {
      listen: "127.0.0.1:0",
      "policy-protection": "embedded",
      "tracing-url": "http://127.0.0.1:4318/v1/traces",
    };
    const off = resolveAuthorityConfig({ flags: base, env: {} });
    assert.equal(off.tracing?.honourCallerSampling, false);
    const on = resolveAuthorityConfig({
      flags: base,
      env: { AUTHORITY_TRACING_HONOUR_CALLER_SAMPLING: "true" },
    });
    assert.equal(on.tracing?.honourCallerSampling, true);
  });
});
