/**
 * Binding invoke overhead: the same GET against a local upstream, once called directly
 * (with its API key) and once through `POST /v1/bindings/{id}/invoke` on a real
 * authority app (SQLite store, in-process key rings, dev IdP as the partner issuer):
 * workload token and user assertion verification, mapping/subject/boundary checks, the
 * warm verified policy, decide, audit record, idempotency claim, authority envelope
 * (ML-DSA-65 signature + ML-KEM-768 seal), execution with key injection and redaction,
 * evidence. One call at a time from a generator process of its own (bench/lib/http-caller.ts),
 * over several rounds, each a fresh world in a fresh process (bench/lib/world-process.ts);
 * reports the median over the rounds of p50/p99 and of the added latency (target p50 ≤ 3 ms)
 * with the spread beside it, and the CPU per call of the servers and of the client apart.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { putAuthProfile } from "../src/admin/auth-profiles.ts";
import { importOpenApi } from "../src/admin/capabilities.ts";
import { createPartner } from "../src/admin/partners.ts";
import { assignCapability } from "../src/admin/policies.ts";
import { createSubject } from "../src/admin/subjects.ts";
import { assignBindingApi } from "../src/bindings/assignments.ts";
import { createBinding } from "../src/bindings/bindings.ts";
import { createMapping } from "../src/bindings/mappings.ts";
import { createWorkloadClient } from "../src/bindings/workload-clients.ts";
import { egressAllowSetting } from "../src/config/settings.ts";
import { createJwtVerifier } from "../src/identity/jwt-verifier.ts";
import { createLogger } from "../src/observability/logger.ts";
import { createLocalPolicyProtector } from "../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../src/policy/process-key-rings.ts";
import { buildAuthorityService } from "../src/servers/authority/build.ts";
import { createIdpServer } from "../src/servers/idp/server.ts";
import { openStore } from "../src/store/index.ts";
import type { Store } from "../src/store/store.ts";
import { egressAllowValue } from "../test/helpers/egress.ts";
import { makeTempDir } from "../test/helpers/temp-dir.ts";
import { benchAuthorityConfig } from "./lib/authority-config.ts";
import { type CallTarget, type HttpCaller, startHttpCaller } from "./lib/http-caller.ts";
import { alternateBlocks, figureRow, metByMedian, percentile } from "./lib/rounds.ts";
import { type ServedWorld, startWorldProcess } from "./lib/world-process.ts";

/** One round's figures: a fresh world (store, authority, upstream), a fresh measurement window. */
export interface InvokeRound {
  readonly directP50Ms: number;
  readonly directP99Ms: number;
  readonly invokeP50Ms: number;
  readonly invokeP99Ms: number;
  /** invoke p50 − direct p50, this round. */
  readonly addedP50Ms: number;
  /**
   * CPU per invoke of the bench process (the authority, the upstream, its event loop and
   * thread pool; not the client) and of the event loop's thread alone; steadier than latency
   * when other processes compete for the cores.
   */
  readonly serverCpuMsPerCall: number;
  readonly loopCpuMsPerCall: number;
  /** CPU per invoke of the client (the generator process), reported apart. */
  readonly generatorCpuMsPerCall: number;
  /** Median of the evidence's total_ms (inside the engine, after authentication). */
  readonly engineP50Ms: number;
}

export interface InvokeBenchResult {
  readonly rounds: readonly InvokeRound[];
  readonly targetP50Ms: 3;
  readonly rows: readonly Record<string, string | number>[];
}

interface EvidenceTimings {
  readonly timings: { readonly total_ms: number };
}

export const API_KEY = "bench-upstream-key-0123456789";
const RESPONSE = JSON.stringify({
  id: "item-1",
  name: "Widget",
  owner: { email: "owner@example.com" },
  card_number: "4111111111111111",
  tags: Array.from({ length: 20 }, (_, i) => `tag-${i}`),
});

const document = {
  openapi: "3.1.0",
  info: { title: "Items", version: "1.0.0" },
  paths: {
    "/items/{id}": {
      parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }],
      get: {
        operationId: "getItem",
        "x-authority-redactions": [{ path: "/card_number", mode: "mask", keep_last: 4 }],
        responses: {
          "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
        },
      },
    },
  },
};

