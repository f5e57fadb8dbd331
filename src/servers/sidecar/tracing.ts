/**
 * The sidecar's spans around its transports (decision 2741); the stages inside (token, policy
 * load, decide) open theirs through `traced` (src/observability/tracing.ts).
 *
 * - ext_authz: a server span per Check whose parent is Envoy's own span (the trace headers of
 *   the Check call's gRPC metadata, present when Envoy traces), else the trace context of the
 *   checked request's headers. An allow sets the Check span's context as the request's trace
 *   headers, so the upstream's span is the Check's child.
 * - forward proxy: a server span per request (parent: the request's trace headers) ending when
 *   the answer is sent, and a client span around the upstream call whose context the upstream
 *   request carries.
 *
 * Without tracing every function here hands back what it was given.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { OpenSpan, SpanOutcome, TraceCarrier, Tracing } from "../../observability/tracing.ts";
import type { HeaderBag } from "../../pipeline/request-arguments.ts";
import type { CallMetadata, CheckDecision, CheckFunction } from "./grpc/types.ts";

function metadataCarrier(metadata: CallMetadata | undefined): TraceCarrier {
  return (name) => {
    const value = metadata?.get(name)[0];
    return typeof value === "string" ? value : undefined;
  };
}

export function headerCarrier(headers: HeaderBag): TraceCarrier {
  return (name) => {
    const value = headers[name];
    return typeof value === "string" ? value : value?.[0];
  };
}

function checkOutcome(decision: CheckDecision): SpanOutcome {
  return decision.allow
    ? { "authority.decision": "allow", "http.response.status_code": 200 }
    : {
        "authority.decision": "deny",
        "authority.reason": decision.reason,
        "http.response.status_code": decision.httpStatus,
      };
}

/** An allow that also sets the Check span's trace headers on the request (none of them removed). */
function withTraceHeaders(decision: CheckDecision, span: OpenSpan): CheckDecision {
  if (!decision.allow) return decision;
  const trace = span.headers();
  return {
    ...decision,
    headersToSet: { ...decision.headersToSet, ...trace },
    headersToRemove: decision.headersToRemove.filter((name) => !Object.hasOwn(trace, name)),
  };
}

/** The Check in a server span (see above); `check` itself without tracing. */
export function tracedCheck(tracing: Tracing | undefined, check: CheckFunction): CheckFunction {
  if (tracing === undefined) return check;
  return (input, signal, metadata) => {
    const span = tracing.open("authority.check", "server", [
      metadataCarrier(metadata),
      headerCarrier(input.headers),
    ]);
    const finish = (decision: CheckDecision): CheckDecision => {
      const traced = withTraceHeaders(decision, span);
      span.end(checkOutcome(traced));
      return traced;
    };
    const fail = (error: unknown): never => {
      span.end(undefined, error instanceof Error ? error.name : "unknown");
      throw error;
    };
    try {
      const decision = span.run(() => check(input, signal, metadata));
      return decision instanceof Promise ? decision.then(finish, fail) : finish(decision);
    } catch (error) {
      return fail(error);
    }
  };
}

/** `handle` in a server span for one proxied request, ended when its answer is sent. */
export function tracedProxyRequest(
  tracing: Tracing | undefined,
  req: IncomingMessage,
  res: ServerResponse,
  handle: () => void,
): void {
  if (tracing === undefined) {
    handle();
    return;
  }
  const span = tracing.open("authority.proxy", "server", [headerCarrier(req.headers)]);
  res.once("close", () =>
    span.end(
      { "http.response.status_code": res.statusCode },
      res.writableFinished ? undefined : "connection_closed",
    ),
  );
  span.run(() => {
    // The body is read by events: its listeners continue in this span.
    tracing.bind(req);
    handle();
  });
}

/**
 * A client span for the upstream call about to be sent with `headers`, which get its trace
 * headers; the returned function ends it with the upstream's status or a failure's code.
 */
export function tracedUpstreamCall(
  tracing: Tracing | undefined,
  headers: OutgoingHttpHeaders,
): (status: number | undefined, failure?: string) => void {
  if (tracing === undefined) return () => undefined;
  const span = tracing.open("authority.upstream", "client");
  Object.assign(headers, span.headers());
  return (status, failure) =>
    span.end(status === undefined ? undefined : { "http.response.status_code": status }, failure);
}
