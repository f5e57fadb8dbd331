/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
 * package.json) against /mcp. The suite's client sends no token, so it talks to a small
 * proxy on loopback that adds the caller's bearer token and passes everything else through.
 * Behind the gateway a downstream MCP server (the SDK's 2.x server package) implements the
 * suite's test tools; it is imported, reviewed and assigned to the caller's policy like any
 * downstream, so the `tools-call-*` scenarios run through the whole enforcement pipeline.
 * Expected failures, each with its reason, are in conformance-baseline.yaml: the suite fails
 * on a failure not listed there and on a listed scenario that now passes.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { CallToolResult, Tool } from "@modelcontextprotocol/server";
import { importMcpServer, previewMcpServer } from "../../../../src/admin/mcp-servers.ts";
import { assignCapability } from "../../../../src/admin/policies.ts";
import { createSubject } from "../../../../src/admin/subjects.ts";
import { type DownstreamMcp, startDownstreamMcp, type ToolHandler } from "../../../helpers/downstream-mcp.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";
import { ALLOWED_ORIGIN, type Harness, PARTNER, startHarness } from "./harness.ts";

const SUITE = join(
  import.meta.dirname,
  "../../../../node_modules/@modelcontextprotocol/conformance/dist/index.js",
);
const BASELINE = join(import.meta.dirname, "conformance-baseline.yaml");
const CAP = "conformance";
// A 1×1 PNG and a tiny WAV header: what the suite asks for (it checks type, data and MIME type).
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

const noArgs = { type: "object" as const, properties: {} };
const text = (value: string): CallToolResult => ({ content: [{ type: "text", text: value }] });

/** The suite's server test tools (its scenario descriptions say what each returns). */
const suiteTools: [Tool, ToolHandler][] = [
  [
    { name: "test_simple_text", description: "Returns simple text.", inputSchema: noArgs },
    () => text("This is a simple text response for testing."),
  ],
  [
    { name: "test_image_content", description: "Returns an image.", inputSchema: noArgs },
    () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] }),
  ],
  [
    { name: "test_audio_content", description: "Returns audio.", inputSchema: noArgs },
    () => ({ content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] }),
  ],
  [
    { name: "test_embedded_resource", description: "Returns an embedded resource.", inputSchema: noArgs },
    () => ({
      content: [
        {
          type: "resource",
          resource: {
            uri: "test://embedded-resource",
            mimeType: "text/plain",
            text: "This is an embedded resource content.",
          },
        },
      ],
    }),
  ],
  [
    {
      name: "test_multiple_content_types",
      description: "Returns text, an image and a resource.",
      inputSchema: noArgs,
    },
    () => ({
      content: [
        { type: "text", text: "Multiple content types test:" },
        { type: "image", data: PNG, mimeType: "image/png" },
        {
          type: "resource",
          resource: {
            uri: "test://mixed-content-resource",
            mimeType: "application/json",
            text: '{"test":"data","value":123}',
          },
        },
      ],
    }),
  ],
  [
    { name: "test_error_handling", description: "Always fails.", inputSchema: noArgs },
    () => ({
      content: [{ type: "text", text: "This tool intentionally returns an error for testing" }],
      isError: true,
    }),
  ],
  [
    { name: "test_tool_with_logging", description: "Logs while it runs.", inputSchema: noArgs },
    async (_args, context) => {
      for (const line of ["Tool execution started", "Tool processing data", "Tool execution completed"])
        await context.log("info", line);
      return text("Logged.");
    },
  ],
  [
    { name: "test_tool_with_progress", description: "Reports progress.", inputSchema: noArgs },
    async (_args, context) => {
      for (const progress of [0, 50, 100])
        await context.notify("notifications/progress", {
          progressToken: context.progressToken,
          progress,
          total: 100,
        });
      return text("Done.");
    },
  ],
  [
    {
      name: "test_sampling",
      description: "Asks the client to sample.",
      inputSchema: { type: "object", properties: { prompt: { type: "string" } }, required: ["prompt"] },
    },
    () => text("sampling is not relayed"),
  ],
  [
    {
      name: "test_elicitation",
      description: "Asks the user.",
      inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
    },
    () => text("elicitation is not relayed"),
  ],
  [
    {
      name: "json_schema_2020_12_tool",
      description: "Tool with JSON Schema 2020-12 features",
      inputSchema: {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        $defs: {
          address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } },
        },
        properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
        additionalProperties: false,
      },
    },
    () => text("ok"),
  ],
];

