/**
 * The MCP protocol side: one SDK server per HTTP request (stateless Streamable HTTP, so
 * any replica can answer any request), with `tools/list` and `tools/call` handed to the
 * caller's McpService. Protocol versions are the SDK's own: every version the installed
 * SDK supports is accepted (`SUPPORTED_PROTOCOL_VERSIONS`), an unknown one in
 * `initialize` is answered with the latest.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import type { McpCaller, McpService } from "./service.ts";

export const SERVER_INFO = { name: "authority", title: "Authority hosted MCP", version: "0.1.0" } as const;

export const supportedProtocolVersions: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS;

const INSTRUCTIONS =
  "Tools are chosen for the authenticated caller: management tools by role, API tools by the caller's active policy. " +
  "Every call is authorized again when it runs; a revoked or expired policy stops all API tools at once.";

// The SDK builds an ajv instance per server unless given one; this server never
// validates elicitation answers, so one shared instance keeps each request cheap.
const sharedValidator = new AjvJsonSchemaValidator();

export function createProtocolServer(service: McpService, caller: McpCaller): McpServer {
  const mcp = new McpServer(SERVER_INFO, {
    capabilities: { tools: { listChanged: false } },
    instructions: INSTRUCTIONS,
    jsonSchemaValidator: sharedValidator,
  });
  mcp.server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: await service.listTools(caller),
  }));
  mcp.server.setRequestHandler(CallToolRequestSchema, async (request, extra) =>
    service.callTool(caller, request.params.name, request.params.arguments ?? {}, extra.signal),
  );
  return mcp;
}