/** The invoke bench's world on `store`: the authority (its composition root), the upstream, the partner's binding. */
export async function startInvokeWorld(store: Store): Promise<InvokeWorld> {
  const adminIdp = await createIdpServer({ audience: "authority" });
  const adminIssuer = await adminIdp.listen();
  const partnerIdp = await createIdpServer({ audience: "items-api" });
  await partnerIdp.listen();
  const upstream = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const ok = req.headers["x-api-key"] === API_KEY;
      res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
      res.end(ok ? RESPONSE : "{}");
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  const keyRings = createProcessKeyRings();
  // The authority's own composition root, with the bench's store, verifier and keys.
  const service = await buildAuthorityService(
    benchAuthorityConfig({
      publicUrl: "http://authority.bench",
      issuer: adminIssuer,
      audience: "authority",
      bodyLimitBytes: 1024 * 1024,
      serviceIdentity: "bench",
      parameterScoping: { enabled: false, partnerAllowlist: [] },
      // The bench upstream and the partner's IdP (the binding's JWKS) are on loopback: opened by
      // the egress allow list, as a deployment would.
      egress: {
        allow: egressAllowSetting.parse(egressAllowValue(origin, partnerIdp.issuer), "egress-allow"),
      },
    }),
    {
      store,
      verifier: createJwtVerifier({
        issuer: adminIssuer,
        audience: "authority",
        jwks: `${adminIssuer}/.well-known/jwks.json`,
      }),
      protector: createLocalPolicyProtector({ keyRings, serviceIdentity: "bench" }),
      keyRings,
      logger: createLogger("bench-invoke", "silent"),
      platform: null,
    },
  );
  const { context } = service;
  const authority = await service.listen();
  const close = async (): Promise<void> => {
    await service.close();
    upstream.closeAllConnections();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    await adminIdp.close();
    await partnerIdp.close();
  };
  try {
    const actor = { subject: "bench-admin", requestId: "bench" };
    await createPartner(context, { partner_id: "bench", name: "Bench" });
    await putAuthProfile(context, "bench", "items-key", {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: API_KEY,
    });
    await importOpenApi(context, actor, "bench", {
      capability_id: "items",
      name: "Items",
      document,
      upstream_base_url: origin,
      auth_profile_ref: "items-key",
    });
    const binding = await createBinding(context, "bench", {
      binding_id: "bench-app",
      issuer: partnerIdp.issuer,
      jwks_url: partnerIdp.jwksUri,
      audience: "items-api",
      tenant_value: "bench-tenant",
    });
    const { client, client_secret } = await createWorkloadClient(context, binding, { name: "bench" });
    const mapped = await createMapping(context, binding, { external_subject: "bench-user" });
    await assignBindingApi(context, actor, binding, {
      subject_id: mapped.mapping.subject_id,
      capability_id: "items",
      allowed_permission_ids: ["items:get:/items/{id}"],
      ttl_seconds: 3600,
    });
    const record = await store.get<Parameters<typeof context.bindings.tokens.issue>[0]>(
      "workload_clients",
      client.client_id,
    );
    if (record === undefined || client_secret.length === 0) throw new Error("workload client missing");
    const workloadToken = (await context.bindings.tokens.issue(record, ["authority/bindings.invoke"]))
      .access_token;
    const assertion = (
      await partnerIdp.issueToken({ subject: "bench-user", audience: "items-api", tenant: "bench-tenant" })
    ).accessToken;

    // A v1 agent with the same operation, for authorize-invocation on the same world.
    await createSubject(context, "bench", {
      subject_id: "bench-agent",
      subject_type: "agent",
      display_name: "Bench agent",
    });
    await assignCapability(context, actor, "bench", "bench-agent", "items", {
      allowed_permission_ids: ["items:get:/items/{id}"],
      ttl_seconds: 3600,
    });
    const agentToken = (await adminIdp.issueToken({ subject: "bench-agent", lifetimeSec: 3600 })).accessToken;
    return { authority, origin, workloadToken, assertion, agentToken, close };
  } catch (error) {
    await close();
    throw error;
  }
}

export interface InvokeWorld {
  /** The authority's URL. */
  readonly authority: string;
  /** The upstream's origin (its API key: API_KEY). */
  readonly origin: string;
  readonly workloadToken: string;
  /** The authority issuer's token of `bench-agent`, allowed GET /items/{id} of `items`. */
  readonly agentToken: string;
  readonly assertion: string;
  close(): Promise<void>;
}

const TARGET_P50_MS = 3;

/**
 * `rounds` fresh worlds, one after the other; in each, `iterations` direct calls and as many
 * invokes, one at a time, alternating in blocks, from the generator process. The figure is the
 * median over the rounds of each round's added p50, the spread beside it.
 */
export async function benchInvoke(
  options: { rounds?: number; iterations?: number; warmup?: number } = {},
): Promise<InvokeBenchResult> {
  const roundCount = options.rounds ?? 7;
  const iterations = options.iterations ?? 200;
  // A fresh process per round: enough calls for the JIT before the window opens.
  const warmup = options.warmup ?? 300;
  const caller = startHttpCaller();
  const rounds: InvokeRound[] = [];
  try {
    for (let round = 0; round < roundCount; round++) {
      rounds.push(await invokeRound(caller, round, iterations, warmup));
    }
  } finally {
    await caller.close();
  }
  return { rounds, targetP50Ms: TARGET_P50_MS, rows: invokeRows(rounds) };
}

