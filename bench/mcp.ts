/**
 * Hosted MCP, end to end over real HTTP against the real authority app (SQLite store,
 * dev IdP tokens, local policy keys, a loopback upstream):
 *
 * - tools/list for a subject whose policy allows 500 operations (JSON-RPC over HTTP, the
 *   server's whole work: token, policy load + verify cache, cached tool list, serialization);
 *   the same through the SDK client is reported for information (it adds client parsing).
 * - tools/call overhead: the same GET straight to the upstream with fetch, and through
 *   /mcp tools/call (authentication, decision, audit, auth injection, redaction, MCP
 *   framing); the added p50 is the difference. Calls run one at a time, interleaved, from a
 *   generator process of its own (its CPU reported apart), over rounds, each a fresh service in
 *   a fresh process (bench/lib/world-process.ts). The
 *   target is for the usual policy (a handful of operations); the same call under the
 *   500-operation policy is reported too, because the verified-policy path reads the
 *   whole stored policy record on every call.
 *
 * Targets: tools/list ≤ 20 ms p50; tools/call added p50 ≤ 1.5 ms (issue 32).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { putAuthProfile } from "../src/admin/auth-profiles.ts";
import { importOpenApi } from "../src/admin/capabilities.ts";
import { createPartner } from "../src/admin/partners.ts";
import { assignCapability } from "../src/admin/policies.ts";
import { createSubject } from "../src/admin/subjects.ts";
import { egressAllowSetting } from "../src/config/settings.ts";
import { createJwtVerifier } from "../src/identity/jwt-verifier.ts";
import { createLogger } from "../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../src/policy/process-key-rings.ts";
import { buildAuthorityService, createCachingVerifier } from "../src/servers/authority/build.ts";
import type { AuthorityServices } from "../src/servers/authority/services.ts";
import { createIdpServer } from "../src/servers/idp/server.ts";
import { openStore } from "../src/store/index.ts";
import { egressAllowValue } from "../test/helpers/egress.ts";
import { benchAuthorityConfig } from "./lib/authority-config.ts";
import { type CallTarget, type HttpCaller, startHttpCaller } from "./lib/http-caller.ts";
import { alternateBlocks, figureRow, metByMedian, percentile } from "./lib/rounds.ts";
import { type ServedWorld, startWorldProcess, type WorldProcess } from "./lib/world-process.ts";

export interface LatencySummary {
  readonly name: string;
  readonly iterations: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly meanMs: number;
  /**
   * CPU time of this process (client, service and upstream all run in it) per operation.
   * Unlike wall time it is not inflated when other processes compete for the cores, so it
   * approximates the latency of an otherwise idle machine.
   */
  readonly cpuMsPerOp: number;
}

interface Samples {
  readonly wall: number[];
  cpuMs: number;
}

const newSamples = (): Samples => ({ wall: [], cpuMs: 0 });

/** One round's figures: a fresh service (store, authority, upstream), a fresh measurement window. */
export interface McpRound {
  /** tools/list, every page, JSON-RPC over HTTP (fetch in this process). */
  readonly listP50Ms: number;
  readonly directP50Ms: number;
  readonly callP50Ms: number;
  readonly callP99Ms: number;
  readonly directP99Ms: number;
  /** The same call for the subject whose policy allows every catalog operation. */
  readonly bigCallP50Ms: number;
  /** CPU per tools/call (the usual policy) of the service + upstream, of its event loop, of the client. */
  readonly serverCpuMsPerCall: number;
  readonly loopCpuMsPerCall: number;
  readonly generatorCpuMsPerCall: number;
}

export interface McpBenchResult {
  readonly operations: number;
  readonly rounds: readonly McpRound[];
  /** tools/list through the SDK client, first round only (adds the client's own parsing and validation). */
  readonly sdkList: LatencySummary;
  readonly rows: readonly Record<string, string | number>[];
}

const PARTNER = "bench";
const CAPABILITY = "catalog";
const SUBJECT = "bench-agent";
const SMALL_SUBJECT = "bench-agent-small";
const API_KEY = "bench-upstream-key";
/** tools/call added p50 over calling the upstream directly (issue 32). */
const ADDED_P50_TARGET_MS = 1.5;

