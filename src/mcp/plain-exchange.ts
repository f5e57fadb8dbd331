/**
 * A 2025-era POST that holds one JSON-RPC request (not `initialize`), handed to the per-request
 * protocol server without the SDK's web transport: no web `Request`, no `Response` read back
 * into bytes. The SDK's Streamable HTTP transport answers such a POST with status 200,
 * `content-type: application/json` and the server's JSON-RPC response as its body; a relayed
 * call whose stream held notifications, with its events (the exchange's reading of the SDK's
 * event stream). So does this, byte for byte (test/servers/authority/mcp/plain-exchange.test.ts).
 *
 * Only a request that passes every check that transport makes is taken here, with the SDK's
 * own predicates (its Accept and Content-Type checks, `parseJSONRPCMessage` — the transport's
 * schema — and the protocol version list the server gives its transport). Everything else —
 * a notification, a batch, `initialize`, a header or message the transport refuses — goes
 * through the SDK's transport, so its answers (and its error answers) stay its own. The
 * protocol server (request schemas, handlers, result encoding, JSON-RPC errors) is the
 * SDK's, unchanged.
 */
import type { IncomingHttpHeaders } from "node:http";
import {
  type AuthInfo,
  isJSONRPCRequest,
  isJsonContentType,
  type JSONRPCMessage,
  type JSONRPCRequest,
  parseJSONRPCMessage,
  type Server,
  type Transport,
} from "@modelcontextprotocol/server";
import { supportedProtocolVersions } from "./protocol-server.ts";

/** A request the SDK's transport would accept as one JSON-RPC request. */
export interface PlainRequest {
  readonly message: JSONRPCRequest;
}

/** What the route sends: the transport's JSON answer, as bytes. */
export interface PlainAnswer {
  readonly status: number;
  readonly headers: [string, string][];
  readonly body: Buffer;
}

/** A header as a web `Headers` reads it (repeated values joined). */
export function headerOf(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * The request, when the SDK's transport would take it as one JSON-RPC request (its checks,
 * in its order: Accept, Content-Type, the message schema, not `initialize`, the protocol
 * version header); undefined leaves it to that transport.
 */
export function plainRequestOf(headers: IncomingHttpHeaders, body: unknown): PlainRequest | undefined {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return undefined;
  const accept = headerOf(headers, "accept");
  if (!accept?.includes("application/json") || !accept.includes("text/event-stream")) return undefined;
  if (!isJsonContentType(headerOf(headers, "content-type"))) return undefined;
  let message: JSONRPCMessage;
  try {
    message = parseJSONRPCMessage(body);
  } catch {
    return undefined;
  }
  // Any `initialize` (the transport's own predicate takes only a valid one) stays with the transport.
  if (!isJSONRPCRequest(message) || message.method === "initialize") return undefined;
  const version = headerOf(headers, "mcp-protocol-version");
  if (version !== undefined && !supportedProtocolVersions.includes(version)) return undefined;
  return { message };
}

/** Headers of the SDK transport's event stream as the exchange sends it (its `connection` dropped). */
const EVENT_STREAM_HEADERS: [string, string][] = [
  ["cache-control", "no-cache, no-transform"],
  ["content-type", "text/event-stream"],
  ["x-accel-buffering", "no"],
];

interface OneResponseTransport extends Transport {
  /** The messages of the request's stream, in order, its response last. */
  readonly messages: Promise<JSONRPCMessage[]>;
}

/**
 * The one response to `id` the server sends, after the notifications it sends for that request
 * when they are relayed; otherwise they are dropped, as the SDK's JSON transport drops them
 * (and so is any message not sent for the request, as a stateless POST has no other stream).
 */
function oneResponseTransport(id: JSONRPCRequest["id"], relay: boolean): OneResponseTransport {
  const { promise, resolve } = Promise.withResolvers<JSONRPCMessage[]>();
  const messages: JSONRPCMessage[] = [];
  const transport: OneResponseTransport = {
    messages: promise,
    async start() {},
    async send(message, options) {
      if ("result" in message || "error" in message) {
        if (message.id !== id) return;
        messages.push(message);
        resolve(messages);
      } else if (relay && options?.relatedRequestId === id) messages.push(message);
    },
    async close() {
      transport.onclose?.();
    },
  };
  return transport;
}

/**
 * Connects `server` to the request and answers as the SDK's transport does: the response in
 * JSON; when notifications are relayed and some came, the whole stream of events (what the
 * exchange sends for a stream that holds more than the response).
 */
export async function answerPlainRequest(
  server: Server,
  request: PlainRequest,
  authInfo: AuthInfo,
  relay: boolean,
): Promise<PlainAnswer> {
  const transport = oneResponseTransport(request.message.id, relay);
  await server.connect(transport);
  transport.onmessage?.(request.message, { authInfo });
  const messages = await transport.messages;
  if (messages.length === 1) {
    return {
      status: 200,
      headers: [["content-type", "application/json"]],
      body: Buffer.from(JSON.stringify(messages[0])),
    };
  }
  return {
    status: 200,
    headers: EVENT_STREAM_HEADERS.map(([name, value]) => [name, value]),
    body: Buffer.from(
      messages.map((message) => `event: message\ndata: ${JSON.stringify(message)}\n\n`).join(""),
    ),
  };
}
