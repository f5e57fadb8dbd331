/**
 * Demo section on hosted MCP (`/mcp`, Streamable HTTP) with the official SDK client: the
 * agent's tool list holds exactly its allowed operations (DELETE is not there), an allowed
 * tool runs against the sample API with the response redacted, and asking for the missing
 * tool by its name is refused.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { toolNameFor } from "../../core/tool-name.ts";
import { DEV_ALLOWED_PERMISSIONS, DEV_NOT_ALLOWED_PERMISSION } from "../names.ts";
import { type DemoContext, isRecord } from "./context.ts";

function textOf(content: unknown): string {
  if (!Array.isArray(content)) return "";
  return content
    .map((part) => (isRecord(part) && typeof part.text === "string" ? part.text : ""))
    .join(" ")
    .trim();
}

/** The precise reason of a tool error result (the JSON error body's `details.reason`, else `error`). */
function errorCodeOf(content: unknown): string {
  try {
    const parsed: unknown = JSON.parse(textOf(content));
    if (!isRecord(parsed)) return "-";
    if (isRecord(parsed.details) && typeof parsed.details.reason === "string") return parsed.details.reason;
    return typeof parsed.error === "string" ? parsed.error : "-";
  } catch {
    return "-";
  }
}

export async function mcpSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  report.section(
    "Hosted MCP (/mcp) with the MCP SDK client",
    "Tools come from the agent's verified policy: one per allowed operation, management tools by role.",
  );
  const token = await ctx.subjectToken("agent");
  const client = new Client({ name: "authority-demo", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${env.urls.authority}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    const byOperation = new Map(tools.map((tool) => [tool.name.replace(/_[0-9a-f]{8}$/, ""), tool.name]));
    const listName = byOperation.get("listCustomers");
    const deleteName = [...byOperation.keys()].find((base) => base === "deleteCustomer");
    report.check({
      label: "tools/list as agent-demo",
      expected: `${DEV_ALLOWED_PERMISSIONS.length} API tools, no deleteCustomer`,
      actual: `${names.length} tools${deleteName === undefined ? ", no deleteCustomer" : ", deleteCustomer LISTED"}`,
      ok:
        names.length >= DEV_ALLOWED_PERMISSIONS.length && deleteName === undefined && listName !== undefined,
      detail: names.join(", "),
    });
    if (listName === undefined) return;
    const result = await client.callTool({ name: listName, arguments: { query: { limit: 2 } } });
    const structured = isRecord(result.structuredContent) ? result.structuredContent : {};
    const body = isRecord(structured.body) ? structured.body : {};
    const first = Array.isArray(body.items) && isRecord(body.items[0]) ? body.items[0] : {};
    report.check({
      label: `tools/call ${listName} {limit: 2}`,
      expected: "upstream 200, e-mails masked, tax ids removed",
      actual: `upstream ${String(structured.status ?? "-")}${
        typeof first.email === "string" && first.email.includes("*")
          ? ", e-mails masked"
          : ", e-mails NOT masked"
      }${first.tax_id === undefined ? ", tax ids removed" : ", tax ids SHOWN"}`,
      ok:
        result.isError !== true &&
        structured.status === 200 &&
        typeof first.email === "string" &&
        first.email.includes("*") &&
        first.tax_id === undefined,
      detail: `first item: ${JSON.stringify(first)}`,
    });
    const outside = await client.callTool({ name: listName, arguments: { query: { limit: 80 } } });
    report.check({
      label: `tools/call ${listName} {limit: 80}`,
      expected: "refused constraint_violation (signed limit ≤ 50)",
      actual:
        outside.isError === true
          ? `refused ${errorCodeOf(outside.content)}${errorCodeOf(outside.content) === "constraint_violation" ? " (signed limit ≤ 50)" : ""}`
          : "RAN",
    });
    const missing = toolNameFor(DEV_NOT_ALLOWED_PERMISSION, "deleteCustomer");
    let outcome: string;
    try {
      const denied = await client.callTool({
        name: missing,
        arguments: { path: { customerId: "cus_00000001" } },
      });
      outcome = denied.isError === true ? `refused: ${textOf(denied.content).slice(0, 80)}` : "RAN";
    } catch (error) {
      outcome = `refused: ${error instanceof Error ? error.message.slice(0, 80) : String(error)}`;
    }
    report.check({
      label: `tools/call ${missing} (not listed)`,
      expected: "refused",
      actual: outcome,
      ok: outcome.startsWith("refused"),
    });
  } finally {
    await client.close();
  }
}
