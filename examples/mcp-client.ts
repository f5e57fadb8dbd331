/**
 * Connects to the authority service's hosted MCP endpoint with the official SDK client,
 * lists the tools this caller may use and, when asked, calls one.
 *
 *   node examples/mcp-client.ts                         # list tools
 *   node examples/mcp-client.ts <tool> '{"path":{…}}'   # call a tool with arguments
 *
 * Environment:
 *   AUTHORITY_URL            the service (default http://127.0.0.1:8080)
 *   AUTHORITY_TOKEN          a bearer token, or else client credentials for the IdP:
 *   AUTHORITY_IDP_TOKEN_URL  (default http://127.0.0.1:8083/oauth2/token)
 *   AUTHORITY_CLIENT_ID, AUTHORITY_CLIENT_SECRET
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { requestToken } from "../src/identity/token-client.ts";

async function bearerToken(): Promise<string> {
  const given = process.env.AUTHORITY_TOKEN;
  if (given !== undefined && given !== "") return given;
  const clientId = process.env.AUTHORITY_CLIENT_ID;
  const clientSecret = process.env.AUTHORITY_CLIENT_SECRET;
  if (clientId === undefined || clientSecret === undefined) {
    throw new Error("set AUTHORITY_TOKEN, or AUTHORITY_CLIENT_ID and AUTHORITY_CLIENT_SECRET");
  }
  const token = await requestToken({
    tokenUrl: process.env.AUTHORITY_IDP_TOKEN_URL ?? "http://127.0.0.1:8083/oauth2/token",
    grant: { type: "client_credentials", clientId, clientSecret },
  });
  return token.accessToken;
}

const base = process.env.AUTHORITY_URL ?? "http://127.0.0.1:8080";
const [toolName, rawArguments] = process.argv.slice(2);

const client = new Client({ name: "authority-example", version: "1.0.0" });
// Stateless Streamable HTTP: every request carries the bearer token; no session is kept.
const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), {
  requestInit: { headers: { authorization: `Bearer ${await bearerToken()}` } },
});
await client.connect(transport);
try {
  const { tools } = await client.listTools();
  if (toolName === undefined) {
    for (const tool of tools) {
      const firstLine = tool.description?.split("\n")[0] ?? "";
      console.log(`${tool.name}\n    ${firstLine}`);
    }
    console.log(`\n${tools.length} tools`);
  } else {
    const args: Record<string, unknown> = rawArguments === undefined ? {} : JSON.parse(rawArguments);
    const result = await client.callTool({ name: toolName, arguments: args });
    // API tools answer { status, headers, body, redaction_events }; errors come back as
    // isError results whose text is the service's error body.
    console.log(JSON.stringify(result.structuredContent ?? result.content, null, 2));
    if (result.isError === true) process.exitCode = 1;
  }
} catch (error) {
  // A tool this caller may not use is answered exactly like one that does not exist.
  console.error(error instanceof Error ? error.message : String(error));
  process.exitCode = 1;
} finally {
  await client.close();
}
