/**
 * Binding invoke overhead: the same GET against a local upstream, once called directly
 * (with its API key) and once through `POST /v1/bindings/{id}/invoke` on a real
 * authority app (SQLite store, in-process key rings, dev IdP as the partner issuer):
 * workload token and user assertion verification, mapping/subject/boundary checks, the
 * warm verified policy, decide, audit record, idempotency claim, authority envelope
 * (ML-DSA-65 signature + ML-KEM-768 seal), execution with key injection and redaction,
 * evidence. One call at a time; reports p50/p99 and the added latency (target p50 ≤ 3 ms).
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

export interface LatencySummary {
  readonly name: string;
  readonly iterations: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly meanMs: number;
  /**
   * CPU per call: the whole process (event loop, thread pool; the client and the upstream
   * run here too), and the event loop's thread alone. Steadier than latency when other
   * processes compete for the cores.
   */
  readonly cpuMsPerCall: number;
  readonly loopCpuMsPerCall: number;
}

interface CpuTotals {
  process: number;
  loop: number;
}

export interface InvokeBenchResult {
  readonly direct: LatencySummary;
  readonly invoke: LatencySummary;
  /** invoke p50 − direct p50 */
  readonly overheadP50Ms: number;
  readonly overheadP99Ms: number;
  readonly targetP50Ms: 3;
  /** Medians of the evidence timings the service recorded (inside the engine, after authentication). */
  readonly engine: {
    readonly totalP50Ms: number;
    readonly decisionP50Ms: number;
    readonly upstreamP50Ms: number;
  };
}

interface EvidenceTimings {
  readonly timings: {
    readonly total_ms: number;
    readonly decision_ms: number;
    readonly upstream_ms: number | null;
  };
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return Number((sorted[Math.floor(sorted.length / 2)] ?? 0).toFixed(4));
};

export const API_KEY = "bench-upstream-key-0123456789";
const RESPONSE = JSON.stringify({
  id: "item-1",
  name: "Widget",
  owner: { email: "owner@example.com" },
  card_number: "4111111111111111",
  tags: Array.from({ length: 20 }, (_, i) => `tag-${i}`),
});

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? 0;
}

function summarize(name: string, samples: number[], cpu: CpuTotals): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  const round = (n: number) => Number(n.toFixed(4));
  const calls = Math.max(1, sorted.length);
  return {
    name,
    iterations: sorted.length,
    p50Ms: round(percentile(sorted, 50)),
    p99Ms: round(percentile(sorted, 99)),
    meanMs: round(sorted.reduce((sum, v) => sum + v, 0) / calls),
    cpuMsPerCall: round(cpu.process / 1000 / calls),
    loopCpuMsPerCall: round(cpu.loop / 1000 / calls),
  };
}

/** Runs `run` one call at a time; adds the CPU time spent (µs) to `cpu` when given. */
async function time(iterations: number, run: () => Promise<unknown>, cpu?: CpuTotals): Promise<number[]> {
  const samples: number[] = [];
  const processBefore = process.cpuUsage();
  const loopBefore = process.threadCpuUsage();
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await run();
    samples.push(performance.now() - start);
  }
  if (cpu !== undefined) {
    const processUsed = process.cpuUsage(processBefore);
    const loopUsed = process.threadCpuUsage(loopBefore);
    cpu.process += processUsed.user + processUsed.system;
    cpu.loop += loopUsed.user + loopUsed.system;
  }
  return samples;
}

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

export async function benchInvoke(
  options: { iterations?: number; warmup?: number } = {},
): Promise<InvokeBenchResult> {
  const iterations = options.iterations ?? 1000;
  const warmup = options.warmup ?? 100;
  const dir = await makeTempDir("bench-invoke-");
  const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  const world = await startInvokeWorld(store);
  const { authority, origin, workloadToken, assertion } = world;
  try {
    let counter = 0;
    const body = JSON.stringify({ capability_id: "items", method: "GET", path: "/items/item-1" });
    const invoke = async () => {
      const response = await fetch(`${authority}/v1/bindings/bench-app/invoke`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${workloadToken}`,
          "x-authority-user-assertion": assertion,
          "idempotency-key": `bench-${++counter}`,
          "content-type": "application/json",
        },
        body,
      });
      const answer = (await response.json()) as { status?: string };
      if (answer.status !== "allowed") throw new Error(`invoke was not allowed: ${JSON.stringify(answer)}`);
      return answer;
    };
    const direct = async () => {
      const response = await fetch(`${origin}/items/item-1`, {
        headers: { accept: "application/json", "x-api-key": API_KEY },
      });
      return response.json();
    };
    await time(warmup, direct);
    await time(warmup, invoke);
    const directSamples: number[] = [];
    const invokeSamples: number[] = [];
    const directCpu: CpuTotals = { process: 0, loop: 0 };
    const invokeCpu: CpuTotals = { process: 0, loop: 0 };
    const rounds = 10;
    for (let round = 0; round < rounds; round++) {
      directSamples.push(...(await time(Math.ceil(iterations / rounds), direct, directCpu)));
      invokeSamples.push(...(await time(Math.ceil(iterations / rounds), invoke, invokeCpu)));
    }
    const recorded: EvidenceTimings[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await store.list<EvidenceTimings>("binding_invocations", {
        limit: 1000,
        ...(after === undefined ? {} : { after }),
      });
      recorded.push(...page.items.map((item) => item.value));
      if (page.next === undefined) break;
      after = page.next;
    }
    const measured = recorded.slice(-iterations);
    const d = summarize("direct fetch", directSamples, directCpu);
    const i = summarize("binding invoke", invokeSamples, invokeCpu);
    return {
      direct: d,
      invoke: i,
      overheadP50Ms: Number((i.p50Ms - d.p50Ms).toFixed(4)),
      overheadP99Ms: Number((i.p99Ms - d.p99Ms).toFixed(4)),
      targetP50Ms: 3,
      engine: {
        totalP50Ms: median(measured.map((e) => e.timings.total_ms)),
        decisionP50Ms: median(measured.map((e) => e.timings.decision_ms)),
        upstreamP50Ms: median(measured.map((e) => e.timings.upstream_ms ?? 0)),
      },
    };
  } finally {
    await world.close();
    await store.close();
    await dir.cleanup();
  }
}

if (import.meta.main) {
  console.log(JSON.stringify(await benchInvoke(), null, 2));
}
