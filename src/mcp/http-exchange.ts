/**
 * One POST to /mcp, answered by the SDK's 2.x serving entries: a 2026-07-28 request (its
 * `_meta` envelope names the revision; no handshake, no session) goes to the modern
 * handler, anything else to a stateless 2025-era per-request server answering in plain JSON
 * (a tool call that relays a downstream's notifications: an SSE stream, notification-relay.ts)
 * — one request through plain-exchange.ts, the rest through the SDK's transport. The
 * caller is already authenticated by the route; it reaches the per-request server through
 * `authInfo` and never through anything the client sent. Transport-free otherwise: the
 * route hands in the parsed body and gets status, headers and bytes back.
 */
import type { IncomingHttpHeaders } from "node:http";
import {
  type AuthInfo,
  classifyInboundRequest,
  createMcpHandler,
  WebStandardStreamableHTTPServerTransport,
} from "@modelcontextprotocol/server";
import { sseData } from "./downstream-client.ts";
import { answerPlainRequest, headerOf, type PlainRequest, plainRequestOf } from "./plain-exchange.ts";
import { createLogLevels, createProtocolServer } from "./protocol-server.ts";
import { mcpResourceUrl } from "./resource-metadata.ts";
import type { McpCaller, McpService } from "./service.ts";

/** The route's parse of the body: JSON (within the service's bounds), or text that is not JSON. */
export type McpBody = { readonly kind: "json"; readonly value: unknown } | { readonly kind: "malformed" };

/** Revisions that still had JSON-RPC batches (2025-06-18 removed them). */
const BATCH_REVISIONS = new Set(["2024-11-05", "2025-03-26"]);
/** Largest batch answered where batches exist: one POST is not a work queue. */
export const MAX_BATCH_MESSAGES = 32;

/** Request headers the SDK reads; hop-by-hop and body framing ones stay behind. */
const DROPPED_HEADERS = new Set(["host", "connection", "content-length", "transfer-encoding", "keep-alive"]);

export interface McpAnswer {
  readonly status: number;
  readonly headers: [string, string][];
  readonly body: Buffer;
}

export interface McpExchange {
  /** Why a JSON-RPC batch is refused (undefined when the body is no batch, or one allowed). */
  refuseBatch(body: unknown, protocolHeader: string | string[] | undefined): string | undefined;
  answer(input: {
    readonly headers: IncomingHttpHeaders;
    readonly body: unknown;
    readonly caller: McpCaller;
  }): Promise<McpAnswer>;
}

/** The request's headers as name/value pairs (Node's names are unique and lowercase): copied once, by the `Request`. */
function webHeaders(headers: IncomingHttpHeaders): [string, string][] {
  const result: [string, string][] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || DROPPED_HEADERS.has(name)) continue;
    result.push([name, Array.isArray(value) ? value.join(", ") : value]);
  }
  return result;
}

/**
 * Whether the SDK's entry routes this POST to its 2025-era serving: its own classification
 * (`classifyInboundRequest`, what `isLegacyRequest` runs for a parsed body), fed the same
 * headers a web `Request` would give it.
 */
function isLegacy(headers: IncomingHttpHeaders, body: unknown): boolean {
  const protocolVersionHeader = headerOf(headers, "mcp-protocol-version");
  const mcpMethodHeader = headerOf(headers, "mcp-method");
  const mcpNameHeader = headerOf(headers, "mcp-name");
  return (
    classifyInboundRequest({
      httpMethod: "POST",
      ...(protocolVersionHeader === undefined ? {} : { protocolVersionHeader }),
      ...(mcpMethodHeader === undefined ? {} : { mcpMethodHeader }),
      ...(mcpNameHeader === undefined ? {} : { mcpNameHeader }),
      body,
    }).kind === "legacy"
  );
}

/** The caller as the SDK carries it to the factory: scopes and client for display only. */
function authInfoOf(caller: McpCaller): AuthInfo {
  return {
    token: "",
    clientId: caller.principal.clientId ?? "",
    scopes: [...caller.principal.scopes],
    extra: { caller },
  };
}

function callerOf(authInfo: AuthInfo | undefined): McpCaller {
  const caller = authInfo?.extra?.caller as McpCaller | undefined;
  // The route authenticates before anything reaches here; a request without it is a defect.
  if (caller === undefined) throw new Error("an MCP server was asked for without an authenticated caller");
  return caller;
}

async function answerOf(response: Response): Promise<McpAnswer> {
  return {
    status: response.status,
    headers: [...response.headers],
    body: Buffer.from(await response.arrayBuffer()),
  };
}