/** What the world process hands the bench: where to call, with which credentials. */
interface InvokeWorldInfo {
  readonly authority: string;
  readonly origin: string;
  readonly workloadToken: string;
  readonly assertion: string;
}

/** The invoke world on a fresh SQLite store, served in a world process (bench/lib/world-process.ts). */
export async function serveInvokeWorld(): Promise<ServedWorld<InvokeWorldInfo>> {
  const dir = await makeTempDir("bench-invoke-");
  const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  const world = await startInvokeWorld(store);
  return {
    info: {
      authority: world.authority,
      origin: world.origin,
      workloadToken: world.workloadToken,
      assertion: world.assertion,
    },
    operations: { engineP50: (calls) => engineP50(store, Number(calls)) },
    async close() {
      await world.close();
      await store.close();
      await dir.cleanup();
    },
  };
}

/** Median of the evidence's total_ms over the last `calls` invocations recorded. */
async function engineP50(store: Store, calls: number): Promise<number> {
  const recorded: EvidenceTimings[] = [];
  let next: string | undefined;
  for (;;) {
    const page = await store.list<EvidenceTimings>("binding_invocations", {
      limit: 1000,
      ...(next === undefined ? {} : { after: next }),
    });
    recorded.push(...page.items.map((item) => item.value));
    if (page.next === undefined) break;
    next = page.next;
  }
  return percentile(
    recorded.slice(-calls).map((evidence) => evidence.timings.total_ms),
    50,
  );
}

async function invokeRound(
  caller: HttpCaller,
  round: number,
  iterations: number,
  warmup: number,
): Promise<InvokeRound> {
  const world = await startWorldProcess<InvokeWorldInfo>(import.meta.url, "serveInvokeWorld");
  try {
    const { info } = world;
    const invoke: CallTarget = {
      url: `${info.authority}/v1/bindings/bench-app/invoke`,
      method: "POST",
      headers: {
        authorization: `Bearer ${info.workloadToken}`,
        "x-authority-user-assertion": info.assertion,
        "content-type": "application/json",
      },
      body: JSON.stringify({ capability_id: "items", method: "GET", path: "/items/item-1" }),
      uniqueHeader: { name: "idempotency-key", prefix: `bench-${round}` },
      expect: '"status":"allowed"',
    };
    const direct: CallTarget = {
      url: `${info.origin}/items/item-1`,
      method: "GET",
      headers: { accept: "application/json", "x-api-key": API_KEY },
      expect: '"id":"item-1"',
    };
    await caller.sequential(direct, warmup);
    await caller.sequential(invoke, warmup);
    const window = await alternateBlocks({ caller, world, direct, gateway: invoke, iterations });
    const directP50Ms = percentile(window.direct, 50);
    const invokeP50Ms = percentile(window.gateway, 50);
    return {
      directP50Ms,
      directP99Ms: percentile(window.direct, 99),
      invokeP50Ms,
      invokeP99Ms: percentile(window.gateway, 99),
      addedP50Ms: invokeP50Ms - directP50Ms,
      serverCpuMsPerCall: window.serverCpuMsPerCall,
      loopCpuMsPerCall: window.loopCpuMsPerCall,
      generatorCpuMsPerCall: window.generatorCpuMsPerCall,
      engineP50Ms: await world.call<number>("engineP50", window.gateway.length),
    };
  } finally {
    await world.close();
  }
}

function invokeRows(rounds: readonly InvokeRound[]): Record<string, string | number>[] {
  const column = (pick: (round: InvokeRound) => number) => rounds.map(pick);
  const added = column((r) => r.addedP50Ms);
  return [
    figureRow(
      "direct GET p50",
      column((r) => r.directP50Ms),
    ),
    figureRow(
      "binding invoke p50",
      column((r) => r.invokeP50Ms),
    ),
    figureRow("added by invoke, p50", added, `≤ ${TARGET_P50_MS} ms`, metByMedian(added, TARGET_P50_MS)),
    figureRow(
      "direct GET p99",
      column((r) => r.directP99Ms),
    ),
    figureRow(
      "binding invoke p99",
      column((r) => r.invokeP99Ms),
    ),
    figureRow(
      "inside the engine (evidence total_ms), p50",
      column((r) => r.engineP50Ms),
    ),
    figureRow(
      "CPU per invoke: authority + upstream (all threads)",
      column((r) => r.serverCpuMsPerCall),
    ),
    figureRow(
      "CPU per invoke: its event loop",
      column((r) => r.loopCpuMsPerCall),
    ),
    figureRow(
      "CPU per invoke: the client (generator process)",
      column((r) => r.generatorCpuMsPerCall),
    ),
  ];
}

if (import.meta.main) {
  console.table((await benchInvoke()).rows);
}
