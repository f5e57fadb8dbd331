/**
 * The send stage of the enforcement pipeline for a downstream MCP server's tool (the
 * executor's send is for HTTP operations and refuses these snapshots). It runs after the
 * pipeline's decision and prepare stages — the arguments already validated against the
 * reviewed input schema and the signed constraints, nothing loaded or sent before — and does
 * what the executor does, in the same order, over `tools/call` instead of an HTTP request:
 * rules checked → egress on the reviewed URL → credentials from the auth profile (only now)
 * → one call with a deadline, on the egress gate's fetch (downstream-client.ts) → the answer
 * reduced to the tool-result fields, injected secrets scrubbed, the snapshot's and the
 * policy's rules and default sensitive-field masking applied, failing closed.
 */

import { createHash, randomUUID } from "node:crypto";
import { type CallToolResult, ProtocolError, type Tool } from "@modelcontextprotocol/client";
import jsonPointer from "json-pointer";
import { hashCanonical } from "../core/canonical-json.ts";
import { isMcpToolSnapshot } from "../core/operation-snapshot.ts";
import {
  applyRedactions,
  REDACTION_WILDCARD,
  type RedactionRule,
  reportedEvents,
} from "../core/redaction.ts";
import type { AuthInjector } from "../execute/auth-injector.ts";
import { BodyTooLargeError } from "../execute/bounded-body.ts";
import { type EgressPolicy, egressDenialOf } from "../execute/egress.ts";
import { ExecutionError } from "../execute/errors.ts";
import type { ExecutableOperation, ExecutionResult, SendRequest } from "../execute/executor.ts";
import { RedactionDecodeError } from "../execute/response-body.ts";
import { scrubAndRedact } from "../execute/scrub-redact.ts";
import {
  createSecretScrubber,
  injectedSecrets,
  ScrubError,
  type SecretScrubber,
  SecretTooShortError,
} from "../execute/secret-scrub.ts";
import {
  type DownstreamCaller,
  DownstreamExchangeError,
  type DownstreamNotification,
  type NotificationSink,
} from "./downstream-client.ts";
import {
  isLogLevel,
  MAX_RELAYED_BYTES,
  MAX_RELAYED_NOTIFICATIONS,
  type NotificationRelay,
  notificationRelay,
  passesLevel,
  type RelayedNotification,
} from "./notification-relay.ts";

export interface DownstreamSenderOptions {
  readonly egress: EgressPolicy;
  /** Opens the auth profile's credentials (the executor's injector, same secrets and token caches). */
  readonly injector: AuthInjector;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
  readonly caller: DownstreamCaller;
}

export interface DownstreamSender {
  send(request: SendRequest): Promise<ExecutionResult>;
}

type Timings = { readonly totalMs: number; readonly upstreamMs: number };

function badSnapshot(issue: string): ExecutionError {
  return new ExecutionError("invalid_operation_snapshot", { details: { issue } });
}

/** The snapshot's rules, then the policy's, checked before anything is sent (as the executor does). */
function checkedRules(
  snapshot: ExecutableOperation,
  policy: readonly RedactionRule[] | undefined,
): RedactionRule[] {
  const rules = [...snapshot.response_rules, ...(policy ?? [])];
  try {
    applyRedactions(null, rules);
  } catch {
    throw badSnapshot("redaction_rule_invalid");
  }
  return rules;
}

/** The reviewed tool as the SDK client takes it: its output schema checks `structuredContent`. */
function reviewedTool(snapshot: ExecutableOperation, name: string): Tool {
  const input = snapshot.input_schema.body ?? { type: "object" };
  return {
    name,
    inputSchema: input as Tool["inputSchema"],
    ...(snapshot.response_schema == null
      ? {}
      : { outputSchema: snapshot.response_schema as Tool["outputSchema"] }),
  };
}

/**
 * Only the tool-result fields an agent reads leave the gateway; `_meta` and anything else the
 * downstream adds stay behind. A JSON-RPC error of the downstream becomes an `isError` result
 * with its message (scrubbed and redacted like any answer), as the revisions let servers do.
 */
function resultFields(result: CallToolResult | ProtocolError): Record<string, unknown> {
  if (result instanceof ProtocolError) {
    return {
      content: [{ type: "text", text: `The downstream server refused the call: ${result.message}` }],
      isError: true,
    };
  }
  return {
    content: Array.isArray(result.content) ? result.content : [],
    ...(result.structuredContent === undefined ? {} : { structuredContent: result.structuredContent }),
    ...(result.isError === true ? { isError: true } : {}),
  };
}

function scrubberFor(secrets: readonly string[]): SecretScrubber {
  try {
    return createSecretScrubber(secrets);
  } catch (error) {
    if (error instanceof SecretTooShortError)
      throw new ExecutionError("auth_profile_unavailable", { details: { issue: "credential_too_short" } });
    throw error;
  }
}