/** The tool a tools/call names ("" when it names none: the SDK refuses it). */
function toolNameOf(body: unknown): string {
  const params = (body as { params?: { name?: unknown } }).params;
  return typeof params?.name === "string" ? params.name : "";
}

function isToolCall(body: unknown): boolean {
  return (
    typeof body === "object" &&
    body !== null &&
    !Array.isArray(body) &&
    (body as { method?: unknown }).method === "tools/call" &&
    "id" in body
  );
}

function acceptsEventStream(accept: string | undefined): boolean {
  return accept?.toLowerCase().includes("text/event-stream") === true;
}

/** Headers of a streamed answer that describe a connection this route does not hold open. */
const STREAM_ONLY_HEADERS = new Set([
  "connection",
  "content-type",
  "content-length",
  "cache-control",
  "x-accel-buffering",
]);

/**
 * A 2025-era tool call's event stream, read whole: as it is when it carries notifications
 * besides the response, otherwise the response alone as one JSON body (what the call answered
 * before anything was relayed, and what a client without a stream reader expects).
 */
async function collapsedStream(response: Response): Promise<McpAnswer> {
  const answer = await answerOf(response);
  if (!(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) return answer;
  const events = sseData(answer.body.toString("utf8"));
  const headers = answer.headers.filter(([name]) => name.toLowerCase() !== "connection");
  if (events.length !== 1) return { ...answer, headers };
  return {
    status: answer.status,
    headers: [
      ...headers.filter(([name]) => !STREAM_ONLY_HEADERS.has(name.toLowerCase())),
      ["content-type", "application/json"],
    ],
    body: Buffer.from(events[0] ?? ""),
  };
}

export function createMcpExchange(options: {
  readonly service: McpService;
  readonly publicUrl: string;
}): McpExchange {
  const { service } = options;
  const endpoint = mcpResourceUrl(options.publicUrl);
  const logLevels = createLogLevels();
  const modern = createMcpHandler(
    (context) => createProtocolServer(service, callerOf(context.authInfo), logLevels),
    {
      legacy: "reject",
    },
  );

  return {
    refuseBatch(body, protocolHeader) {
      if (!Array.isArray(body)) return undefined;
      // Without the header a server assumes 2025-03-26 (Streamable HTTP, protocol version header).
      const revision = typeof protocolHeader === "string" ? protocolHeader : "2025-03-26";
      if (!BATCH_REVISIONS.has(revision))
        return `Invalid request: protocol revision ${revision} has no batches.`;
      if (body.length === 0) return "Invalid request: an empty batch.";
      if (body.length > MAX_BATCH_MESSAGES) {
        return `Invalid request: a batch holds at most ${MAX_BATCH_MESSAGES} messages.`;
      }
      return undefined;
    },

    async answer({ headers, body, caller }) {
      const authInfo = authInfoOf(caller);
      if (!isLegacy(headers, body)) {
        return answerOf(await modern.fetch(webRequest(headers, caller), { parsedBody: body, authInfo }));
      }
      // A tool call may relay a downstream's notifications: its answer is a stream of events
      // (read whole here), sent as JSON when it holds only the response. Only a downstream MCP
      // tool has notifications to relay: an API tool's answer is JSON (decision 2841).
      const streamed =
        isToolCall(body) &&
        acceptsEventStream(headers.accept) &&
        (await service.mayRelay(caller, toolNameOf(body)));
      const server = createProtocolServer(service, caller, logLevels);
      // One request that passes every check of the SDK's transport is answered without its web
      // Request and Response (decision 3151); anything else goes through it. Once its one
      // response is out the server holds nothing (no pending request, no timer): it is dropped,
      // not closed.
      const plain: PlainRequest | undefined = plainRequestOf(headers, body);
      if (plain !== undefined) return answerPlainRequest(server, plain, authInfo, streamed);
      try {
        const transport = new WebStandardStreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: !streamed,
        });
        await server.connect(transport);
        const response = await transport.handleRequest(webRequest(headers, caller), {
          parsedBody: body,
          authInfo,
        });
        if (streamed) return await collapsedStream(response);
        return await answerOf(response);
      } finally {
        // Its answer is read: nothing is pending (its close captures no stack, protocol-server.ts).
        void server.close().catch(() => undefined);
      }
    },
  };

  function webRequest(headers: IncomingHttpHeaders, caller: McpCaller): Request {
    return new Request(endpoint, {
      method: "POST",
      headers: webHeaders(headers),
      ...(caller.signal === undefined ? {} : { signal: caller.signal }),
    });
  }
}
