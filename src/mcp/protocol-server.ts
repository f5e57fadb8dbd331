/**
 * The MCP protocol side, on the SDK's 2.x server package: one low-level server per HTTP
 * request (stateless, so any replica answers any request), with `tools/list` and
 * `tools/call` handed to the caller's McpService. Revisions served: 2026-07-28 (the
 * modern, per-request `_meta` envelope with `server/discover`, no handshake) and the
 * SDK's 2025-era list (`initialize` handshake, answered statelessly).
 *
 * Capabilities are only what this server can do: `tools` without `listChanged` (a
 * stateless server never holds a stream to send the notification on), and `logging`: a
 * governed downstream's log lines (and progress) are relayed on the call's own response
 * stream (notification-relay.ts).
 */
import { createHash } from "node:crypto";
import {
  type CallToolResult,
  LOG_LEVEL_META_KEY,
  Server,
  type ServerContext,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "@modelcontextprotocol/server";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/server/validators/ajv";
import { LRUCache } from "lru-cache";
import {
  createNotificationRelay,
  DROPPED_NOTIFICATIONS_META,
  isLogLevel,
  type NotificationRelay,
  withNotificationRelay,
} from "./notification-relay.ts";
import type { McpCaller, McpService } from "./service.ts";
import { pageOfTools } from "./tool-pages.ts";

export const SERVER_INFO = { name: "authority", title: "Authority hosted MCP", version: "0.1.0" } as const;

/** The stateless, envelope-per-request revision (no `initialize`, `server/discover` instead). */
export const MODERN_PROTOCOL_VERSION = "2026-07-28";

/** Every revision /mcp answers, newest first; 2025-era ones through the `initialize` handshake. */
export const supportedProtocolVersions: readonly string[] = [
  MODERN_PROTOCOL_VERSION,
  ...SUPPORTED_PROTOCOL_VERSIONS,
];

const INSTRUCTIONS =
  "Tools are chosen for the authenticated caller: management tools by role, API tools by the caller's active policy. " +
  "Every call is authorized again when it runs; a revoked or expired policy stops all API tools at once.";

// One shared instance keeps each per-request server cheap (this server never validates
// elicitation answers, the only use the SDK has for it).
const sharedValidator = new AjvJsonSchemaValidator();

/**
 * The log level each client set with `logging/setLevel` (2025 revisions): those requests are
 * stateless too, so the level is kept per bearer token (its hash), for a later call of the
 * same client on this replica. One that never set a level gets every level (the revisions
 * leave it to the server); on another replica, the same.
 */
export interface LogLevels {
  get(caller: McpCaller): string | undefined;
  set(caller: McpCaller, level: string): void;
}

export function createLogLevels(max = 10_000): LogLevels {
  const levels = new LRUCache<string, string>({ max, ttl: 3_600_000 });
  const keyOf = (caller: McpCaller) =>
    caller.token === undefined
      ? undefined
      : createHash("sha256").update(caller.token.value).digest("base64url");
  return {
    get(caller) {
      const key = keyOf(caller);
      return key === undefined ? undefined : levels.get(key);
    },
    set(caller, level) {
      const key = keyOf(caller);
      if (key !== undefined) levels.set(key, level);
    },
  };
}

/**
 * The relay of one tools/call: the caller's progress token, and its log level — a 2026-07-28
 * request's own (`_meta`; none: no log lines, as the revision says), else the one its client set.
 * None when the caller takes neither (a 2026-07-28 request with no token and no level): nothing is
 * set up, and the downstream is sent no token (decision 3191).
 */
function relayFor(
  request: { params: { _meta?: Record<string, unknown> } },
  context: ServerContext,
  caller: McpCaller,
  logLevels: LogLevels,
): NotificationRelay | undefined {
  const token = request.params._meta?.progressToken;
  const envelope = context.mcpReq.envelope as Readonly<Record<string, unknown>> | undefined;
  const modernLevel = envelope?.[LOG_LEVEL_META_KEY];
  const takesProgress = typeof token === "string" || typeof token === "number";
  if (envelope !== undefined && !takesProgress && !isLogLevel(modernLevel)) return undefined;
  // The level a 2025-era client set is looked up (a hash of its token) only if a log line comes.
  const logLevel = (): string | undefined =>
    envelope === undefined
      ? (logLevels.get(caller) ?? "debug")
      : isLogLevel(modernLevel)
        ? modernLevel
        : undefined;
  return createNotificationRelay({
    progressToken: takesProgress ? token : undefined,
    logLevel,
    notify: (notification) =>
      context.mcpReq.notify(notification as Parameters<ServerContext["mcpReq"]["notify"]>[0]),
  });
}

/** The result, saying how many of the downstream's notifications were dropped (when any were). */
function withDropped(result: CallToolResult, relay: NotificationRelay): CallToolResult {
  const { limit, scrub } = relay.dropped;
  if (limit === 0 && scrub === 0) return result;
  return { ...result, _meta: { ...result._meta, [DROPPED_NOTIFICATIONS_META]: { limit, scrub } } };
}

/**
 * A per-request server whose close captures no stack. The SDK's close builds a "Connection
 * closed" error for the requests still pending — none once the answer was read — and capturing
 * its stack was 1–1.5 % of a tool call's CPU (decision 2841; the 2026-07-28 handler closes the
 * server itself, after the answer, so the close is quietened here for both paths, decision 2931).
 */
class PerRequestServer extends Server {
  protected override _onclose(): void {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super._onclose();
    } finally {
      Error.stackTraceLimit = limit;
    }
  }
}

export function createProtocolServer(service: McpService, caller: McpCaller, logLevels: LogLevels): Server {
  const server = new PerRequestServer(SERVER_INFO, {
    capabilities: { tools: {}, logging: {} },
    instructions: INSTRUCTIONS,
    jsonSchemaValidator: sharedValidator,
    supportedProtocolVersions: [...supportedProtocolVersions],
  });
  server.setRequestHandler("tools/list", async (request) =>
    pageOfTools(await service.listTools(caller), request.params?.cursor),
  );
  server.setRequestHandler("tools/call", async (request, context) => {
    const signal =
      caller.signal === undefined
        ? context.mcpReq.signal
        : AbortSignal.any([context.mcpReq.signal, caller.signal]);
    const relay = relayFor(request, context, caller, logLevels);
    const call = () => service.callTool(caller, request.params.name, request.params.arguments ?? {}, signal);
    if (relay === undefined) return call();
    return withDropped(await withNotificationRelay(relay, call), relay);
  });
  server.setRequestHandler("logging/setLevel", async (request) => {
    logLevels.set(caller, request.params.level);
    return {};
  });
  return server;
}
