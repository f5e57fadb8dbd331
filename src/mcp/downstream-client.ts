/**
 * The SDK's 2.x client toward a downstream MCP server (Streamable HTTP), on a fetch that is
 * the one egress gate's (every connection checked on the address it reaches) and that bounds
 * what one exchange may do: POST only (no standalone GET stream to hold open), redirects never
 * followed (a redirect could carry injected credentials elsewhere: it fails the exchange), the
 * body read whole within a byte limit and, when it is JSON or SSE data, within the service's
 * JSON depth and width bounds before the SDK parses it. Used at import (`listDownstreamTools`)
 * and by the send stage of a governed call (`createDownstreamCaller`).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import {
  type CallToolResult,
  Client,
  type JsonSchemaType,
  type JsonSchemaValidator,
  type jsonSchemaValidator,
  LOG_LEVEL_META_KEY,
  type PriorDiscovery,
  ProtocolError,
  StreamableHTTPClientTransport,
  type Tool,
} from "@modelcontextprotocol/client";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/client/validators/ajv";
import { LRUCache } from "lru-cache";
import { createSnapshotAjv } from "../catalog/schema-ajv.ts";
import { parseBoundedJson } from "../core/bounded-json.ts";
import { discard, readBoundedBody, readBoundedReply } from "../execute/bounded-body.ts";
import type { FetchLike, GatedRequest } from "../execute/egress.ts";

/** How the gateway names itself to downstream servers. */
const CLIENT_INFO = { name: "authority-gateway", version: "1.0.0" } as const;

/** The exchange broke a rule of the gateway (not a transport fault): a redirect, a body past the JSON bounds. */
export class DownstreamExchangeError extends Error {
  readonly issue: "redirect" | "too_complex";

  constructor(issue: "redirect" | "too_complex") {
    super(`downstream exchange refused: ${issue}`);
    this.name = "DownstreamExchangeError";
    this.issue = issue;
  }
}

export interface DownstreamExchange {
  /** The egress gate's fetch. */
  readonly fetch: FetchLike;
  /** The egress gate's request: used instead of `fetch` when given (less CPU per call, decision 2841). */
  readonly request?: GatedRequest;
  /** Largest body one HTTP response may have (decoded bytes). */
  readonly maxResponseBytes: number;
  /** Deadline of the whole exchange (connect, list or call). */
  readonly timeoutMs: number;
  /** Credentials (auth profile) and trusted headers for every request; never the agent's token. */
  readonly headers?: Readonly<Record<string, string>>;
  readonly query?: Readonly<Record<string, string>>;
  readonly signal?: AbortSignal;
  /** The whole exchange's deadline, when the caller made one (its timeout and abort): used as it is, without `timeoutMs` and `signal`. */
  readonly deadline?: AbortSignal;
  /** Where the notifications of this exchange's own responses go (none: they are left to the SDK). */
  readonly notifications?: NotificationSink;
  /** The least severe log level to ask the downstream for (with `notifications`). */
  readonly logLevel?: string;
}

/** A notification of a downstream response, as received (to be scrubbed before it goes anywhere). */
export interface DownstreamNotification {
  readonly method: string;
  readonly params: Record<string, unknown>;
}

export interface NotificationSink {
  /** The progress token sent to the downstream for this call: progress naming any other is not taken. */
  readonly progressToken: string;
  accept(notification: DownstreamNotification): void;
}

/**
 * The data of each event of an SSE body, as a client's parser assembles it: the event's `data`
 * lines joined by a newline (one message may be spread over several lines, none of them JSON).
 */
export function sseData(text: string): string[] {
  const events: string[] = [];
  let lines: string[] = [];
  for (const line of [...text.split(/\r\n|\r|\n/), ""]) {
    if (line === "") {
      const data = lines.join("\n").trim();
      if (data !== "") events.push(data);
      lines = [];
    } else if (line === "data" || line.startsWith("data:")) lines.push(line.slice(5));
  }
  return events;
}

