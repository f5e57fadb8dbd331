import { createHash } from "node:crypto";
import { LRUCache } from "lru-cache";
import { hashCanonical } from "../core/canonical-json.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import type { ConstraintRollout } from "../core/parameter-constraints.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import {
  applyRedactions,
  type HeaderValue,
  type RedactionEvent,
  type RedactionRule,
  reportedEvents,
  sanitizeResponseHeaders,
} from "../core/redaction.ts";
import { traced, traceHeaders } from "../observability/tracing.ts";
import {
  type AuthInjector,
  createAuthInjector,
  type EndUser,
  type InjectedCredentials,
} from "./auth-injector.ts";
import type { AuthProfile, SecretResolver } from "./auth-profiles.ts";
import { BodyTooLargeError, readBoundedBody, readBoundedReply } from "./bounded-body.ts";
import type { ClientCredentialsTokens } from "./client-credentials.ts";
import { type EgressPolicy, egressDenialOf, type FetchLike } from "./egress.ts";
import { ExecutionError, type UpstreamError } from "./errors.ts";
import type { OAuthUserClient } from "./oauth-user.ts";
import type { PreparedUpstreamRequest } from "./prepare.ts";
import { RedactionDecodeError } from "./response-body.ts";
import { scrubAndRedact } from "./scrub-redact.ts";
import {
  createSecretScrubber,
  injectedSecrets,
  ScrubError,
  type SecretScrubber,
  SecretTooShortError,
} from "./secret-scrub.ts";
import type { TokenExchangeTokens } from "./token-exchange.ts";

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

export interface ConstraintsRolloutOptions {
  /** The environment enables parameter scoping. */
  readonly enabled: boolean;
  /** Whether the policy-owner partner is on the parameter-scoping allowlist. */
  isPartnerAllowlisted(partnerId: string): boolean | Promise<boolean>;
}

export interface ExecutorOptions {
  /** Deadline of one upstream call (headers and whole body, 401 retry included); default 10 s. */
  readonly timeoutMs?: number;
  /** Largest upstream body kept (decoded bytes); over it the call fails; default 1 MiB. */
  readonly maxResponseBytes?: number;
  /**
   * Default: the egress gate's `request` (undici, keep-alive connection pool; decoded as fetch
   * decodes); a given fetch is used instead, with the gate's dispatcher.
   */
  readonly fetch?: FetchLike;
  readonly secretResolver: SecretResolver;
  readonly constraintsRollout: ConstraintsRolloutOptions;
  /** Checks every upstream and token-endpoint connection (passed to fetch as its `dispatcher`). */
  readonly egress: EgressPolicy;
  /**
   * The process's client-credentials token cache, shared with its other users (one token per
   * grant per process), built by the composition root on the egress gate's fetch.
   */
  readonly clientCredentials: ClientCredentialsTokens;
  /** The process's user-OAuth client (one refresh in flight per grant across the process). */
  readonly oauthUser: OAuthUserClient;
  /** The process's exchanged-token cache (RFC 8693). */
  readonly tokenExchange: TokenExchangeTokens;
}

/** What the executor needs from a verified operation snapshot. */
export type ExecutableOperation = Pick<
  OperationSnapshot,
  | "method"
  | "input_schema"
  | "upstream_url_template"
  | "response_rules"
  | "parameter_constraints"
  | "mcp_tool"
> &
  Partial<Pick<OperationSnapshot, "response_schema">>;

/**
 * An upstream call whose request is already prepared (src/execute/prepare.ts): what the
 * enforcement pipeline hands the executor after its own input, constraint and re-match stages.
 */
export interface SendRequest {
  readonly snapshot: ExecutableOperation;
  readonly prepared: PreparedUpstreamRequest;
  /** The profile the snapshot's auth_profile_ref names, resolved by the caller. */
  readonly authProfile: AuthProfile;
  /** The policy's response redactions for this permission ID. */
  readonly redactions?: readonly RedactionRule[];
  /** Trusted headers added by the server (request id, authority envelope); never credentials. */
  readonly extraHeaders?: Readonly<Record<string, string>> | PromiseLike<Readonly<Record<string, string>>>;
  /** Whom the call is made for: whose grant (oauth_user) or token (token exchange) is used. */
  readonly endUser?: EndUser;
  readonly signal?: AbortSignal;
}

