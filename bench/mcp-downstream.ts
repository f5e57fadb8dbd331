/**
 * A downstream MCP server behind /mcp, end to end over real HTTP: the authority app (SQLite,
 * dev IdP tokens, local policy keys) and a downstream built with the SDK's 2.x server package
 * on loopback, imported by the admin service (reviewed catalog_hash) and assigned.
 *
 * - tools/call through /mcp against the same call straight to the downstream, both with the
 *   SDK's 2.x client pinned to 2026-07-28 and connected once (each call is one HTTP request;
 *   the gateway remembers the downstream's era, so it also sends one). Interleaved, one at a
 *   time; the added p50 is the difference.
 * - tools/list of 500 downstream tools through /mcp (every page, JSON-RPC over HTTP).
 *
 * Targets: tools/call added p50 ≤ 2 ms; tools/list (500 tools) reported beside the REST one.
 */

import { cpus, loadavg } from "node:os";
import {
  type CallToolResult,
  Client,
  StreamableHTTPClientTransport,
  type Tool,
} from "@modelcontextprotocol/client";
import { importMcpServer, previewMcpServer } from "../src/admin/mcp-servers.ts";
import { assignCapability } from "../src/admin/policies.ts";
import { createSubject } from "../src/admin/subjects.ts";
import { startDownstreamMcp } from "../test/helpers/downstream-mcp.ts";
import { type LatencySummary, startMcpBenchService } from "./mcp.ts";

const PARTNER = "bench";
const CAP = "downstream";
const ITEM = {
  id: "item-1",
  name: "Widget",
  owner: { email: "owner@example.com" },
  tags: Array.from({ length: 20 }, (_, i) => `tag-${i}`),
};

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;
}

interface Samples {
  readonly wall: number[];
  cpuMs: number;
}

function summary(name: string, samples: Samples): LatencySummary {
  const sorted = [...samples.wall].sort((a, b) => a - b);
  const round = (n: number) => Number(n.toFixed(4));
  return {
    name,
    iterations: sorted.length,
    p50Ms: round(percentile(sorted, 50)),
    p99Ms: round(percentile(sorted, 99)),
    meanMs: round(sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length)),
    cpuMsPerOp: round(samples.cpuMs / Math.max(1, sorted.length)),
  };
}

async function timed(samples: Samples, run: () => Promise<unknown>): Promise<void> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  await run();
  samples.wall.push(performance.now() - start);
  const used = process.cpuUsage(cpu);
  samples.cpuMs += (used.user + used.system) / 1000;
}

function tools(count: number): Tool[] {
  const list: Tool[] = [
    {
      name: "get_item",
      description: "Gets one item.",
      inputSchema: {
        type: "object",
        properties: { id: { type: "string", maxLength: 64 } },
        required: ["id"],
      },
    },
  ];
  for (let i = 1; i < count; i++) {
    list.push({
      name: `tool_${i}`,
      description: `Does thing number ${i} of the catalog.`,
      inputSchema: {
        type: "object",
        properties: { name: { type: "string", maxLength: 200 }, quantity: { type: "integer", minimum: 0 } },
        required: ["name"],
      },
    });
  }
  return list;
}