/** Stateless between calls (no streaming decode): one for every exchange. */
const utf8 = new TextDecoder();

/**
 * Each SSE event's data, and a JSON body, within the JSON bounds; answers the SSE events that
 * parsed (the messages of the stream).
 */
function checkBodyBounds(bytes: Uint8Array, contentType: string | null): unknown[] {
  const type = (contentType ?? "").split(";", 1)[0]?.trim().toLowerCase() ?? "";
  if (bytes.byteLength === 0) return [];
  const text = utf8.decode(bytes);
  const messages: unknown[] = [];
  try {
    if (type === "application/json") parseBoundedJson(text, "downstream");
    else if (type === "text/event-stream")
      for (const data of sseData(text)) messages.push(parseBoundedJson(data, "downstream"));
  } catch (error) {
    // Text that is not JSON is the SDK's to refuse; text past the bounds is never handed over.
    if (error instanceof SyntaxError) return messages;
    throw new DownstreamExchangeError("too_complex");
  }
  return messages;
}

const RELAYABLE = new Set(["notifications/progress", "notifications/message"]);

/**
 * The progress and log notifications of this exchange's own response stream, handed to its
 * sink: a notification on another call's stream never reaches this one, and progress naming
 * another token than the one this call sent is not taken.
 */
function collectNotifications(messages: readonly unknown[], sink: NotificationSink | undefined): void {
  if (sink === undefined) return;
  for (const message of messages) {
    if (typeof message !== "object" || message === null || "id" in message) continue;
    const { method, params } = message as { method?: unknown; params?: unknown };
    if (typeof method !== "string" || !RELAYABLE.has(method)) continue;
    if (typeof params !== "object" || params === null || Array.isArray(params)) continue;
    const fields = params as Record<string, unknown>;
    if (method === "notifications/progress" && fields.progressToken !== sink.progressToken) continue;
    sink.accept({ method, params: fields });
  }
}

/** One exchange in progress and its deadline. */
interface Current {
  readonly exchange: DownstreamExchange;
  readonly deadline: AbortSignal;
}

/**
 * The exchange in progress, per async context: a client kept across calls reads each call's
 * own credentials, headers and deadline here, never another call's.
 */
const currentExchange = new AsyncLocalStorage<Current>();

function deadlineOf(exchange: DownstreamExchange): AbortSignal {
  if (exchange.deadline !== undefined) return exchange.deadline;
  return exchange.signal === undefined
    ? AbortSignal.timeout(exchange.timeoutMs)
    : AbortSignal.any([AbortSignal.timeout(exchange.timeoutMs), exchange.signal]);
}

const exchangeFetch: FetchLike = async (input, init) => {
  const current = currentExchange.getStore();
  // A request outside a call (none is expected) carries no credentials and is never sent.
  if (current === undefined) throw new Error("downstream request outside an exchange");
  const { exchange, deadline } = current;
  const method = (init?.method ?? "GET").toUpperCase();
  // Only requests carry calls; a standalone GET stream would only hold a connection open.
  if (method !== "POST") return new Response(null, { status: 405, headers: { allow: "POST" } });
  const url = new URL(input);
  for (const [name, value] of Object.entries(exchange.query ?? {})) url.searchParams.set(name, value);
  const headers = new Headers(init?.headers);
  for (const [name, value] of Object.entries(exchange.headers ?? {})) headers.set(name, value);
  const signal = init?.signal == null ? deadline : AbortSignal.any([deadline, init.signal]);
  const {
    status,
    headers: received,
    bytes,
  } = await exchanged(exchange, url, { ...init, method, headers, signal });
  collectNotifications(checkBodyBounds(bytes, received.get("content-type")), exchange.notifications);
  const empty = bytes.byteLength === 0 || status === 204 || status === 304;
  return new Response(empty ? null : bytes, { status, headers: received });
};