export interface ExecutionResult {
  readonly status: number;
  /** Lower-case names; sensitive and hop-by-hop headers removed. */
  readonly headers: Record<string, string | string[]>;
  /** Parsed JSON (redacted) when the upstream sent JSON, otherwise text; null when empty. */
  readonly body: unknown;
  readonly redactionEvents: RedactionEvent[];
  readonly timings: { readonly totalMs: number; readonly upstreamMs: number };
  /** sha256 of the canonical request (method, URL and headers before auth injection, body). */
  readonly requestHash: string;
  /** sha256 of the canonical returned response (status, safe headers, redacted body). */
  readonly responseHash: string;
  /** Set for upstream 4xx/5xx answers. */
  readonly upstreamError?: UpstreamError;
}

export interface Executor {
  /** The pipeline's last stages: egress → inject credentials → call with a deadline → scrub → redact. */
  send(request: SendRequest): Promise<ExecutionResult>;
  /** The rollout gate's inputs for this snapshot and policy-owner partner (parameter constraints). */
  rolloutFor(
    snapshot: Pick<OperationSnapshot, "parameter_constraints">,
    partnerId: string,
  ): Promise<ConstraintRollout>;
  /** PKCE start, code exchange and refresh for oauth_user profiles (same token store). */
  readonly oauthUser: OAuthUserClient;
  readonly clientCredentials: ClientCredentialsTokens;
  readonly tokenExchange: TokenExchangeTokens;
}

const EXECUTABLE_METHODS: ReadonlySet<string> = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "OPTIONS",
]);
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const HEADER_VALUE = /^[\x20-\x7e\x80-\xff]*$/;
/**
 * Never taken from the caller or from extraHeaders: credentials (the inbound caller's
 * token is never forwarded), cookies, and headers the transport owns.
 */
const FORBIDDEN_REQUEST_HEADERS: ReadonlySet<string> = new Set([
  "authorization",
  "proxy-authorization",
  "cookie",
  "host",
  "content-length",
  "content-type",
  "content-encoding",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "proxy-connection",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "accept-encoding",
]);

function checkOptions(options: ExecutorOptions): void {
  if (typeof options !== "object" || options === null) throw new TypeError("executor options are required");
  if (typeof options.secretResolver !== "function") throw new TypeError("secretResolver must be a function");
  if (typeof options.clientCredentials?.getToken !== "function")
    throw new TypeError("clientCredentials is required (the process's token cache)");
  if (typeof options.oauthUser !== "object" || options.oauthUser === null)
    throw new TypeError("oauthUser is required (the process's user-OAuth client)");
  if (typeof options.tokenExchange !== "object" || options.tokenExchange === null)
    throw new TypeError("tokenExchange is required (the process's exchanged-token cache)");
  const rollout = options.constraintsRollout;
  if (
    typeof rollout !== "object" ||
    rollout === null ||
    typeof rollout.enabled !== "boolean" ||
    typeof rollout.isPartnerAllowlisted !== "function"
  ) {
    throw new TypeError("constraintsRollout must have enabled (boolean) and isPartnerAllowlisted()");
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new TypeError("fetch must be a function");
  }
  if (typeof options.egress?.request !== "function") throw new TypeError("egress is required");
}

function invalidHeader(pointer: string, keyword: string): ExecutionError {
  return new ExecutionError("invalid_input", {
    message: `Invalid input at headers${pointer}: ${keyword}.`,
    details: { issues: [{ location: "headers", pointer, keyword }] },
  });
}

function headerText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  if (typeof value === "boolean") return value ? "true" : "false";
  return undefined;
}