let h: Harness;
let downstream: DownstreamMcp;
let proxy: Server;
let proxyUrl: string;
let dir: TempDir;

/**
 * The suite's client sends no token: this adds the caller's and passes the rest through
 * (Origin included: the DNS-rebinding scenario checks the gateway's own Origin rule).
 * Listens first, so its origin can be allowed; the target is set once the service runs.
 */
async function startTokenProxy(): Promise<{
  server: Server;
  origin: string;
  target: { url: string; token: string };
}> {
  const target = { url: "", token: "" };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (value === undefined || ["host", "connection", "content-length"].includes(name)) continue;
        headers.set(name, Array.isArray(value) ? value.join(", ") : value);
      }
      headers.set("authorization", `Bearer ${target.token}`);
      const body = Buffer.concat(chunks);
      fetch(target.url, { method: req.method ?? "GET", headers, ...(body.length > 0 ? { body } : {}) })
        .then(async (response) => {
          res.writeHead(response.status, Object.fromEntries(response.headers));
          res.end(Buffer.from(await response.arrayBuffer()));
        })
        .catch(() => {
          res.writeHead(502);
          res.end();
        });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, target };
}

before(async () => {
  dir = await makeTempDir("mcp-conformance-");
  downstream = await startDownstreamMcp(
    suiteTools.map(([tool]) => tool),
    Object.fromEntries(suiteTools.map(([tool, run]) => [tool.name, run])),
  );
  const tokenProxy = await startTokenProxy();
  proxy = tokenProxy.server;
  proxyUrl = `${tokenProxy.origin}/mcp`;
  h = await startHarness({
    mcp: { allowedOrigins: [ALLOWED_ORIGIN, tokenProxy.origin], upstreamTimeoutMs: 10_000 },
    egressAllow: [downstream.url],
  });
  const lister = h.context.mcp.downstreamTools;
  const source = { url: downstream.url, auth_profile_ref: "none", capability_id: CAP };
  const preview = await previewMcpServer(h.context, PARTNER, source, lister);
  await importMcpServer(
    h.context,
    h.actor,
    PARTNER,
    { ...source, name: "Conformance tools", catalog_hash: preview.catalog_hash },
    lister,
  );
  await createSubject(h.context, PARTNER, {
    subject_id: "agent-conformance",
    subject_type: "agent",
    display_name: "suite",
  });
  await assignCapability(h.context, h.actor, PARTNER, "agent-conformance", CAP, {
    allowed_permission_ids: preview.tools.map((tool) => tool.permission_id),
    ttl_seconds: 3600,
  });
  tokenProxy.target.url = `${h.url}/mcp`;
  tokenProxy.target.token = await h.token("agent-conformance");
});

after(async () => {
  await new Promise<void>((resolve) => {
    proxy.closeAllConnections();
    proxy.close(() => resolve());
  });
  await h.close();
  await downstream.close();
  await dir.cleanup();
});

test("the official conformance suite passes against /mcp, except the baseline's expected failures", async () => {
  const output: Buffer[] = [];
  const child = spawn(
    process.execPath,
    [SUITE, "server", "--url", proxyUrl, "--expected-failures", BASELINE, "-o", join(dir.path, "results")],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  child.stdout.on("data", (chunk: Buffer) => output.push(chunk));
  child.stderr.on("data", (chunk: Buffer) => output.push(chunk));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  // The suite colours its report (ESC [ … m).
  const report = Buffer.concat(output)
    .toString("utf8")
    .replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g"), "");
  assert.equal(code, 0, report.slice(-4000));
  assert.match(report, /Baseline check passed/);
  // The tool calls really went through the gateway to the downstream.
  const called = new Set(downstream.calls().map((call) => call.name));
  for (const name of [
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_error_handling",
  ])
    assert.ok(called.has(name), `${name} was not called through /mcp`);
});