export function createDownstreamSender(options: DownstreamSenderOptions): DownstreamSender {
  const { egress, injector, timeoutMs, maxResponseBytes } = options;
  const { caller } = options;

  async function send(request: SendRequest): Promise<ExecutionResult> {
    const started = performance.now();
    const { snapshot, prepared } = request;
    if (!isMcpToolSnapshot(snapshot)) throw badSnapshot("not_a_downstream_mcp_tool");
    const name = snapshot.mcp_tool.name;
    const body = prepared.args.hasBody ? prepared.args.body : {};
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw new ExecutionError("invalid_input", {
        message: "Invalid input at body: type.",
        details: { issues: [{ location: "body", pointer: "", keyword: "type" }] },
      });
    }
    const args = body as Record<string, unknown>;
    const url = prepared.url;
    const requestHash = hashCanonical({ method: "tools/call", url: url.toString(), name, arguments: args });
    const rules = checkedRules(snapshot, request.redactions);
    const destination = await egress.checkUrl(url);
    if (!destination.ok)
      throw new ExecutionError("egress_denied", { details: { rule: destination.rule }, requestHash });

    // Secrets are resolved only now, after every check that needs none.
    const session = await injector.open(
      request.authProfile,
      request.endUser === undefined ? {} : { endUser: request.endUser },
    );
    const scrubber = scrubberFor(injectedSecrets(session.credentials, session.secrets));
    // The era of a server is remembered per credential set (never across authorization contexts).
    const context = createHash("sha256").update(JSON.stringify(session.credentials)).digest("base64url");
    const deadline = AbortSignal.timeout(timeoutMs);
    const signal = request.signal === undefined ? deadline : AbortSignal.any([deadline, request.signal]);
    const upstreamStarted = performance.now();
    const timings = (): Timings => ({
      totalMs: performance.now() - started,
      upstreamMs: performance.now() - upstreamStarted,
    });
    const relay = notificationRelay();
    const received = relay === undefined ? undefined : collector(relay);
    let answer: CallToolResult | ProtocolError;
    try {
      answer = await caller.call(
        url.toString(),
        reviewedTool(snapshot, name),
        args,
        {
          fetch: egress.partnerFetch,
          request: egress.request,
          timeoutMs,
          maxResponseBytes,
          headers: { ...(await request.extraHeaders), ...session.credentials.headers },
          query: session.credentials.query,
          // This stage's deadline (its timer and the caller's abort) is the exchange's: no second timer.
          deadline: signal,
          ...(received === undefined ? {} : { notifications: received.sink }),
          ...(relay?.logLevel === undefined ? {} : { logLevel: relay.logLevel }),
        },
        context,
      );
    } catch (error) {
      if (error instanceof ProtocolError) answer = error;
      else throw failure(error, { caller: request.signal, deadline }, requestHash, timings());
    }
    const upstreamMs = performance.now() - upstreamStarted;
    const bytes = Buffer.from(JSON.stringify(resultFields(answer)));
    let read: ReturnType<typeof scrubAndRedact>;
    try {
      read = scrubAndRedact(bytes, "application/json", rules, scrubber);
    } catch (error) {
      const issue =
        error instanceof ScrubError
          ? "scrub_incomplete"
          : error instanceof RedactionDecodeError
            ? error.issue
            : "redaction_failed";
      const reason = error instanceof ScrubError ? "scrub_failed" : "redaction_failed";
      throw new ExecutionError(reason, {
        details: { issue },
        upstreamError: { kind: "unusable" },
        requestHash,
        timings: timings(),
      });
    }
    const result = read.kind === "json" ? (read.value as Record<string, unknown>) : {};
    // Only a result that could be scrubbed lets anything of the exchange out, in the order received.
    if (relay !== undefined && received !== undefined)
      await relayAll(relay, received.notifications, rules, scrubber);
    const isError = result.isError === true;
    return {
      status: 200,
      headers: {},
      body: result,
      redactionEvents: reportedEvents(read.events),
      timings: { totalMs: performance.now() - started, upstreamMs },
      requestHash,
      responseHash: hashCanonical({ status: 200, body: result }),
      ...(isError ? { upstreamError: { kind: "http_error" as const } } : {}),
    };
  }

  return { send };
}

/**
 * The downstream's notifications the caller takes, as received, within the per-call bounds (a
 * flood is counted and dropped as it arrives: the gateway keeps no more than it may relay).
 */
function collector(relay: NotificationRelay): {
  readonly sink: NotificationSink;
  readonly notifications: RelayedNotification[];
} {
  const notifications: RelayedNotification[] = [];
  const sink: NotificationSink = {
    // The gateway's own token: the downstream never learns the caller's.
    progressToken: randomUUID(),
    accept(notification) {
      const taken = relayable(notification, relay);
      if (taken === undefined) return;
      if (notifications.length >= MAX_RELAYED_NOTIFICATIONS) relay.dropped.limit++;
      else notifications.push(taken);
    },
  };
  return { sink, notifications };
}