/**
 * One HTTP exchange with the downstream, its body read whole within the bound; a redirect is
 * refused. By the gate's request when the exchange has it and the body is text (the SDK's JSON-RPC).
 */
async function exchanged(
  exchange: DownstreamExchange,
  url: URL,
  init: RequestInit & { method: string; headers: Headers; signal: AbortSignal },
): Promise<{ status: number; headers: Headers; bytes: Uint8Array }> {
  const redirected = (status: number) => status >= 300 && status < 400;
  if (exchange.request !== undefined && (init.body === undefined || typeof init.body === "string")) {
    const reply = await exchange.request(url, {
      method: init.method,
      headers: Object.fromEntries(init.headers),
      ...(typeof init.body === "string" ? { body: init.body } : {}),
      signal: init.signal,
    });
    if (redirected(reply.status)) {
      discard(reply);
      throw new DownstreamExchangeError("redirect");
    }
    const bytes = await readBoundedReply(reply, init.method, exchange.maxResponseBytes);
    return { status: reply.status, headers: reply.headers, bytes };
  }
  const response = await exchange.fetch(url, { ...init, redirect: "manual" });
  if (redirected(response.status)) {
    await response.body?.cancel().catch(() => undefined);
    throw new DownstreamExchangeError("redirect");
  }
  const bytes = await readBoundedBody(response, exchange.maxResponseBytes);
  return { status: response.status, headers: response.headers, bytes };
}

/**
 * Output-schema validators compiled once per distinct reviewed schema (by content), each on its
 * own engine: two schemas sharing an `$id` never resolve to each other's compiled form.
 */
function compiledOnce(max: number): jsonSchemaValidator {
  const compiled = new LRUCache<string, JsonSchemaValidator<unknown>>({ max });
  return {
    getValidator<T>(schema: JsonSchemaType): JsonSchemaValidator<T> {
      const key = JSON.stringify(schema);
      let validator = compiled.get(key);
      if (validator === undefined) {
        // The snapshot's own engine: a downstream's answer never meets a backtracking pattern (decision 2502).
        validator = new AjvJsonSchemaValidator(createSnapshotAjv()).getValidator(schema);
        compiled.set(key, validator);
      }
      return validator as JsonSchemaValidator<T>;
    },
  };
}

/** A connected client; call it within `currentExchange.run` (its requests read the exchange there). */
async function open(
  url: string,
  current: Current,
  prior: PriorDiscovery | undefined,
  validators?: jsonSchemaValidator,
): Promise<Client> {
  const client = new Client(CLIENT_INFO, {
    versionNegotiation: { mode: "auto" },
    ...(validators === undefined ? {} : { jsonSchemaValidator: validators }),
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: exchangeFetch,
    redirectPolicy: "same-origin",
  });
  await client.connect(transport, {
    signal: current.deadline,
    timeout: current.exchange.timeoutMs,
    ...(prior === undefined ? {} : { prior }),
  });
  return client;
}

export interface DownstreamListing {
  readonly tools: readonly Tool[];
  readonly server: { readonly name?: string; readonly version?: string };
  /** "modern" (2026-07-28 and later) or "legacy" (the 2025 revisions, with `initialize`). */
  readonly era: string | undefined;
}

/** Every tool the server lists, page after page, stopping past `maxTools` (the caller refuses that). */
export async function listDownstreamTools(
  url: string,
  exchange: DownstreamExchange,
  maxTools: number,
): Promise<DownstreamListing> {
  const current = { exchange, deadline: deadlineOf(exchange) };
  return currentExchange.run(current, () => listAll(url, current, maxTools));
}

async function listAll(url: string, current: Current, maxTools: number): Promise<DownstreamListing> {
  const { deadline, exchange } = current;
  const client = await open(url, current, undefined);
  try {
    const tools: Tool[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, {
        signal: deadline,
        timeout: exchange.timeoutMs,
        cacheMode: "bypass",
      });
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined && tools.length <= maxTools);
    const info = client.getServerVersion();
    return {
      tools,
      server: {
        ...(info?.name === undefined ? {} : { name: info.name }),
        ...(info?.version === undefined ? {} : { version: info.version }),
      },
      era: client.getProtocolEra(),
    };
  } finally {
    await client.close().catch(() => undefined);
  }
}

