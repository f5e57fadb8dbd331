/**
 * The MCP protocol side, on the SDK's 2.x server package: one low-level server per HTTP
 * request (stateless, so any replica answers any request), with `tools/list` and
 * `tools/call` handed to the caller's McpService. Revisions served: 2026-07-28 (the
 * modern, per-request `_meta` envelope with `server/discover`, no handshake) and the
 * SDK's 2025-era list (`initialize` handshake, answered statelessly).
 *
 * Capabilities are only what this server can do: `tools` without `listChanged` (a
 * stateless server never holds a stream to send the notification on).
 */
import { Server, SUPPORTED_PROTOCOL_VERSIONS } from "@modelcontextprotocol/server";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/server/validators/ajv";
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

export function createProtocolServer(service: McpService, caller: McpCaller): Server {
  const server = new Server(SERVER_INFO, {
    capabilities: { tools: {} },
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
    return service.callTool(caller, request.params.name, request.params.arguments ?? {}, signal);
  });
  return server;
}
