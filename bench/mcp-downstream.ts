/**
 * A downstream MCP server behind /mcp, end to end over real HTTP: the authority app (SQLite,
 * dev IdP tokens, local policy keys) and a downstream built with the SDK's 2.x server package
 * on loopback, imported by the admin service (reviewed catalog_hash) and assigned.
 *
 * - tools/call through /mcp against the same call straight to the downstream, both with the
 *   SDK's 2.x client pinned to 2026-07-28 and connected once (each call is one HTTP request;
 *   the gateway remembers the downstream's era, so it also sends one). The client's request is
 *   captured once and replayed by the generator process (bench/lib/http-caller.ts; its CPU
 *   reported apart). Interleaved, one at a time, over rounds of fresh downstreams and
 *   services, each in a fresh process (bench/lib/world-process.ts); the added p50 is the median over the rounds, the spread beside it.
 * - tools/list of 500 downstream tools through /mcp (every page, JSON-RPC over HTTP).
 *
 * Targets: tools/call added p50 ≤ 2 ms; tools/list (500 tools) reported beside the REST one.
 */

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
import { type CallTarget, type HttpCaller, startHttpCaller } from "./lib/http-caller.ts";
import { alternateBlocks, figureRow, metByMedian, percentile } from "./lib/rounds.ts";
import { type ServedWorld, startWorldProcess } from "./lib/world-process.ts";
import { startMcpBenchService } from "./mcp.ts";

const PARTNER = "bench";
const CAP = "downstream";
const ITEM = {
  id: "item-1",
  name: "Widget",
  owner: { email: "owner@example.com" },
  tags: Array.from({ length: 20 }, (_, i) => `tag-${i}`),
};

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

/** One round's figures: a fresh downstream and service, a fresh measurement window. */
interface DownstreamRound {
  readonly listP50Ms: number;
  readonly directP50Ms: number;
  readonly directP99Ms: number;
  readonly gatewayP50Ms: number;
  readonly gatewayP99Ms: number;
  readonly serverCpuMsPerCall: number;
  readonly loopCpuMsPerCall: number;
  readonly generatorCpuMsPerCall: number;
}

const ADDED_P50_TARGET_MS = 2;

async function modernClient(
  url: string,
  headers: Record<string, string>,
  seen: CallTarget[],
): Promise<Client> {
  const client = new Client(
    { name: "bench", version: "1" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  // Every request the SDK client sends is kept, so the generator replays its tools/call byte for byte.
  const recording: typeof fetch = async (input, init) => {
    if (typeof init?.body === "string") {
      const sent = new Headers(init.headers);
      seen.push({
        url: input instanceof Request ? input.url : String(input),
        method: init.method ?? "GET",
        headers: Object.fromEntries(
          [...sent.entries()].filter(([name]) => !["content-length", "host", "connection"].includes(name)),
        ),
        body: init.body,
      });
    }
    return fetch(input, init);
  };
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, fetch: recording }),
  );
  return client;
}

/**
 * `rounds` fresh downstreams and services. In each: tools/list (every page) from this process;
 * the SDK client's own tools/call request (captured once) replayed one at a time by the
 * generator process, straight to the downstream and through /mcp, alternating in blocks.
 */
export async function benchMcpDownstream(
  options: { tools?: number; rounds?: number; iterations?: number; warmup?: number } = {},
): Promise<readonly Record<string, string | number>[]> {
  const count = options.tools ?? 500;
  const roundCount = options.rounds ?? 5;
  const iterations = options.iterations ?? 240;
  // A fresh process per round: enough calls for the JIT before the window opens.
  const warmup = options.warmup ?? 200;
  const caller = startHttpCaller();
  const rounds: DownstreamRound[] = [];
  try {
    for (let round = 0; round < roundCount; round++) {
      rounds.push(await downstreamRound(caller, count, iterations, warmup));
    }
  } finally {
    await caller.close();
  }
  const column = (pick: (round: DownstreamRound) => number) => rounds.map(pick);
  const added = column((r) => r.gatewayP50Ms - r.directP50Ms);
  return [
    figureRow(
      `tools/list p50, ${count} downstream tools (all pages)`,
      column((r) => r.listP50Ms),
    ),
    figureRow(
      "tools/call straight to the downstream, p50",
      column((r) => r.directP50Ms),
    ),
    figureRow(
      "tools/call through /mcp, p50",
      column((r) => r.gatewayP50Ms),
    ),
    figureRow(
      "added by /mcp, p50",
      added,
      `≤ ${ADDED_P50_TARGET_MS} ms`,
      metByMedian(added, ADDED_P50_TARGET_MS),
    ),
    figureRow(
      "added by /mcp, p99",
      column((r) => r.gatewayP99Ms - r.directP99Ms),
    ),
    figureRow(
      "CPU per call through /mcp: service + downstream (all threads)",
      column((r) => r.serverCpuMsPerCall),
    ),
    figureRow(
      "CPU per call through /mcp: its event loop",
      column((r) => r.loopCpuMsPerCall),
    ),
    figureRow(
      "CPU per call through /mcp: the client (generator process)",
      column((r) => r.generatorCpuMsPerCall),
    ),
  ];
}