/** The caller's validated headers, minus the ones no caller may set. */
function callerHeaders(headers: Readonly<Record<string, unknown>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (FORBIDDEN_REQUEST_HEADERS.has(lower)) continue;
    const pointer = `/${name.replaceAll("~", "~0").replaceAll("/", "~1")}`;
    if (!HEADER_NAME.test(name)) throw invalidHeader("", "headerName");
    const values = Array.isArray(value) ? value : [value];
    const texts = values.map(headerText);
    if (texts.some((t) => t === undefined || !HEADER_VALUE.test(t)))
      throw invalidHeader(pointer, "headerValue");
    out[lower] = texts.join(", ");
  }
  return out;
}

function trustedHeaders(headers: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    const lower = name.toLowerCase();
    if (FORBIDDEN_REQUEST_HEADERS.has(lower)) continue;
    if (!HEADER_NAME.test(name) || typeof value !== "string" || !HEADER_VALUE.test(value)) {
      throw new TypeError("extraHeaders must hold valid header names and values");
    }
    out[lower] = value;
  }
  return out;
}

/**
 * Codings the client decodes (bounded-body.ts, as undici's fetch). It decodes a list only when
 * it decodes every member: one other member ("identity" or an empty one included) leaves the
 * whole body as sent, coded and impossible to scrub.
 */
const DECODED_CODINGS: ReadonlySet<string> = new Set(["gzip", "x-gzip", "deflate", "br"]);

function decodedByClient(contentEncoding: string | null): boolean {
  if (contentEncoding === null) return true;
  const codings = contentEncoding.split(",").map((coding) => coding.trim().toLowerCase());
  // No coding at all: the body is as sent.
  if (codings.length === 1 && (codings[0] === "" || codings[0] === "identity")) return true;
  return codings.every((coding) => DECODED_CODINGS.has(coding));
}

/** Headers that carry an injected secret in their name or value are dropped, like sensitive ones. */
function scrubHeaders(
  headers: Record<string, string | string[]>,
  scrubber: SecretScrubber,
): { headers: Record<string, string | string[]>; events: RedactionEvent[] } {
  const events: RedactionEvent[] = [];
  if (scrubber.empty) return { headers, events };
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (scrubber.headerHoldsSecret(name, value)) {
      events.push({ path: name, mode: "remove", source: "secret" });
      continue;
    }
    Object.defineProperty(out, name, { value, enumerable: true, writable: true, configurable: true });
  }
  return { headers: out, events };
}

/**
 * The returned body: the shared scrub → redact stage (scrub-redact.ts), then as the executor
 * returns it — parsed JSON, NDJSON text, or other text (decoded leniently, scrubbed again as text).
 */
function responseBody(
  bytes: Uint8Array,
  contentType: string | null,
  rules: readonly RedactionRule[],
  scrubber: SecretScrubber,
): { body: unknown; events: RedactionEvent[] } {
  const read = scrubAndRedact(bytes, contentType, rules, scrubber);
  const { events } = read;
  switch (read.kind) {
    case "empty":
      return { body: null, events };
    case "json":
      return { body: read.value, events };
    case "ndjson": {
      // One record per line, each redacted with the rules; returned as NDJSON text.
      const lines = read.values.map((value) => JSON.stringify(value));
      return { body: lines.length === 0 ? "" : `${lines.join("\n")}\n`, events };
    }
    case "other": {
      const text = scrubber.scrubText(read.text);
      if (text.found > 0 && events.length === 0) events.push({ path: "", mode: "mask", source: "secret" });
      return { body: text.value, events };
    }
  }
}

function responseHeaderRecord(headers: Headers): Record<string, HeaderValue> {
  const out: Record<string, HeaderValue> = {};
  for (const [name, value] of headers) {
    // The body is returned decoded, so its transfer coding no longer applies.
    if (name === "content-encoding") continue;
    out[name] = name === "set-cookie" ? headers.getSetCookie() : value;
  }
  return out;
}

function withQuery(url: URL, credentials: InjectedCredentials): URL {
  const entries = Object.entries(credentials.query);
  if (entries.length === 0) return url;
  const out = new URL(url);
  for (const [name, value] of entries) out.searchParams.set(name, value);
  return out;
}