const RESPONSE = JSON.stringify({
  id: "item-1",
  name: "Widget",
  owner: { email: "owner@example.com", api_token: "tok_live_123" },
  tags: Array.from({ length: 20 }, (_, i) => `tag-${i}`),
});

function summarize(name: string, samples: Samples): LatencySummary {
  const sorted = [...samples.wall].sort((a, b) => a - b);
  const round = (n: number) => Number(n.toFixed(4));
  const mean = sorted.reduce((sum, v) => sum + v, 0) / Math.max(1, sorted.length);
  return {
    name,
    iterations: sorted.length,
    p50Ms: round(percentile(sorted, 50)),
    p99Ms: round(percentile(sorted, 99)),
    meanMs: round(mean),
    cpuMsPerOp: round(samples.cpuMs / Math.max(1, sorted.length)),
  };
}

async function time(
  iterations: number,
  run: () => Promise<unknown>,
  into: Samples = newSamples(),
): Promise<Samples> {
  const cpu = process.cpuUsage();
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await run();
    into.wall.push(performance.now() - start);
  }
  const used = process.cpuUsage(cpu);
  into.cpuMs += (used.user + used.system) / 1000;
  return into;
}

/** An OpenAPI 3.1 catalog of `resources` × 5 operations, with realistic parameter and body schemas. */
function catalog(upstreamUrl: string, resources: number): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  const item = {
    type: "object",
    required: ["name"],
    properties: {
      name: { type: "string", maxLength: 200 },
      quantity: { type: "integer", minimum: 0 },
      tags: { type: "array", items: { type: "string" } },
    },
  };
  const idParam = {
    name: "id",
    in: "path",
    required: true,
    schema: { type: "string", pattern: "^[a-z0-9-]+$" },
  };
  for (let r = 0; r < resources; r++) {
    const name = `resource-${r}`;
    paths[`/${name}`] = {
      get: {
        operationId: `list_${name}`,
        summary: `List ${name}`,
        parameters: [
          { name: "limit", in: "query", schema: { type: "integer", minimum: 1, maximum: 100 } },
          { name: "cursor", in: "query", schema: { type: "string" } },
        ],
        responses: { "200": { description: "ok" } },
      },
      post: {
        operationId: `create_${name}`,
        summary: `Create one of ${name}`,
        requestBody: { required: true, content: { "application/json": { schema: item } } },
        responses: { "201": { description: "created" } },
      },
    };
    paths[`/${name}/{id}`] = {
      parameters: [idParam],
      get: {
        operationId: `get_${name}`,
        summary: `Get one of ${name}`,
        responses: { "200": { description: "ok" } },
      },
      put: {
        operationId: `replace_${name}`,
        requestBody: { content: { "application/json": { schema: item } } },
        responses: { "200": { description: "ok" } },
      },
      delete: { operationId: `delete_${name}`, responses: { "204": { description: "gone" } } },
    };
  }
  return {
    openapi: "3.1.0",
    info: { title: "Bench catalog", version: "1.0.0" },
    servers: [{ url: `${upstreamUrl}/v1` }],
    paths,
  };
}

export interface McpBenchService {
  readonly url: string;
  readonly upstreamUrl: string;
  readonly context: AuthorityServices;
  /** Token of the subject whose policy allows every operation of the catalog. */
  readonly accessToken: string;
  /** Token of a subject whose policy allows the five operations of one resource. */
  readonly smallPolicyToken: string;
  /** Permission ids of the catalog, all allowed to the bench subject. */
  readonly permissionIds: readonly string[];
  /** An agent token for another subject the bench seeds. */
  issueToken(subject: string): Promise<string>;
  close(): Promise<void>;
}