/** What the world process hands the bench. */
interface DownstreamWorldInfo {
  readonly serviceUrl: string;
  readonly downstreamUrl: string;
  readonly bigToken: string;
  readonly oneToken: string;
}

/**
 * A downstream of `count` tools, imported and assigned on the MCP bench service, served in a
 * world process (bench/lib/world-process.ts).
 */
export async function serveDownstreamWorld(count: unknown): Promise<ServedWorld<DownstreamWorldInfo>> {
  const downstream = await startDownstreamMcp(tools(Number(count)), {
    get_item: (args) => ({ content: [{ type: "text", text: JSON.stringify({ ...ITEM, id: args.id }) }] }),
  });
  const service = await startMcpBenchService(1, [downstream.url]);
  const close = async () => {
    await service.close();
    await downstream.close();
  };
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

    return {
      info: { serviceUrl: service.url, downstreamUrl: downstream.url, bigToken, oneToken },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

async function downstreamRound(
  caller: HttpCaller,
  count: number,
  iterations: number,
  warmup: number,
): Promise<DownstreamRound> {
  const world = await startWorldProcess<DownstreamWorldInfo>(import.meta.url, "serveDownstreamWorld", count);
  const { bigToken, oneToken } = world.info;
  const service = { url: world.info.serviceUrl };
  const downstream = { url: world.info.downstreamUrl };
  const clients: Client[] = [];
  try {
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
    const list: number[] = [];
    for (let i = 0; i < 10; i++) await listAll();
    for (let i = 0; i < 20; i++) {
      const start = performance.now();
      await listAll();
      list.push(performance.now() - start);
    }

    // tools/call: the SDK client's request, straight to the downstream and through /mcp.
    const directSent: CallTarget[] = [];
    const gatewaySent: CallTarget[] = [];
    const direct = await modernClient(downstream.url, {}, directSent);
    const gateway = await modernClient(
      `${service.url}/mcp`,
      { authorization: `Bearer ${oneToken}` },
      gatewaySent,
    );
    clients.push(direct, gateway);
    const call = async (client: Client) => {
      const result = (await client.callTool({
        name: "get_item",
        arguments: { id: "item-1" },
      })) as CallToolResult;
      if (result.isError === true) throw new Error(`get_item failed: ${JSON.stringify(result.content)}`);
    };
    await call(direct);
    await call(gateway);
    const replay = (sent: CallTarget[]): CallTarget => {
      const request = sent.findLast((target) => target.body?.includes('"tools/call"') === true);
      if (request === undefined) throw new Error("the SDK client sent no tools/call");
      // The item's text, JSON in a string: the call reached get_item and was answered.
      return { ...request, expect: '\\"id\\":\\"item-1\\"' };
    };
    const directTarget = replay(directSent);
    const gatewayTarget = replay(gatewaySent);
    await caller.sequential(directTarget, warmup);
    await caller.sequential(gatewayTarget, warmup);
    const window = await alternateBlocks({
      caller,
      world,
      direct: directTarget,
      gateway: gatewayTarget,
      iterations,
    });
    return {
      listP50Ms: percentile(list, 50),
      directP50Ms: percentile(window.direct, 50),
      directP99Ms: percentile(window.direct, 99),
      gatewayP50Ms: percentile(window.gateway, 50),
      gatewayP99Ms: percentile(window.gateway, 99),
      serverCpuMsPerCall: window.serverCpuMsPerCall,
      loopCpuMsPerCall: window.loopCpuMsPerCall,
      generatorCpuMsPerCall: window.generatorCpuMsPerCall,
    };
  } finally {
    for (const client of clients) await client.close().catch(() => undefined);
    await world.close();
  }
}
