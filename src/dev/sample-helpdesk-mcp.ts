/**
 * The development environment's downstream MCP server, a small helpdesk built with the SDK's
 * 2.x server package and served by the sample API at `/mcp` (its port is already the one the
 * egress allow list opens). It needs the sample API's key (`x-api-key`, the auth profile the
 * authority injects), so the demo shows a downstream credential that agents never see.
 */
import { type CallToolResult, createMcpHandler, Server, type Tool } from "@modelcontextprotocol/server";

export const HELPDESK_MCP_PATH = "/mcp";

const tickets = [
  { id: "t-101", team: "support", title: "Printer on floor 3 is offline" },
  { id: "t-102", team: "support", title: "VPN drops every hour" },
  { id: "t-201", team: "finance", title: "Payroll export for March" },
];

export const helpdeskTools: readonly Tool[] = [
  {
    name: "search_tickets",
    title: "Search tickets",
    description: "Searches the helpdesk's tickets of one team.",
    inputSchema: {
      type: "object",
      properties: { team: { type: "string" }, query: { type: "string", maxLength: 200 } },
      required: ["team"],
      additionalProperties: false,
    },
    annotations: { readOnlyHint: true },
  },
  {
    name: "close_ticket",
    description: "Closes a ticket.",
    inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
    annotations: { destructiveHint: true },
  },
];

function search(args: Record<string, unknown>): CallToolResult {
  const query = typeof args.query === "string" ? args.query.toLowerCase() : "";
  const found = tickets.filter((t) => t.team === args.team && t.title.toLowerCase().includes(query));
  return {
    content: [{ type: "text", text: found.map((t) => `${t.id}: ${t.title}`).join("\n") || "no tickets" }],
  };
}

/** The MCP endpoint: its handler answers one Streamable HTTP request (a web Request). */
export function createHelpdeskMcpHandler(): ReturnType<typeof createMcpHandler> {
  return createMcpHandler(() => {
    const server = new Server({ name: "sample-helpdesk", version: "1.0.0" }, { capabilities: { tools: {} } });
    server.setRequestHandler("tools/list", async () => ({ tools: [...helpdeskTools] }));
    server.setRequestHandler("tools/call", async (request) => {
      const args = request.params.arguments ?? {};
      if (request.params.name === "search_tickets") return search(args);
      if (request.params.name === "close_ticket")
        return { content: [{ type: "text", text: `closed ${String(args.id)}` }] };
      return { content: [{ type: "text", text: "no such tool" }], isError: true };
    });
    return server;
  });
}