/** The authority app with one subject whose policy allows every operation of a `resources` × 5 catalog. */
export async function startMcpBenchService(
  resources: number,
  /** More servers the egress allow list opens (a downstream MCP server). */
  egressAllow: readonly string[] = [],
): Promise<McpBenchService> {
  const dir = await mkdtemp(join(tmpdir(), "authority-bench-mcp-"));
  const store = await openStore(`sqlite:${join(dir, "authority.db")}`);
  const idp = await createIdpServer({ audience: "authority" });
  const issuer = await idp.listen();
  const upstream = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json", "x-powered-by": "bench" });
      res.end(RESPONSE);
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  // The authority's own composition root, with the bench's store, verifier and keys.
  const service = await buildAuthorityService(
    benchAuthorityConfig({
      publicUrl: "http://127.0.0.1:8080",
      issuer,
      audience: "authority",
      bodyLimitBytes: 4 * 1024 * 1024,
      serviceIdentity: "bench",
      parameterScoping: { enabled: false, partnerAllowlist: [] },
      // The bench upstream is on loopback: opened by the egress allow list, as a deployment would.
      egress: {
        allow: egressAllowSetting.parse(egressAllowValue(upstreamUrl, ...egressAllow), "egress-allow"),
      },
    }),
    {
      store,
      verifier: createCachingVerifier(
        createJwtVerifier({ issuer, audience: "authority", jwks: `${issuer}/.well-known/jwks.json` }),
        { max: 1000 },
      ),
      protector: createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "bench" }),
      keyRings: createProcessKeyRings(),
      logger: createLogger("bench-mcp", "silent"),
      platform: null,
    },
  );
  const { app, context } = service;
  const close = async () => {
    // End keep-alive sockets of the benchmark's own clients instead of waiting them out.
    const closing = service.close();
    app.server.closeAllConnections();
    await closing;
    upstream.closeAllConnections();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    await idp.close();
    await store.close();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const url = await service.listen();
    const actor = { subject: "bench-admin", requestId: "req_bench_seed" };
    await createPartner(context, { partner_id: PARTNER, name: "Bench" });
    await putAuthProfile(context, PARTNER, "catalog-key", {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: API_KEY,
    });
    const imported = await importOpenApi(context, actor, PARTNER, {
      capability_id: CAPABILITY,
      name: "Catalog",
      document: catalog(upstreamUrl, resources),
      auth_profile_ref: "catalog-key",
    });
    const permissionIds = imported.operations.map((op) => op.permission_id);
    await createSubject(context, PARTNER, {
      subject_id: SUBJECT,
      subject_type: "agent",
      display_name: "Bench",
    });
    await assignCapability(context, actor, PARTNER, SUBJECT, CAPABILITY, {
      allowed_permission_ids: permissionIds,
      ttl_seconds: 3600,
    });
    await createSubject(context, PARTNER, {
      subject_id: SMALL_SUBJECT,
      subject_type: "agent",
      display_name: "Small",
    });
    await assignCapability(context, actor, PARTNER, SMALL_SUBJECT, CAPABILITY, {
      allowed_permission_ids: permissionIds.filter((id) => /:\/resource-0(\/|$)/.test(id)),
      ttl_seconds: 3600,
    });
    const { accessToken } = await idp.issueToken({ subject: SUBJECT, roles: ["agent"] });
    const small = await idp.issueToken({ subject: SMALL_SUBJECT, roles: ["agent"] });
    return {
      url,
      upstreamUrl,
      context,
      accessToken,
      smallPolicyToken: small.accessToken,
      permissionIds,
      issueToken: async (subject) => (await idp.issueToken({ subject, roles: ["agent"] })).accessToken,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

async function rpcClient(url: string, token: string) {
  const headers = {
    authorization: `Bearer ${token}`,
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2025-06-18",
  };
  let id = 0;
  return async (method: string, params: Record<string, unknown>) => {
    const response = await fetch(`${url}/mcp`, {
      method: "POST",
      headers,
      body: JSON.stringify({ jsonrpc: "2.0", id: ++id, method, params }),
    });
    const text = await response.text();
    if (response.status !== 200) throw new Error(`MCP answered ${response.status}`);
    return JSON.parse(text) as {
      result?: { tools?: Array<{ name: string }>; nextCursor?: string; isError?: boolean };
    };
  };
}

type RpcClient = Awaited<ReturnType<typeof rpcClient>>;

/** The whole tool list: every page of tools/list (100 tools a page), as a client reads it. */
async function listAllTools(rpc: RpcClient): Promise<Array<{ name: string }>> {
  const tools: Array<{ name: string }> = [];
  let cursor: string | undefined;
  do {
    const page = (await rpc("tools/list", cursor === undefined ? {} : { cursor })).result;
    tools.push(...(page?.tools ?? []));
    cursor = page?.nextCursor;
  } while (cursor !== undefined);
  return tools;
}

async function sdkListAllTools(client: Client): Promise<number> {
  let count = 0;
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    count += page.tools.length;
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return count;
}

/**
 * `rounds` fresh services, one after the other. In each: tools/list (every page) from this
 * process, then tools/call and the direct GET one at a time from the generator process,
 * alternating in blocks. The figures are medians over the rounds, the spread beside them.
 */
export async function benchMcp(
  options: { operations?: number; rounds?: number; iterations?: number; warmup?: number } = {},
): Promise<McpBenchResult> {
  const resources = Math.ceil((options.operations ?? 500) / 5);
  const roundCount = options.rounds ?? 5;
  const iterations = options.iterations ?? 240;
  // A fresh process per round: enough calls for the JIT before the window opens.
  const warmup = options.warmup ?? 200;
  const caller = startHttpCaller();
  const rounds: McpRound[] = [];
  let sdkList: LatencySummary | undefined;
  let operations = 0;
  try {
    for (let round = 0; round < roundCount; round++) {
      const world = await startWorldProcess<McpWorldInfo>(import.meta.url, "serveMcpWorld", resources);
      try {
        const measured = await mcpRound(world, caller, iterations, warmup);
        rounds.push(measured.round);
        operations = measured.operations;
        if (sdkList === undefined) sdkList = await measureSdkList(world.info, measured.operations, warmup);
      } finally {
        await world.close();
      }
    }
  } finally {
    await caller.close();
  }
  if (sdkList === undefined) throw new Error("no round ran");
  return { operations, rounds, sdkList, rows: mcpRows(rounds, sdkList, operations) };
}

/** What the world process hands the bench: where to call, with which tokens. */
interface McpWorldInfo {
  readonly url: string;
  readonly upstreamUrl: string;
  readonly accessToken: string;
  readonly smallPolicyToken: string;
  readonly operations: number;
}

/** The MCP bench service (`resources` × 5 operations), served in a world process (bench/lib/world-process.ts). */
export async function serveMcpWorld(resources: unknown): Promise<ServedWorld<McpWorldInfo>> {
  const service = await startMcpBenchService(Number(resources));
  return {
    info: {
      url: service.url,
      upstreamUrl: service.upstreamUrl,
      accessToken: service.accessToken,
      smallPolicyToken: service.smallPolicyToken,
      operations: service.permissionIds.length,
    },
    operations: { flush: () => service.context.decisions.recorder.flush(10_000) },
    close: () => service.close(),
  };
}

async function measureSdkList(service: McpWorldInfo, operations: number, warmup: number) {
  const client = new Client({ name: "bench", version: "1" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${service.accessToken}` } },
    }),
  );
  try {
    await time(Math.min(warmup, 10), () => sdkListAllTools(client));
    const samples = await time(20, () => sdkListAllTools(client));
    return summarize(`tools/list (${operations} API tools, every page, SDK client, first round)`, samples);
  } finally {
    await client.close();
  }
}

async function mcpRound(
  world: WorldProcess<McpWorldInfo>,
  caller: HttpCaller,
  iterations: number,
  warmup: number,
): Promise<{ round: McpRound; operations: number }> {
  const service = world.info;
  const { url, upstreamUrl } = service;
  const big = await rpcClient(url, service.accessToken);
  const small = await rpcClient(url, service.smallPolicyToken);
  const tools = await listAllTools(big);
  if (tools.length !== service.operations) {
    throw new Error(`expected ${service.operations} tools, got ${tools.length}`);
  }
  const smallTools = (await small("tools/list", {})).result?.tools ?? [];
  const getTool = (list: Array<{ name: string }>) => {
    const name = list.find((tool) => tool.name.startsWith("get_resource-0_"))?.name;
    if (name === undefined) throw new Error("no get tool");
    return name;
  };

  // tools/list, 500 allowed operations: all five pages.
  await time(Math.min(warmup, 10), () => listAllTools(big));
  const listSamples = await time(20, () => listAllTools(big));

  const direct: CallTarget = {
    url: `${upstreamUrl}/v1/resource-0/item-1`,
    method: "GET",
    headers: { accept: "application/json", "x-api-key": API_KEY },
    expect: '"id":"item-1"',
  };
  const caller_ = (token: string, name: string): CallTarget => ({
    url: `${url}/mcp`,
    method: "POST",
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-06-18",
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name, arguments: { path: { id: "item-1" } } },
    }),
    // A successful call's text content holds the upstream's answer (status 200), JSON in a string.
    expect: '\\"status\\":200',
  });
  const viaSmall = caller_(service.smallPolicyToken, getTool(smallTools));
  const viaBig = caller_(service.accessToken, getTool(tools));
  await caller.sequential(direct, warmup);
  await caller.sequential(viaSmall, warmup);
  await caller.sequential(viaBig, Math.min(warmup, 20));
  const window = await alternateBlocks({
    caller,
    world,
    direct,
    gateway: viaSmall,
    iterations,
    extra: viaBig,
  });
  await world.call("flush");
  const sorted = [...listSamples.wall].sort((a, b) => a - b);
  return {
    operations: tools.length,
    round: {
      listP50Ms: percentile(sorted, 50),
      directP50Ms: percentile(window.direct, 50),
      directP99Ms: percentile(window.direct, 99),
      callP50Ms: percentile(window.gateway, 50),
      callP99Ms: percentile(window.gateway, 99),
      bigCallP50Ms: percentile(window.extra, 50),
      serverCpuMsPerCall: window.serverCpuMsPerCall,
      loopCpuMsPerCall: window.loopCpuMsPerCall,
      generatorCpuMsPerCall: window.generatorCpuMsPerCall,
    },
  };
}

function mcpRows(
  rounds: readonly McpRound[],
  sdkList: LatencySummary,
  operations: number,
): Record<string, string | number>[] {
  const column = (pick: (round: McpRound) => number) => rounds.map(pick);
  const list = column((r) => r.listP50Ms);
  const added = column((r) => r.callP50Ms - r.directP50Ms);
  return [
    figureRow(
      `tools/list p50 (${operations} API tools, every page, JSON-RPC over HTTP)`,
      list,
      "≤ 20 ms",
      metByMedian(list, 20),
    ),
    {
      measurement: sdkList.name,
      rounds: 1,
      median: sdkList.p50Ms,
      spread: "",
      unit: "ms",
      target: "(information)",
      met: "",
    },
    figureRow(
      "GET direct to upstream, p50",
      column((r) => r.directP50Ms),
    ),
    figureRow(
      "GET through /mcp tools/call (policy of 5 operations), p50",
      column((r) => r.callP50Ms),
    ),
    figureRow(
      "tools/call added p50",
      added,
      `≤ ${ADDED_P50_TARGET_MS} ms`,
      metByMedian(added, ADDED_P50_TARGET_MS),
    ),
    figureRow(
      "tools/call added p99",
      column((r) => r.callP99Ms - r.directP99Ms),
    ),
    figureRow(
      `tools/call added p50, policy of ${operations} operations`,
      column((r) => r.bigCallP50Ms - r.directP50Ms),
      "(information)",
    ),
    figureRow(
      "CPU per tools/call: service + upstream (all threads)",
      column((r) => r.serverCpuMsPerCall),
    ),
    figureRow(
      "CPU per tools/call: its event loop",
      column((r) => r.loopCpuMsPerCall),
    ),
    figureRow(
      "CPU per tools/call: the client (generator process)",
      column((r) => r.generatorCpuMsPerCall),
    ),
  ];
}

if (import.meta.main) {
  console.table((await benchMcp()).rows);
  process.exit(0);
}
