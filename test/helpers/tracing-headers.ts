/**
 * An allowed request keeps every tracing header of the caller's mesh (W3C, B3 single and
 * multi, Datadog, SkyWalking, Google Cloud, Envoy's request id), on both sidecar paths and
 * through Envoy (test/servers/sidecar/tracing-headers-attack.test.ts, envoy/envoy.test.ts).
 */
export const TRACING: Record<string, string> = {
  traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
  tracestate: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
  baggage: "userId=alice,serverNode=DF%2028",
  b3: "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
  "x-b3-traceid": "80f198ee56343ba864fe8b2a57d3eff7",
  "x-b3-spanid": "e457b5a2e4d86bd1",
  "x-b3-parentspanid": "05e3ac9a4f6e3b90",
  "x-b3-sampled": "1",
  "x-b3-flags": "1",
  "x-datadog-trace-id": "1234567890123456789",
  "x-datadog-parent-id": "987654321",
  "x-datadog-sampling-priority": "1",
  "x-datadog-origin": "synthetics",
  "x-datadog-tags": "_dd.p.dm=-4",
  sw8: "1-MWYyZDRiZjQ3YmY3MTFlYWI3OTRhY2RlNDgwMDExMjI=-MWU3YzIwNGE3YmY3MTFlYWI4NThhY2RlNDgwMDExMjI=-0-c2VydmljZQ==-aW5zdGFuY2U=-L2FwcA==-MTI3LjAuMC4xOjgwODA=",
  "sw8-correlation": "dGVzdA==:dmFsdWU=",
  "x-cloud-trace-context": "105445aa7843bc8bf206b12000100000/1;o=1",
  "x-request-id": "6f1c3b1e-6e2d-4d8a-9f5e-0c1d2e3f4a5b",
};