/** Only the fields of a notification the caller reads, when the caller takes it at all. */
function relayable(
  notification: DownstreamNotification,
  relay: NotificationRelay,
): RelayedNotification | undefined {
  const { params } = notification;
  if (notification.method === "notifications/progress") {
    if (!relay.wantsProgress || typeof params.progress !== "number") return undefined;
    return {
      method: "notifications/progress",
      params: {
        progress: params.progress,
        ...(typeof params.total === "number" ? { total: params.total } : {}),
        ...(typeof params.message === "string" ? { message: params.message } : {}),
      },
    };
  }
  const level = params.level;
  if (relay.logLevel === undefined || !isLogLevel(level) || !passesLevel(level, relay.logLevel))
    return undefined;
  return {
    method: "notifications/message",
    params: {
      level,
      data: params.data ?? null,
      ...(typeof params.logger === "string" ? { logger: params.logger } : {}),
    },
  };
}

/** Whether any object at any depth has a member named as the last name of a rule's path. */
function showsRuleMember(root: unknown, rules: readonly RedactionRule[]): boolean {
  const names = new Set(
    rules.map((rule) => jsonPointer.parse(rule.path).at(-1)).filter((name) => name !== REDACTION_WILDCARD),
  );
  if (names.size === 0) return false;
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== "object" || node === null) continue;
    if (!Array.isArray(node) && Object.keys(node).some((name) => names.has(name))) return true;
    stack.push(...(Array.isArray(node) ? node : Object.values(node)));
  }
  return false;
}

/**
 * Each notification scrubbed and redacted like the result (the same secrets, rules and
 * default masking), then sent; one that cannot be is dropped and counted, never sent raw.
 * The bytes relayed for one call are bounded: past them, the rest is dropped and counted.
 */
async function relayAll(
  relay: NotificationRelay,
  notifications: readonly RelayedNotification[],
  rules: readonly RedactionRule[],
  scrubber: SecretScrubber,
): Promise<void> {
  let bytes = 0;
  for (const notification of notifications) {
    let params: unknown;
    try {
      const read = scrubAndRedact(
        Buffer.from(JSON.stringify(notification.params)),
        "application/json",
        rules,
        scrubber,
      );
      if (read.kind !== "json") throw new Error("notification params are not JSON");
      // The rules point into a tool result; a member they name, anywhere in a notification, is not sent.
      if (showsRuleMember(read.value, rules)) throw new Error("notification shows a redacted member");
      params = read.value;
    } catch {
      relay.dropped.scrub++;
      continue;
    }
    bytes += Buffer.byteLength(JSON.stringify(params));
    if (bytes > MAX_RELAYED_BYTES) {
      relay.dropped.limit++;
      continue;
    }
    // A caller that went away loses its notifications; the call's own answer says how it ended.
    await relay.send({ ...notification, params } as RelayedNotification).catch(() => undefined);
  }
}

/** What a failed exchange is, in the executor's reasons; never the transport's own words. */
function failure(
  error: unknown,
  signals: { readonly caller: AbortSignal | undefined; readonly deadline: AbortSignal },
  requestHash: string,
  timings: Timings,
): unknown {
  if (signals.caller?.aborted === true) return signals.caller.reason;
  if (signals.deadline.aborted)
    return new ExecutionError("upstream_timeout", {
      upstreamError: { kind: "timeout" },
      requestHash,
      timings,
    });
  const denial = egressDenialOf(error);
  if (denial !== undefined)
    return new ExecutionError("egress_denied", { details: { rule: denial.rule }, requestHash, timings });
  const cause = causeChain(error);
  if (cause.some((e) => e instanceof BodyTooLargeError))
    return new ExecutionError("upstream_response_too_large", {
      upstreamError: { kind: "too_large" },
      requestHash,
      timings,
    });
  const refused = cause.find((e): e is DownstreamExchangeError => e instanceof DownstreamExchangeError);
  if (refused?.issue === "too_complex")
    return new ExecutionError("upstream_response_too_large", {
      message: "The upstream response is nested too deeply or spread too wide.",
      upstreamError: { kind: "too_large" },
      requestHash,
      timings,
    });
  return new ExecutionError("upstream_unreachable", {
    upstreamError: { kind: "unreachable" },
    ...(refused === undefined ? {} : { details: { issue: refused.issue } }),
    requestHash,
    timings,
  });
}

function causeChain(error: unknown): unknown[] {
  const chain: unknown[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth++) {
    chain.push(current);
    current = typeof current === "object" ? (current as { cause?: unknown }).cause : undefined;
  }
  return chain;
}