/**
 * The snapshot's rules, then the policy's, checked before anything is sent: a malformed
 * rule must stop the call before it has side effects upstream, not after.
 */
function redactionRules(
  snapshot: ExecutableOperation,
  policyRules: readonly RedactionRule[] | undefined,
): RedactionRule[] {
  const own = snapshot.response_rules;
  const extra = policyRules ?? [];
  if (!Array.isArray(own) || !Array.isArray(extra)) {
    throw new ExecutionError("invalid_operation_snapshot", { details: { issue: "redaction_rule_invalid" } });
  }
  const rules = [...own, ...extra];
  try {
    // Applying the rules to an empty document parses every pointer and checks every mode.
    applyRedactions(null, rules);
  } catch {
    throw new ExecutionError("invalid_operation_snapshot", { details: { issue: "redaction_rule_invalid" } });
  }
  return rules;
}

interface UpstreamAnswer {
  readonly response: { readonly status: number; readonly headers: Headers };
  readonly bytes: Uint8Array;
}

export function createExecutor(options: ExecutorOptions): Executor {
  checkOptions(options);
  const timeoutMs = positiveIntegerOption(options.timeoutMs, DEFAULT_TIMEOUT_MS, "timeoutMs");
  const maxResponseBytes = positiveIntegerOption(
    options.maxResponseBytes,
    DEFAULT_MAX_RESPONSE_BYTES,
    "maxResponseBytes",
  );
  const { egress } = options;
  // Every connection opened (upstream and token endpoints alike) passes the egress gate on the
  // address it really connects to: the gate's request, or a fetch given in the options with its dispatcher.
  const givenFetch = options.fetch;
  const gatedFetch: FetchLike | undefined =
    givenFetch === undefined
      ? undefined
      : (input, init) =>
          givenFetch(input, { ...init, dispatcher: egress.dispatcher } as unknown as RequestInit);
  const { secretResolver, constraintsRollout, clientCredentials, oauthUser, tokenExchange } = options;
  const injector: AuthInjector = createAuthInjector({
    secretResolver,
    clientCredentials,
    oauthUser,
    tokenExchange,
  });
  const scrubbers = new LRUCache<string, SecretScrubber>({ max: 256 });

  /** The rollout gate's inputs; the partner allowlist is asked only when the snapshot has constraints. */
  async function rolloutFor(
    snapshot: Pick<OperationSnapshot, "parameter_constraints">,
    partnerId: string,
  ): Promise<ConstraintRollout> {
    const constraints = snapshot.parameter_constraints;
    if (Array.isArray(constraints) && constraints.length === 0)
      return { enabled: constraintsRollout.enabled, partnerAllowlisted: false };
    let partnerAllowlisted: boolean;
    try {
      partnerAllowlisted = (await constraintsRollout.isPartnerAllowlisted(partnerId)) === true;
    } catch {
      partnerAllowlisted = false;
    }
    return { enabled: constraintsRollout.enabled, partnerAllowlisted };
  }

  async function call(
    url: URL,
    init: { method: string; headers: Record<string, string>; body: string | undefined },
    credentials: InjectedCredentials,
    signal: AbortSignal,
  ): Promise<UpstreamAnswer> {
    return traced(
      "authority.upstream",
      async () => {
        const target = withQuery(url, credentials);
        // With tracing on, the upstream's parent is this call's span.
        const headers = { ...init.headers, ...credentials.headers, ...traceHeaders() };
        const body = init.body === undefined ? {} : { body: init.body };
        if (gatedFetch === undefined) {
          // The gate's request: no redirect is followed, so injected credentials never leave the origin.
          const reply = await egress.request(target, { method: init.method, headers, ...body, signal });
          return { response: reply, bytes: await readBoundedReply(reply, init.method, maxResponseBytes) };
        }
        const response = await gatedFetch(target, {
          method: init.method,
          headers,
          ...body,
          // A redirect could carry injected credentials to another origin: 3xx is returned as is.
          redirect: "manual",
          signal,
        });
        const bytes = await readBoundedBody(response, maxResponseBytes);
        return { response, bytes };
      },
      ({ response }) => ({ "http.response.status_code": response.status }),
    );
  }

  function executableMethod(snapshot: ExecutableOperation): string {
    // A downstream MCP tool is called by the MCP transport's send stage, never as an HTTP request.
    if (snapshot.mcp_tool !== undefined) {
      throw new ExecutionError("invalid_operation_snapshot", { details: { issue: "downstream_mcp_tool" } });
    }
    const method = typeof snapshot.method === "string" ? snapshot.method.toUpperCase() : "";
    if (!EXECUTABLE_METHODS.has(method)) {
      throw new ExecutionError("invalid_operation_snapshot", { details: { issue: "method_not_executable" } });
    }
    return method;
  }

  async function sendPrepared(request: SendRequest, started: number): Promise<ExecutionResult> {
    const { snapshot } = request;
    const method = executableMethod(snapshot);
    const { args, url } = request.prepared;
    const fromCaller = callerHeaders(args.headers);
    let requestHash: string;
    try {
      // What the caller asked for: no credentials, no per-request server headers. It also
      // proves the body is plain JSON before it is serialized.
      requestHash = hashCanonical({
        method,
        url: url.toString(),
        headers: fromCaller,
        body: args.hasBody ? args.body : null,
      });
    } catch {
      throw new ExecutionError("invalid_input", {
        message: "Invalid input at body: json.",
        details: { issues: [{ location: "body", pointer: "", keyword: "json" }] },
      });
    }
    const body = args.hasBody ? JSON.stringify(args.body) : undefined;
    const rules = redactionRules(snapshot, request.redactions);

    // A destination refused without DNS (a literal address, a metadata name, a platform
    // service) stops here, before any secret is loaded; names are checked again on connect.
    const destination = await egress.checkUrl(url);
    if (!destination.ok) {
      throw new ExecutionError("egress_denied", { details: { rule: destination.rule }, requestHash });
    }

    // 4: secrets are resolved only now.
    const session = await injector.open(
      request.authProfile,
      request.endUser === undefined ? {} : { endUser: request.endUser },
    );
    const scrubberFor = (renewed: InjectedCredentials | undefined): SecretScrubber => {
      try {
        const secrets = [
          ...injectedSecrets(session.credentials, session.secrets),
          ...(renewed === undefined ? [] : injectedSecrets(renewed)),
        ];
        // Building the patterns costs more than using them: kept per distinct secret set
        // (keyed by a hash, so the cache holds no secret as a key).
        const key = createHash("sha256").update(JSON.stringify(secrets)).digest("base64");
        const known = scrubbers.get(key);
        if (known !== undefined) return known;
        const built = createSecretScrubber(secrets);
        scrubbers.set(key, built);
        return built;
      } catch (error) {
        // Too short to scrub without garbling every answer: refused before anything is sent.
        if (error instanceof SecretTooShortError)
          throw new ExecutionError("auth_profile_unavailable", {
            details: { issue: "credential_too_short" },
          });
        throw error;
      }
    };
    let scrubber = scrubberFor(undefined);

    // The transport's headers may still be in the making (invoke's envelope): awaited last,
    // before the deadline starts and anything is sent.
    const headers: Record<string, string> = {
      ...fromCaller,
      ...trustedHeaders(await request.extraHeaders),
      accept: "application/json",
      // An encoded answer must be decoded before it can be scrubbed: ask for none.
      "accept-encoding": "identity",
    };
    if (body !== undefined) headers["content-type"] = "application/json";

    // 5: one deadline for the whole upstream exchange, including a 401 retry.
    const deadline = AbortSignal.timeout(timeoutMs);
    const signal = request.signal === undefined ? deadline : AbortSignal.any([deadline, request.signal]);
    const upstreamStarted = performance.now();
    const failure = (reason: "upstream_timeout" | "upstream_unreachable" | "upstream_response_too_large") => {
      const kind =
        reason === "upstream_timeout"
          ? "timeout"
          : reason === "upstream_unreachable"
            ? "unreachable"
            : "too_large";
      const now = performance.now();
      return new ExecutionError(reason, {
        upstreamError: { kind },
        requestHash,
        timings: { totalMs: now - started, upstreamMs: now - upstreamStarted },
      });
    };
    let answer: UpstreamAnswer;
    try {
      const init = { method, headers, body };
      answer = await call(url, init, session.credentials, signal);
      if (answer.response.status === 401) {
        const renewed = await session.renew();
        if (renewed !== undefined) {
          scrubber = scrubberFor(renewed);
          answer = await call(url, init, renewed, signal);
        }
      }
    } catch (error) {
      if (error instanceof ExecutionError) throw error;
      const denial = egressDenialOf(error);
      if (denial !== undefined) {
        const now = performance.now();
        throw new ExecutionError("egress_denied", {
          details: { rule: denial.rule },
          requestHash,
          timings: { totalMs: now - started, upstreamMs: now - upstreamStarted },
        });
      }
      if (error instanceof BodyTooLargeError) throw failure("upstream_response_too_large");
      if (deadline.aborted) throw failure("upstream_timeout");
      if (request.signal?.aborted === true) throw request.signal.reason;
      // The transport's own error text (addresses, TLS details) is never surfaced.
      throw failure("upstream_unreachable");
    }
    const upstreamMs = performance.now() - upstreamStarted;

    // 6: injected secrets scrubbed from headers and body, then operation rules, policy
    // rules and default sensitive-field redaction; what cannot be scrubbed or redacted is refused.
    const { response, bytes } = answer;
    const refused = (reason: "redaction_failed" | "scrub_failed", issue: string) =>
      new ExecutionError(reason, {
        details: { issue },
        upstreamError: { kind: "unusable", status: response.status },
        requestHash,
        timings: { totalMs: performance.now() - started, upstreamMs },
      });
    if (!decodedByClient(response.headers.get("content-encoding")))
      throw refused("scrub_failed", "content_encoding_unsupported");
    // A body past the JSON limits (core/bounded-json.ts): refused, never passed through.
    const tooComplex = () =>
      new ExecutionError("upstream_response_too_large", {
        message: "The upstream response is nested too deeply or spread too wide.",
        upstreamError: { kind: "too_large" },
        requestHash,
        timings: { totalMs: performance.now() - started, upstreamMs },
      });
    const sanitized = sanitizeResponseHeaders(responseHeaderRecord(response.headers));
    const safeHeaders = scrubHeaders(sanitized.headers, scrubber);
    let redacted: { body: unknown; events: RedactionEvent[] };
    try {
      redacted = responseBody(bytes, response.headers.get("content-type"), rules, scrubber);
    } catch (error) {
      if (error instanceof RedactionDecodeError && error.issue === "too_complex") throw tooComplex();
      if (error instanceof RedactionDecodeError) throw refused("redaction_failed", error.issue);
      if (error instanceof ScrubError) throw refused("scrub_failed", "scrub_incomplete");
      // Rules were checked before the call; whatever else fails, no unredacted body leaves.
      throw new ExecutionError("invalid_operation_snapshot", { details: { issue: "redaction_failed" } });
    }

    // 7: hashes of what was asked and of what is returned.
    const status = response.status;
    let responseHash: string;
    try {
      responseHash = hashCanonical({ status, headers: safeHeaders.headers, body: redacted.body });
    } catch {
      // Nothing past the JSON limits gets here; whatever the canonical form refuses is refused too.
      throw tooComplex();
    }
    const result: ExecutionResult = {
      status,
      headers: safeHeaders.headers,
      body: redacted.body,
      redactionEvents: reportedEvents([...sanitized.events, ...safeHeaders.events, ...redacted.events]),
      timings: { totalMs: performance.now() - started, upstreamMs },
      requestHash,
      responseHash,
    };
    return status >= 400 ? { ...result, upstreamError: { kind: "http_error", status } } : result;
  }

  return {
    send: (request) => traced("authority.execute", () => sendPrepared(request, performance.now())),
    rolloutFor,
    oauthUser,
    clientCredentials,
    tokenExchange,
  };
}