async function modernClient(url: string, headers: Record<string, string>): Promise<Client> {
  const client = new Client(
    { name: "bench", version: "1" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

export async function benchMcpDownstream(
  options: { tools?: number; iterations?: number; warmup?: number } = {},
): Promise<readonly Record<string, string | number>[]> {
  const count = options.tools ?? 500;
  const iterations = options.iterations ?? 500;
  const warmup = options.warmup ?? 50;
  const downstream = await startDownstreamMcp(tools(count), {
    get_item: (args) => ({ content: [{ type: "text", text: JSON.stringify({ ...ITEM, id: args.id }) }] }),
  });
  const service = await startMcpBenchService(1, [downstream.url]);
  const clients: Client[] = [];
  try {
    const { context } = service;
    const actor = { subject: "bench-admin", requestId: "req_bench_downstream" };
    const source = { url: downstream.url, capability_id: CAP, auth_profile_ref: "none" };
    const lister = context.mcp.downstreamTools;
    const preview = await previewMcpServer(context, PARTNER, source, lister);
    await importMcpServer(
      context,
      actor,
      PARTNER,
      { ...source, name: "Downstream", catalog_hash: preview.catalog_hash },
      lister,
    );
    const all = preview.tools.map((tool) => tool.permission_id);
    for (const [subject, allowed] of [
      ["bench-downstream-all", all],
      ["bench-downstream-one", all.slice(0, 1)],
    ] as const) {
      await createSubject(context, PARTNER, {
        subject_id: subject,
        subject_type: "agent",
        display_name: subject,
      });
      await assignCapability(context, actor, PARTNER, subject, CAP, {
        allowed_permission_ids: allowed,
        ttl_seconds: 3600,
      });
    }
    const bigToken = await service.issueToken("bench-downstream-all");
    const oneToken = await service.issueToken("bench-downstream-one");

    // tools/list of every downstream tool through /mcp: all pages, JSON-RPC over HTTP.
    const listAll = async () => {
      let cursor: string | undefined;
      let seen = 0;
      do {
        const response = await fetch(`${service.url}/mcp`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${bigToken}`,
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
          },
          body: JSON.stringify({
            jsonrpc: "2.0",
            id: 1,
            method: "tools/list",
            params: cursor === undefined ? {} : { cursor },
          }),
        });
        const page = ((await response.json()) as { result?: { tools?: unknown[]; nextCursor?: string } })
          .result;
        seen += page?.tools?.length ?? 0;
        cursor = page?.nextCursor;
      } while (cursor !== undefined);
      if (seen !== count) throw new Error(`expected ${count} tools, got ${seen}`);
    };
    const list: Samples = { wall: [], cpuMs: 0 };
    for (let i = 0; i < Math.min(warmup, 20); i++) await listAll();
    for (let i = 0; i < Math.max(20, Math.floor(iterations / 5)); i++) await timed(list, listAll);

    // tools/call: straight to the downstream, and through /mcp, interleaved.
    const direct = await modernClient(downstream.url, {});
    const gateway = await modernClient(`${service.url}/mcp`, { authorization: `Bearer ${oneToken}` });
    clients.push(direct, gateway);
    const call = async (client: Client) => {
      const result = (await client.callTool({
        name: "get_item",
        arguments: { id: "item-1" },
      })) as CallToolResult;
      if (result.isError === true) throw new Error(`get_item failed: ${JSON.stringify(result.content)}`);
    };
    for (let i = 0; i < warmup; i++) {
      await call(direct);
      await call(gateway);
    }
    const directSamples: Samples = { wall: [], cpuMs: 0 };
    const gatewaySamples: Samples = { wall: [], cpuMs: 0 };
    for (let i = 0; i < iterations; i++) {
      await timed(directSamples, () => call(direct));
      await timed(gatewaySamples, () => call(gateway));
    }
    const rows = [
      summary(`tools/list, ${count} downstream tools (all pages)`, list),
      summary("tools/call straight to the downstream", directSamples),
      summary("tools/call through /mcp", gatewaySamples),
    ];
    const [, d, g] = rows;
    return [
      ...rows.map((row) => ({ ...row })),
      {
        name: "added by /mcp (target ≤ 2 ms p50)",
        p50Ms: Number(((g?.p50Ms ?? 0) - (d?.p50Ms ?? 0)).toFixed(4)),
        p99Ms: Number(((g?.p99Ms ?? 0) - (d?.p99Ms ?? 0)).toFixed(4)),
        loadAverage: Number((loadavg()[0] ?? 0).toFixed(2)),
        cores: cpus().length,
      },
    ];
  } finally {
    for (const client of clients) await client.close().catch(() => undefined);
    await service.close();
    await downstream.close();
  }
}
