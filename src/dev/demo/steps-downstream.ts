/**
 * Demo section on a downstream MCP server governed like a REST API: the admin previews the
 * sample helpdesk's tools (listed through the egress gate with the partner's API key),
 * imports exactly the reviewed list with a signed constraint (team must be "support"), and
 * assigns one tool to the demo agent. The agent, on the SDK's 2.x client at 2026-07-28, sees
 * only that tool; one call runs, one is refused by the constraint before anything is sent.
 */
import { type CallToolResult, Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { DEV_AUTH_PROFILE_ID, DEV_MCP_CAPABILITY, DEV_PARTNER, DEV_SUBJECTS } from "../names.ts";
import { HELPDESK_MCP_PATH } from "../sample-helpdesk-mcp.ts";
import { type DemoContext, field, isRecord } from "./context.ts";

const TOOL = "search_tickets";
const rules = {
  [TOOL]: { "x-authority-constraints": [{ in: "body", name: "/team", allowed_values: ["support"] }] },
};

function textOf(result: CallToolResult): string {
  return result.content.map((part) => (part.type === "text" ? part.text : "")).join(" ");
}

function reasonOf(result: CallToolResult): string {
  try {
    const body: unknown = JSON.parse(textOf(result));
    return isRecord(body) && isRecord(body.details) ? String(body.details.reason) : "-";
  } catch {
    return "-";
  }
}

export async function downstreamSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  report.section(
    "A downstream MCP server as a capability",
    "Its tools are reviewed snapshots under a catalog version; policies assign them like REST operations.",
  );
  const admin = { authorization: `Bearer ${await ctx.adminToken()}` };
  const specs = `${env.urls.authority}/partners/${DEV_PARTNER.partnerId}/api-specs`;
  const source = {
    url: `${env.urls.sampleApi}${HELPDESK_MCP_PATH}`,
    capability_id: DEV_MCP_CAPABILITY.capabilityId,
    auth_profile_ref: DEV_AUTH_PROFILE_ID,
    tool_rules: rules,
  };
  const preview = await ctx.json("POST", `${specs}/preview-mcp`, { headers: admin, body: source });
  report.check({
    label: "admin  preview-mcp <sample API>/mcp",
    expected: "200, 2 tools to review",
    actual: `${preview.status}, ${field(preview.body, "tool_count")} tools to review`,
  });
  const imported = await ctx.json("POST", `${specs}/import-mcp`, {
    headers: admin,
    body: { ...source, name: DEV_MCP_CAPABILITY.name, catalog_hash: field(preview.body, "catalog_hash") },
  });
  report.check({
    label: "admin  import-mcp (the reviewed catalog_hash)",
    expected: "stored",
    actual: imported.status === 201 || imported.status === 200 ? "stored" : `HTTP ${imported.status}`,
    detail: `catalog version ${field(imported.body, "catalog_version")}`,
  });
  const agentId = DEV_SUBJECTS.agent.subjectId;
  const assigned = await ctx.json(
    "PUT",
    `${env.urls.authority}/partners/${DEV_PARTNER.partnerId}/caab/subjects/${agentId}/policies/${DEV_MCP_CAPABILITY.capabilityId}`,
    {
      headers: admin,
      body: {
        allowed_permission_ids: [`${DEV_MCP_CAPABILITY.capabilityId}:post:/tools/${TOOL}`],
        ttl_seconds: 3600,
      },
    },
  );
  report.check({
    label: `admin  assign ${TOOL} to ${agentId}`,
    expected: "200",
    actual: String(assigned.status),
  });

  const token = await ctx.subjectToken("agent");
  const client = new Client(
    { name: "authority-demo", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${env.urls.authority}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    }),
  );
  try {
    const { tools } = await client.listTools();
    const names = new Set(tools.map((tool) => tool.name));
    report.check({
      label: "tools/list as agent-demo (2026-07-28)",
      expected: `${TOOL} listed, close_ticket not`,
      actual: `${TOOL} ${names.has(TOOL) ? "listed" : "MISSING"}, close_ticket ${names.has("close_ticket") ? "LISTED" : "not"}`,
    });
    const allowed = (await client.callTool({
      name: TOOL,
      arguments: { team: "support", query: "vpn" },
    })) as CallToolResult;
    report.check({
      label: `tools/call ${TOOL} {team: "support"}`,
      expected: "answered by the downstream",
      actual: allowed.isError === true ? `refused ${reasonOf(allowed)}` : "answered by the downstream",
      detail: textOf(allowed),
    });
    const refused = (await client.callTool({ name: TOOL, arguments: { team: "finance" } })) as CallToolResult;
    report.check({
      label: `tools/call ${TOOL} {team: "finance"}`,
      expected: "refused constraint_violation (signed: team = support)",
      actual: refused.isError === true ? `refused ${reasonOf(refused)} (signed: team = support)` : "RAN",
    });
  } finally {
    await client.close();
  }
}
