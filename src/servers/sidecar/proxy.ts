import {
  type ClientRequest,
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { brotliDecompressSync, gunzipSync, inflateSync } from "node:zlib";
import { RECEIPT_HEADER } from "../../audit/receipts.ts";
import {
  applyRedactions,
  type RedactionEvent,
  type RedactionRule,
  sanitizeResponseHeaders,
} from "../../core/redaction.ts";
import { requestIdFrom } from "../../core/request-id.ts";
import { denyOutcome, type ErrorCode, errorCodes } from "../../errors.ts";
import { type EgressPolicy, egressDenialOf } from "../../execute/egress.ts";
import { parseContentType, RedactionDecodeError } from "../../execute/response-body.ts";
import { type ScrubbedBody, scrubAndRedact } from "../../execute/scrub-redact.ts";
import {
  createSecretScrubber,
  injectedSecrets,
  ScrubError,
  type SecretScrubber,
} from "../../execute/secret-scrub.ts";
import { renderUpstreamRequest } from "../../execute/url.ts";
import type { Tracing } from "../../observability/tracing.ts";
import {
  denyForError,
  denyOf,
  type SidecarAllow,
  type SidecarDeny,
  type SidecarEngine,
} from "../../pipeline/check.ts";
import { declaredHeaders, type RequestBody } from "../../pipeline/request-arguments.ts";
import { errorSummary, positiveIntOption, SidecarConfigError } from "./errors.ts";
import { allowHeaders, REQUEST_ID_HEADER } from "./ext-authz.ts";
import type { SidecarMetrics } from "./metrics.ts";
import { guardRequest } from "./request-guard.ts";
import { isForwarded } from "./request-input.ts";
import { tracedProxyRequest, tracedUpstreamCall } from "./tracing.ts";

/**
 * The forward proxy for invoke traffic (`127.0.0.1:15101`). An app sends its upstream calls
 * through it — absolute-form (`GET http://orders.internal/v1/orders/42`, `HTTP_PROXY`) or
 * origin-form with the upstream's `Host` — carrying its own bearer token in
 * `Proxy-Authorization` (or `Authorization`). Each request is decided by the same engine as
 * ext_authz; an allowed one is sent to the **reviewed upstream URL of the operation
 * snapshot** (never to the host the app named), with the auth profile's credentials
 * injected. The request body (JSON, up to `maxRequestBytes`) is read before the decision, so
 * the engine checks path parameters, query, declared headers and body against the snapshot's
 * input schema and constraints; upstream goes only what was checked: the validated query,
 * the declared headers plus the forwarded set (request-input.ts), the body re-serialized.
 * The caller's credentials, cookies, `x-authority-*` and routing-override headers never go.
 *
 * Responses: sensitive and hop-by-hop headers are dropped, and so is any header that holds
 * an injected credential (src/execute/secret-scrub.ts). Every body is buffered up to
 * `maxResponseBytes` (decoded), scrubbed of injected credentials in every decoded view,
 * redacted with the same rules as the executor (a body that must be redacted but is not
 * JSON, or from which a client could read a sensitive member, is **502 redaction_failed**),
 * and sent with a fresh Content-Length. Over the bound the answer is **502 upstream_error**:
 * nothing of the body is sent, never an unscrubbed or unredacted one. A content coding the
 * proxy cannot decode is **502 scrub_failed**. CONNECT and upgrades are refused: a tunnel
 * could not be inspected.
 */

export interface ForwardProxyOptions {
  readonly engine: SidecarEngine;
  readonly metrics?: SidecarMetrics;
  /** Deadline for the decision (`--proxy-decision-timeout-ms`); past it the answer is 503. */
  readonly decisionTimeoutMs: number;
  /** Deadline for the upstream's response headers and its whole body (`--upstream-timeout-ms`). */
  readonly upstreamTimeoutMs: number;
  /** Largest response body, decoded bytes, read whole before anything is sent (`--max-response-bytes`). */
  readonly maxResponseBytes: number;
  /** Largest request body read for validation (`--max-request-bytes`); over it the answer is 413. */
  readonly maxRequestBytes: number;
  /** Sockets per upstream origin (default 256). */
  readonly maxSockets?: number;
  readonly logger: { warn(obj: Record<string, unknown>, msg: string): void };
  /** Checks every upstream connection on the address it reaches (docs/security.md, "Egress"). */
  readonly egress: EgressPolicy;
  /** Spans of each request and its upstream call (sidecar/tracing.ts); absent: none. */
  readonly tracing?: Tracing;
}

export interface ForwardProxy {
  listen(address: { host: string; port: number }): Promise<{ port: number }>;
  /** Stops accepting, lets in-flight exchanges finish for up to graceMs, then cuts connections. */
  close(options?: { graceMs?: number }): Promise<void>;
  readonly inFlight: number;
  readonly server: Server;
}

/** The capability the app asks for (like Envoy's context_extensions); removed before forwarding. */
export const CAPABILITY_HEADER = "x-authority-capability";

/** `scheme://authority` of an absolute-form request target (RFC 9112 §3.2.2). */
const ABSOLUTE_FORM_AUTHORITY = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#\\]*/;

/** Thrown while reading a request body over the bound. */
class RequestTooLarge extends Error {}

const NO_BODY_STATUSES: ReadonlySet<number> = new Set([204, 304]);
const NO_RULES: readonly RedactionRule[] = Object.freeze([]);

interface Exchange {
  readonly decision: SidecarAllow;
  readonly rules: readonly RedactionRule[];
  readonly scrubber: SecretScrubber;
  readonly method: string;
  sentAt: number;
  proxyReq: ClientRequest | undefined;
  timer: NodeJS.Timeout | undefined;
  timedOut: boolean;
  settled: boolean;
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? undefined : value;
}

function mediaType(contentType: string | undefined): string {
  return (contentType?.split(";")[0] ?? "").trim().toLowerCase();
}

const DECODABLE_CODINGS: ReadonlySet<string> = new Set(["", "identity", "gzip", "x-gzip", "deflate", "br"]);

function decodeBody(bytes: Buffer, encoding: string, max: number): Buffer | undefined {
  const options = { maxOutputLength: max };
  switch (encoding) {
    case "":
    case "identity":
      return bytes;
    case "gzip":
    case "x-gzip":
      return gunzipSync(bytes, options);
    case "deflate":
      return inflateSync(bytes, options);
    case "br":
      return brotliDecompressSync(bytes, options);
    default:
      return undefined;
  }
}

/** The caller's headers that may go upstream: the declared ones and the forwarded set (request-input.ts). */
function forwardedHeaders(headers: IncomingHttpHeaders, declared: ReadonlySet<string>): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    // content-type belongs to the body, which is re-serialized: set with it below.
    if (!Object.hasOwn(headers, name) || name === "content-type" || !isForwarded(name, declared)) continue;
    // Defined as an own property: a hostile `__proto__` header stays a plain (dropped-by-Node) name.
    Object.defineProperty(out, name, {
      value: headers[name],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/** The validated query, rendered: the upstream sees exactly the values that were checked. */
function renderQuery(target: URL, query: Readonly<Record<string, unknown>>): void {
  for (const name in query) {
    if (!Object.hasOwn(query, name)) continue;
    const value = query[name];
    for (const item of Array.isArray(value) ? value : [value]) {
      target.searchParams.append(name, typeof item === "string" ? item : JSON.stringify(item));
    }
  }
}

/** RFC 9112 §6.3: a request with neither Content-Length nor Transfer-Encoding has no body. */
function hasBody(headers: IncomingHttpHeaders): boolean {
  return (
    headers["transfer-encoding"] !== undefined ||
    (headers["content-length"] !== undefined && headers["content-length"] !== "0")
  );
}

/**
 * The headers the proxy sets on every answer about a decision: its request id and the receipt
 * of its record (decision 2865; the Check path's answer carries it the same way), which
 * replaces whatever an upstream sent under that name.
 */
function decisionHeaders(decision: {
  readonly requestId: string;
  readonly receipt?: string;
}): Record<string, string> {
  return decision.receipt === undefined
    ? { [REQUEST_ID_HEADER]: decision.requestId }
    : { [REQUEST_ID_HEADER]: decision.requestId, [RECEIPT_HEADER]: decision.receipt };
}

/** An upstream's response headers without a receipt of its own: only the proxy's names a record. */
function withoutUpstreamReceipt<H extends Record<string, unknown>>(headers: H): H {
  if (!Object.hasOwn(headers, RECEIPT_HEADER)) return headers;
  const copy = { ...headers };
  delete copy[RECEIPT_HEADER];
  return copy;
}

export function createForwardProxy(options: ForwardProxyOptions): ForwardProxy {
  if (typeof options?.engine?.authorize !== "function") throw new SidecarConfigError("engine is required");
  const { engine, metrics, logger } = options;
  const decisionTimeoutMs = positiveIntOption(options.decisionTimeoutMs, undefined, "decisionTimeoutMs");
  const upstreamTimeoutMs = positiveIntOption(options.upstreamTimeoutMs, undefined, "upstreamTimeoutMs");
  const maxResponseBytes = positiveIntOption(options.maxResponseBytes, undefined, "maxResponseBytes");
  const maxSockets = positiveIntOption(options.maxSockets, 256, "maxSockets");
  const maxRequestBytes = positiveIntOption(options.maxRequestBytes, undefined, "maxRequestBytes");
  // Each new upstream connection is checked by the egress policy (a kept-alive one was checked when opened).
  const { egress, tracing } = options;
  if (typeof egress?.httpClient !== "function") throw new SidecarConfigError("egress is required");
  const agentOptions = { keepAlive: true, maxSockets, maxFreeSockets: 64, scheduling: "lifo" } as const;
  const upstreams = egress.httpClient(agentOptions);
  const sockets = new Set<Socket>();
  let inFlight = 0;
  let closing: Promise<void> | undefined;
  let drained: (() => void) | undefined;

  const finished = (): void => {
    inFlight--;
    if (inFlight === 0) drained?.();
  };

  /** The reason the proxy answered a request with itself (a deny or a failure after the allow). */
  const refusals = new WeakMap<ServerResponse, ErrorCode>();

  const send = (
    res: ServerResponse,
    status: number,
    body: { readonly status: string; readonly reason?: string; readonly requestId?: string },
    headers: Readonly<Record<string, string>> = {},
  ): void => {
    // Whatever the proxy answers itself carries a reason: the record of the request says so.
    if (typeof body.reason === "string") refusals.set(res, body.reason as ErrorCode);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const text = JSON.stringify(body);
    res.writeHead(status, {
      ...headers,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(text),
      "cache-control": "no-store",
    });
    res.end(text);
  };

  const sendDeny = (res: ServerResponse, deny: SidecarDeny): void => {
    send(res, deny.httpStatus, denyOutcome(deny.reason, deny.requestId, deny.explanation), {
      ...deny.headers,
      ...decisionHeaders(deny),
    });
  };

  /** A failure after the allow (upstream down, too large, …): never a partial or unredacted body. */
  const fail = (res: ServerResponse, exchange: Exchange, reason: ErrorCode): void => {
    if (exchange.settled) return;
    exchange.settled = true;
    if (exchange.timer !== undefined) clearTimeout(exchange.timer);
    const requestId = exchange.decision.requestId;
    send(
      res,
      errorCodes[reason].status,
      { status: "error", reason, requestId },
      decisionHeaders(exchange.decision),
    );
  };

  type Decision = SidecarAllow | SidecarDeny;

  /** The whole request body, bounded: it is validated before anything is sent upstream. */
  const readRequestBody = (req: IncomingMessage): Promise<Buffer> =>
    new Promise((resolve, reject) => {
      const declared = Number(req.headers["content-length"]);
      if (Number.isFinite(declared) && declared > maxRequestBytes) {
        reject(new RequestTooLarge());
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      // A body that trickles in holds a connection: it has the upstream deadline to arrive.
      const timer = setTimeout(() => {
        req.off("data", onData);
        req.pause();
        reject(new Error("request body deadline"));
      }, upstreamTimeoutMs);
      const onData = (chunk: Buffer): void => {
        size += chunk.length;
        if (size > maxRequestBytes) {
          clearTimeout(timer);
          req.off("data", onData);
          req.pause();
          reject(new RequestTooLarge());
          return;
        }
        chunks.push(chunk);
      };
      req.on("data", onData);
      req.once("end", () => {
        clearTimeout(timer);
        resolve(Buffer.concat(chunks));
      });
      req.once("error", (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });

  /** The decision, synchronously when everything it needs is cached; else a promise bounded by the deadline. */
  const decide = (
    req: IncomingMessage,
    requestId: string,
    body: RequestBody,
  ): Decision | Promise<Decision> => {
    let host = single(req.headers.host) ?? "";
    let path = req.url ?? "";
    if (!path.startsWith("/")) {
      // Absolute-form (RFC 9112 §3.2.2): the app addressed the upstream through us.
      // The path is taken as sent, not as WHATWG URL parsing resolves it (`%2E`, `..`, `\`):
      // the decision sees the same path as on ext_authz and in origin-form, and refuses alike.
      const authority = ABSOLUTE_FORM_AUTHORITY.exec(path);
      try {
        if (authority === null) throw new Error("not absolute-form");
        host = new URL(authority[0]).host;
      } catch {
        return denyOf("invalid_request", requestId);
      }
      const rest = path.slice(authority[0].length);
      path = rest.startsWith("/") ? rest : `/${rest}`;
    }
    const authorization = single(req.headers["proxy-authorization"]) ?? single(req.headers.authorization);
    const answered = new AbortController();
    const decided = engine.decide({
      transport: "proxy",
      authorization,
      capabilityId: single(req.headers[CAPABILITY_HEADER]),
      host,
      method: req.method ?? "",
      path,
      headers: req.headers,
      body,
      requestId,
      signal: answered.signal,
    });
    if (!(decided instanceof Promise)) return decided;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        answered.abort();
        resolve(denyOf("upstream_unavailable", requestId));
      }, decisionTimeoutMs);
      decided.then(
        (decision) => {
          clearTimeout(timer);
          resolve(decision);
        },
        (error: unknown) => {
          clearTimeout(timer);
          resolve(denyForError(error, requestId));
        },
      );
    });
  };

  /**
   * The operation's and the policy entry's response rules together, checked once: both come
   * from the verified policy (the same objects while it is cached), so the combination is
   * kept per pair instead of being built and checked on every request.
   */
  const checkedRules = new WeakMap<
    readonly RedactionRule[],
    WeakMap<readonly RedactionRule[], readonly RedactionRule[]>
  >();
  const rulesFor = (decision: SidecarAllow): readonly RedactionRule[] => {
    const operationRules = decision.operation.response_rules;
    // decide() answers "no policy rules" with a fresh empty array: one key stands for all of them.
    const policyRules = decision.redactions.length === 0 ? NO_RULES : decision.redactions;
    let byPolicy = checkedRules.get(operationRules);
    const known = byPolicy?.get(policyRules);
    if (known !== undefined) return known;
    const rules = policyRules === NO_RULES ? operationRules : [...operationRules, ...policyRules];
    // A malformed rule stops the call before it has side effects upstream (throws).
    if (rules.length > 0) applyRedactions(null, rules);
    if (byPolicy === undefined) {
      byPolicy = new WeakMap();
      checkedRules.set(operationRules, byPolicy);
    }
    byPolicy.set(policyRules, rules);
    return rules;
  };

  /**
   * One scrubber per credentials object: the engine hands out the same object while the
   * credentials are cached, so the patterns are built once per credential, not per request.
   */
  const scrubbers = new WeakMap<object, SecretScrubber>();
  const scrubberFor = (decision: SidecarAllow): SecretScrubber => {
    const known = scrubbers.get(decision.credentials);
    if (known !== undefined) return known;
    // A credential too short to scrub throws (SecretTooShortError): refused before sending.
    const scrubber = createSecretScrubber(injectedSecrets(decision.credentials));
    scrubbers.set(decision.credentials, scrubber);
    return scrubber;
  };

  const forward = (req: IncomingMessage, res: ServerResponse, decision: SidecarAllow): void => {
    let rules: readonly RedactionRule[];
    let scrubber: SecretScrubber;
    let target: URL;
    let body: Buffer | undefined;
    try {
      rules = rulesFor(decision);
      try {
        scrubber = scrubberFor(decision);
      } catch {
        sendDeny(res, denyOf("upstream_unavailable", decision.requestId));
        return;
      }
      // Rendered, then matched again: it must still be the allowed permission (ambiguous_path).
      target = renderUpstreamRequest(
        {
          capability: decision.capability,
          permissionId: decision.permissionId,
          operation: decision.operation,
        },
        { path: decision.params },
      );
      renderQuery(target, decision.input.query);
      for (const [name, value] of Object.entries(decision.credentials.query))
        target.searchParams.set(name, value);
      // What was validated, re-serialized: no duplicate key or other spelling reaches the upstream.
      body = decision.input.hasBody ? Buffer.from(JSON.stringify(decision.input.body), "utf8") : undefined;
    } catch (error) {
      sendDeny(res, denyForError(error, decision.requestId));
      return;
    }
    const exchange: Exchange = {
      decision,
      rules,
      scrubber,
      method: req.method ?? "GET",
      sentAt: performance.now(),
      proxyReq: undefined,
      timer: undefined,
      timedOut: false,
      settled: false,
    };
    exchange.timer = setTimeout(() => {
      exchange.timedOut = true;
      exchange.proxyReq?.destroy(new Error("upstream deadline"));
      metrics?.upstream("timeout", (performance.now() - exchange.sentAt) / 1000);
      fail(res, exchange, "upstream_timeout");
    }, upstreamTimeoutMs);
    // The caller went away: stop the upstream call too.
    res.on("close", () => {
      if (exchange.timer !== undefined) clearTimeout(exchange.timer);
      if (!res.writableFinished) exchange.proxyReq?.destroy();
    });
    const https = target.protocol === "https:";
    const hostname = target.hostname.startsWith("[") ? target.hostname.slice(1, -1) : target.hostname;
    const headers = forwardedHeaders(req.headers, declaredHeaders(decision.operation));
    for (const [name, value] of Object.entries(allowHeaders(decision))) headers[name] = value;
    headers.host = target.host;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      headers["content-length"] = body.length;
    }
    // An encoded answer must be decoded before it can be scrubbed: ask for none.
    headers["accept-encoding"] = "identity";
    const endUpstreamSpan = tracedUpstreamCall(tracing, headers);
    let proxyReq: ClientRequest;
    try {
      proxyReq = upstreams.request({
        protocol: target.protocol,
        hostname,
        port: target.port === "" ? (https ? 443 : 80) : Number(target.port),
        path: `${target.pathname}${target.search}`,
        method: exchange.method,
        headers,
      });
    } catch (error) {
      // Header values Node refuses (e.g. a credential with a control character) never leave.
      endUpstreamSpan(undefined, "invalid_request");
      upstreamFailed(res, exchange, error as Error);
      return;
    }
    exchange.proxyReq = proxyReq;
    proxyReq.on("response", (proxyRes: IncomingMessage) => {
      endUpstreamSpan(proxyRes.statusCode);
      onUpstreamResponse(exchange, proxyRes, res);
    });
    proxyReq.on("error", (error: Error) => {
      endUpstreamSpan(undefined, error.name);
      upstreamFailed(res, exchange, error);
    });
    proxyReq.end(body);
  };

  const upstreamFailed = (res: ServerResponse, exchange: Exchange, error: Error): void => {
    if (exchange.settled) return;
    const denial = egressDenialOf(error);
    if (denial !== undefined) {
      // Refused on connect: nothing (credentials included) was sent.
      metrics?.proxyResponse("failed");
      logger.warn(
        { requestId: exchange.decision.requestId, rule: denial.rule },
        "upstream refused by the egress policy",
      );
      exchange.settled = true;
      if (exchange.timer !== undefined) clearTimeout(exchange.timer);
      sendDeny(res, denyOf("egress_denied", exchange.decision.requestId));
      return;
    }
    metrics?.upstream("error", (performance.now() - exchange.sentAt) / 1000);
    metrics?.proxyResponse("failed");
    const code = (error as { code?: unknown }).code;
    logger.warn(
      { requestId: exchange.decision.requestId, code: typeof code === "string" ? code : error.name },
      "upstream call failed",
    );
    fail(res, exchange, "upstream_unavailable");
  };

  /** Sensitive, hop-by-hop and secret-bearing headers removed; the events of both. */
  const safeHeaders = (exchange: Exchange, proxyRes: IncomingMessage) => {
    const sanitized = sanitizeResponseHeaders(proxyRes.headers);
    if (exchange.scrubber.empty) return sanitized;
    const events = [...sanitized.events];
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(sanitized.headers)) {
      if (exchange.scrubber.headerHoldsSecret(name, value)) {
        events.push({ path: name, mode: "remove", source: "secret" });
        continue;
      }
      Object.defineProperty(headers, name, { value, enumerable: true, writable: true, configurable: true });
    }
    return { headers, events };
  };

  const refuse = (
    res: ServerResponse,
    exchange: Exchange,
    reason: "redaction_failed" | "scrub_failed",
  ): void => {
    metrics?.proxyResponse("refused");
    fail(res, exchange, reason);
  };

  /** The scrubbed, redacted body to send, or the reason it is refused. */
  const finalBody = (
    exchange: Exchange,
    body: Buffer,
    contentType: string | undefined,
  ):
    | {
        readonly out: Buffer;
        readonly events: RedactionEvent[];
        readonly json: boolean;
        readonly contentType?: string;
      }
    | "redaction_failed"
    | "scrub_failed"
    | "too_large" => {
    let read: ScrubbedBody;
    try {
      read = scrubAndRedact(body, contentType, exchange.rules, exchange.scrubber);
    } catch (error) {
      if (error instanceof ScrubError) return "scrub_failed";
      // Past the JSON limits (core/bounded-json.ts): refused like a body past the size bound.
      if (error instanceof RedactionDecodeError)
        return error.issue === "too_complex" ? "too_large" : "redaction_failed";
      throw error;
    }
    const { events } = read;
    if (read.kind === "empty") return { out: body.subarray(0, 0), events, json: false };
    if (read.kind === "other") return { out: read.bytes, events, json: false };
    const { mediaType: type } = parseContentType(contentType);
    if (read.kind === "ndjson") {
      const lines = read.values.map((value) => JSON.stringify(value));
      return {
        out: Buffer.from(lines.length === 0 ? "" : `${lines.join("\n")}\n`, "utf8"),
        events,
        json: true,
        contentType: `${type}; charset=utf-8`,
      };
    }
    const out = Buffer.from(JSON.stringify(read.value), "utf8");
    // Re-serialized as UTF-8 without a BOM: a declared other charset would now be false.
    return read.plainUtf8
      ? { out, events, json: true }
      : { out, events, json: true, contentType: `${type === "" ? "application/json" : type}; charset=utf-8` };
  };

  const respondBuffered = (exchange: Exchange, proxyRes: IncomingMessage, res: ServerResponse): void => {
    const declared = Number(proxyRes.headers["content-length"]);
    const tooLarge = (): void => {
      proxyRes.destroy();
      metrics?.proxyResponse("too_large");
      fail(res, exchange, "upstream_error");
    };
    if (Number.isFinite(declared) && declared > maxResponseBytes) {
      tooLarge();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    proxyRes.on("data", (chunk: Buffer) => {
      if (exchange.settled) return;
      size += chunk.length;
      if (size > maxResponseBytes) {
        tooLarge();
        return;
      }
      chunks.push(chunk);
    });
    proxyRes.on("error", () => {
      metrics?.proxyResponse("failed");
      fail(res, exchange, "upstream_error");
    });
    proxyRes.on("end", () => complete(exchange, proxyRes, res, chunks));
  };

  /** A whole (still encoded) body: decoded, scrubbed, redacted where it applies, sent or refused. */
  const complete = (
    exchange: Exchange,
    proxyRes: IncomingMessage,
    res: ServerResponse,
    chunks: readonly Buffer[],
  ): void => {
    if (exchange.settled) return;
    const tooLarge = (): void => {
      metrics?.proxyResponse("too_large");
      fail(res, exchange, "upstream_error");
    };
    let body: Buffer | undefined;
    try {
      body = decodeBody(
        Buffer.concat(chunks),
        mediaType(single(proxyRes.headers["content-encoding"])),
        maxResponseBytes,
      );
    } catch (error) {
      if ((error as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") {
        tooLarge();
        return;
      }
      body = undefined;
    }
    if (body === undefined) {
      metrics?.proxyResponse("failed");
      fail(res, exchange, "upstream_error");
      return;
    }
    const sanitized = safeHeaders(exchange, proxyRes);
    delete sanitized.headers["content-encoding"];
    let result: ReturnType<typeof finalBody>;
    try {
      result = finalBody(exchange, body, single(proxyRes.headers["content-type"]));
    } catch {
      metrics?.proxyResponse("failed");
      fail(res, exchange, "upstream_error");
      return;
    }
    if (result === "too_large") {
      tooLarge();
      return;
    }
    if (typeof result === "string") {
      refuse(res, exchange, result);
      return;
    }
    exchange.settled = true;
    if (exchange.timer !== undefined) clearTimeout(exchange.timer);
    const events = [...sanitized.events, ...result.events];
    metrics?.redactions(events);
    metrics?.proxyResponse(result.json ? "redacted" : "passed");
    res.writeHead(proxyRes.statusCode ?? 502, {
      ...withoutUpstreamReceipt(sanitized.headers),
      ...(result.contentType === undefined ? {} : { "content-type": result.contentType }),
      "content-length": result.out.length,
      ...decisionHeaders(exchange.decision),
    });
    res.end(result.out);
  };

  const onUpstreamResponse = (exchange: Exchange, proxyRes: IncomingMessage, res: ServerResponse): void => {
    if (exchange.settled) {
      proxyRes.resume();
      return;
    }
    metrics?.upstream("response", (performance.now() - exchange.sentAt) / 1000);
    const status = proxyRes.statusCode ?? 502;
    if (exchange.method === "HEAD" || NO_BODY_STATUSES.has(status)) {
      exchange.settled = true;
      if (exchange.timer !== undefined) clearTimeout(exchange.timer);
      const sanitized = safeHeaders(exchange, proxyRes);
      metrics?.redactions(sanitized.events);
      metrics?.proxyResponse("passed");
      res.writeHead(status, {
        ...withoutUpstreamReceipt(sanitized.headers),
        ...decisionHeaders(exchange.decision),
      });
      res.end();
      proxyRes.resume();
      return;
    }
    const encoding = mediaType(single(proxyRes.headers["content-encoding"]));
    if (!DECODABLE_CODINGS.has(encoding)) {
      // A coding it cannot decode could hide a credential from the scrubber: refused.
      proxyRes.destroy();
      refuse(res, exchange, "scrub_failed");
      return;
    }
    // Every body is read whole (bounded) before anything of it is sent: an encoded credential
    // or a member a client could read can be anywhere in it (decision 2505).
    respondBuffered(exchange, proxyRes, res);
  };

  const handle = (req: IncomingMessage, res: ServerResponse, requestId: string): void => {
    const started = performance.now();
    const decided = (decision: Decision): void => {
      const seconds = (performance.now() - started) / 1000;
      metrics?.decision(
        "proxy",
        decision.allow ? "allow" : "deny",
        decision.allow ? null : decision.reason,
        seconds,
      );
      if (!decision.allow) {
        sendDeny(res, decision);
        return;
      }
      // The allow's record says what became of it: any refusal the proxy answered after the
      // decision (schema, constraints, egress, upstream, redaction…) is recorded as that deny.
      res.once("close", () => decision.settle?.(refusals.get(res) ?? null));
      try {
        forward(req, res, decision);
      } catch (error) {
        // A fault after the allow fails this request closed (recorded as that deny), never the process.
        logger.warn({ requestId, err: errorSummary(error) }, "forwarding failed");
        sendDeny(res, denyForError(error, decision.requestId));
      }
    };
    const withBody = (body: RequestBody): void => {
      let decision: Decision | Promise<Decision>;
      try {
        decision = decide(req, requestId, body);
      } catch (error) {
        decision = denyForError(error, requestId);
      }
      if (!(decision instanceof Promise)) {
        decided(decision);
        return;
      }
      decision.then(decided, (error: unknown) => {
        metrics?.decision("proxy", "error", "internal", (performance.now() - started) / 1000);
        sendDeny(res, denyForError(error, requestId));
      });
    };
    if (!hasBody(req.headers)) {
      req.resume();
      withBody({ state: "complete", bytes: "" });
      return;
    }
    readRequestBody(req).then(
      (bytes) => withBody({ state: "complete", bytes }),
      (error: unknown) => {
        const deny = denyOf(
          error instanceof RequestTooLarge ? "payload_too_large" : "invalid_request",
          requestId,
        );
        metrics?.decision("proxy", "deny", deny.reason, (performance.now() - started) / 1000);
        // The rest of an oversized body is not read: the connection goes with the answer.
        res.shouldKeepAlive = false;
        sendDeny(res, deny);
      },
    );
  };

  const server = createServer((req, res) => {
    inFlight++;
    res.once("close", finished);
    const requestId = requestIdFrom(req.headers["x-request-id"]);
    // An exception nothing caught, anywhere in this exchange: this request fails closed (request-guard.ts).
    guardRequest(
      () => {
        if (!res.writableEnded) sendDeny(res, denyOf("internal", requestId));
      },
      () => tracedProxyRequest(tracing, req, res, () => handle(req, res, requestId)),
    );
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  // Tunnels and upgrades cannot be inspected or redacted: refused.
  server.on("connect", (_req: IncomingMessage, socket: Socket) => {
    socket.end("HTTP/1.1 405 Method Not Allowed\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
  });
  server.on("upgrade", (_req: IncomingMessage, socket: Socket) => {
    socket.end("HTTP/1.1 501 Not Implemented\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
  });
  server.keepAliveTimeout = 5000;
  server.headersTimeout = 10_000;
  server.requestTimeout = 0;

  return {
    server,
    get inFlight() {
      return inFlight;
    },
    listen({ host, port }) {
      return new Promise((resolve, reject) => {
        const onError = (error: Error) =>
          reject(new SidecarConfigError(`cannot listen on ${host}:${port}`, { cause: error }));
        server.once("error", onError);
        server.listen(port, host, () => {
          server.off("error", onError);
          resolve({ port: (server.address() as AddressInfo).port });
        });
      });
    },
    close({ graceMs = 5000 } = {}) {
      if (closing !== undefined) return closing;
      closing = new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(force);
          for (const socket of sockets) socket.destroy();
          upstreams.destroy();
          resolve();
        };
        const force = setTimeout(done, graceMs);
        server.close();
        server.closeIdleConnections();
        if (inFlight === 0) done();
        else drained = done;
      });
      return closing;
    },
  };
}
