import { ROUTING_OVERRIDE_HEADERS } from "../../execute/routing-overrides.ts";
import type { HeaderBag } from "../../pipeline/request-arguments.ts";

/**
 * Which of a caller's headers the sidecar forwards, the same for ext_authz and the forward
 * proxy (the request as operation arguments is src/pipeline/request-arguments.ts).
 * docs/sidecar.md ("Forwarded request parts") lists the sets;
 * docs/decisions/0501-sidecar-request-enforcement.md says why.
 */

/** Headers forwarded beside the declared ones: content negotiation and tracing. */
export const FORWARDED_HEADERS: ReadonlySet<string> = new Set([
  "accept",
  "accept-language",
  "content-type",
  "user-agent",
  // Tracing context of the meshes and tracers in use: W3C Trace Context and Baggage, B3
  // single-header, SkyWalking, Google Cloud, AWS X-Ray, Jaeger, gRPC, Envoy's request id.
  "traceparent",
  "tracestate",
  "baggage",
  "b3",
  "sw8",
  "sw8-correlation",
  "sw8-x",
  "x-cloud-trace-context",
  "x-amzn-trace-id",
  "uber-trace-id",
  "grpc-trace-bin",
  "x-ot-span-context",
  "x-request-id",
]);

/** Tracing header families: B3 multi-header, Datadog, Jaeger baggage. */
const FORWARDED_PREFIXES: readonly string[] = ["x-b3-", "x-datadog-", "uberctx-"];

/** Never forwarded, whatever the snapshot declares: the caller's credentials and our own namespace. */
const CALLER_CREDENTIALS: ReadonlySet<string> = new Set(["authorization", "proxy-authorization", "cookie"]);

/**
 * ext_authz only: what Envoy itself owns and forwards — pseudo headers, framing and
 * hop-by-hop headers, its own `x-envoy-*` and the forwarding facts it sets
 * (`x-forwarded-for`, `-proto`, `-client-cert`), and `accept-encoding` (Envoy's compression).
 * These are not the caller's inputs and are left to Envoy; everything else undeclared is removed.
 */
const ENVOY_OWNED: ReadonlySet<string> = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "upgrade",
  "expect",
  "accept-encoding",
  "x-forwarded-for",
  "x-forwarded-proto",
  "x-forwarded-client-cert",
]);

/** Never forwarded: credentials, `x-authority-*`, routing overrides. */
export function isNeverForwarded(name: string): boolean {
  return (
    CALLER_CREDENTIALS.has(name) || name.startsWith("x-authority-") || ROUTING_OVERRIDE_HEADERS.has(name)
  );
}

/** Whether the proxy sends this (lower-case) caller header upstream. */
export function isForwarded(name: string, declared: ReadonlySet<string>): boolean {
  if (isNeverForwarded(name)) return false;
  return (
    declared.has(name) || FORWARDED_HEADERS.has(name) || FORWARDED_PREFIXES.some((p) => name.startsWith(p))
  );
}

/**
 * The CheckResponse's `headers_to_remove`: every caller header that is neither forwarded
 * nor Envoy's own, except the names the allow sets (they are overwritten instead).
 */
export function headersToRemove(
  headers: HeaderBag,
  declared: ReadonlySet<string>,
  setByAllow: Readonly<Record<string, string>>,
): string[] {
  const remove: string[] = [];
  for (const raw in headers) {
    if (!Object.hasOwn(headers, raw)) continue;
    const name = raw.toLowerCase();
    if (name.startsWith(":") || Object.hasOwn(setByAllow, name)) continue;
    if (isNeverForwarded(name)) remove.push(name);
    else if (!ENVOY_OWNED.has(name) && !name.startsWith("x-envoy-") && !isForwarded(name, declared))
      remove.push(name);
  }
  return remove;
}