export interface DownstreamCaller {
  /** One `tools/call` of a reviewed tool. */
  call(
    url: string,
    tool: Tool,
    args: Record<string, unknown>,
    exchange: DownstreamExchange,
    /** Whose credentials the connection carries: what is remembered is reused only within it. */
    context: string,
  ): Promise<CallToolResult>;
}

function callOn(client: Client, tool: Tool, args: Record<string, unknown>, current: Current) {
  const sink = current.exchange.notifications;
  // The downstream gets a token of the gateway's, never the caller's, and is asked for log
  // lines only when the caller takes them (a 2026-07-28 server sends none unless asked).
  const meta =
    sink === undefined
      ? undefined
      : {
          progressToken: sink.progressToken,
          ...(current.exchange.logLevel === undefined
            ? {}
            : { [LOG_LEVEL_META_KEY]: current.exchange.logLevel }),
        };
  return client.callTool(
    { name: tool.name, arguments: args, ...(meta === undefined ? {} : { _meta: meta }) },
    { signal: current.deadline, timeout: current.exchange.timeoutMs, toolDefinition: tool },
  ) as Promise<CallToolResult>;
}

/**
 * A caller that remembers each server's era per authorization context (credential set and
 * URL). A 2026-07-28 server is stateless: its connected client is kept and each call is one
 * request, with no `server/discover`, client set-up or teardown. A 2025 one is connected per
 * call (its `initialize` handshake runs: the revisions need it), without the era probe. A
 * kept client is dropped when a call on it fails other than by the server's JSON-RPC error
 * (the server may have changed), and when it ages out; nothing to close then: it holds no
 * stream or session, and closing would abort calls still in flight.
 */
export function createDownstreamCaller(options: { readonly maxServers?: number } = {}): DownstreamCaller {
  const max = options.maxServers ?? 1000;
  const eras = new LRUCache<string, PriorDiscovery>({ max, ttl: 300_000 });
  const kept = new LRUCache<string, Promise<Client>>({ max, ttl: 300_000 });
  const validators = compiledOnce(max);

  async function onKept(
    key: string,
    pending: Promise<Client>,
    tool: Tool,
    args: Record<string, unknown>,
    current: Current,
  ) {
    try {
      return await callOn(await pending, tool, args, current);
    } catch (error) {
      if (!(error instanceof ProtocolError) && kept.get(key) === pending) {
        kept.delete(key);
        eras.delete(key);
      }
      throw error;
    }
  }

  async function oneOff(
    key: string,
    url: string,
    tool: Tool,
    args: Record<string, unknown>,
    current: Current,
  ) {
    const client = await open(url, current, eras.get(key), validators);
    try {
      const discover = client.getDiscoverResult();
      eras.set(key, discover === undefined ? { kind: "legacy" } : { kind: "modern", discover });
      return await callOn(client, tool, args, current);
    } finally {
      await client.close().catch(() => undefined);
    }
  }

  return {
    call(url, tool, args, exchange, context) {
      const key = `${context}\u0000${url}`;
      const current = { exchange, deadline: deadlineOf(exchange) };
      return currentExchange.run(current, () => {
        let pending = kept.get(key);
        // The era is only looked up for a server that has no kept client (yet).
        const era = pending === undefined ? eras.get(key) : undefined;
        if (pending === undefined && era?.kind === "modern") {
          // Kept from the first call that knows the era (synchronously: concurrent calls share it).
          pending = open(url, current, era, validators);
          kept.set(key, pending);
        }
        return pending === undefined
          ? oneOff(key, url, tool, args, current)
          : onKept(key, pending, tool, args, current);
      });
    },
  };
}
