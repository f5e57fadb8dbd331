/**
 * Executor overhead: the same GET against a local upstream (127.0.0.1, ephemeral port),
 * once with a bare fetch and once through the executor (input validation, URL building,
 * static API key injection, header sanitation, redaction, hashing). Requests run one at
 * a time so the numbers are per-call latency, not throughput.
 */

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { OperationSnapshot } from "../src/core/operation-snapshot.ts";
import type { AuthProfile, TokenSet } from "../src/execute/auth-profiles.ts";
import { egressAllowing } from "../test/helpers/egress.ts";
import { executeOnce, testExecutor } from "../test/helpers/execute-once.ts";

export interface LatencySummary {
  readonly name: string;
  readonly iterations: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly meanMs: number;
}

export interface ExecuteBenchResult {
  readonly direct: LatencySummary;
  readonly executor: LatencySummary;
  /** executor p50 − direct p50 */
  readonly overheadP50Ms: number;
  /** executor p99 − direct p99 */
  readonly overheadP99Ms: number;
}

const RESPONSE = JSON.stringify({
  id: "item-1",
  name: "Widget",
  owner: { email: "owner@example.com", api_token: "tok_live_123" },
  tags: Array.from({ length: 20 }, (_, i) => `tag-${i}`),
  card: "4111111111111111",
});

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? 0;
}

function summarize(name: string, samples: number[]): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  const round = (n: number) => Number(n.toFixed(4));
  const mean = sorted.reduce((sum, v) => sum + v, 0) / Math.max(1, sorted.length);
  return {
    name,
    iterations: sorted.length,
    p50Ms: round(percentile(sorted, 50)),
    p99Ms: round(percentile(sorted, 99)),
    meanMs: round(mean),
  };
}

async function time(iterations: number, run: () => Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await run();
    samples.push(performance.now() - start);
  }
  return samples;
}

export async function benchExecute(
  options: { iterations?: number; warmup?: number } = {},
): Promise<ExecuteBenchResult> {
  const iterations = options.iterations ?? 2000;
  const warmup = options.warmup ?? 200;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, {
        "content-type": "application/json",
        "x-powered-by": "bench",
        "set-cookie": "s=1",
      });
      res.end(RESPONSE);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const snapshot: OperationSnapshot = {
      operation_id: "getItem",
      method: "GET",
      path: "/items/{id}",
      input_schema: {
        path: {
          type: "object",
          properties: { id: { type: "string" } },
          required: ["id"],
          additionalProperties: false,
        },
        query: {
          type: "object",
          properties: { limit: { type: "integer", maximum: 100 } },
          additionalProperties: false,
        },
        headers: { type: "object", additionalProperties: { type: "string" } },
        body: null,
      },
      response_schema: null,
      upstream_url_template: `${origin}/v1/items/{id}`,
      auth_profile_ref: "bench",
      response_rules: [{ path: "/card", mode: "mask", keep_last: 4 }],
      parameter_constraints: [],
    };
    const profile: AuthProfile = {
      type: "static",
      id: "bench",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secretRef: "bench",
    };
    const tokenSets = new Map<string, TokenSet>();
    const executor = testExecutor({
      secretResolver: async () => "bench-api-key-value",
      tokenSetStore: {
        get: async (key) => tokenSets.get(key),
        put: async (key, value) => void tokenSets.set(key, value),
        delete: async (key) => void tokenSets.delete(key),
      },
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      // The upstream is on loopback: opened as a platform admin would, by egress-allow.
      egress: egressAllowing([origin]),
    });
    const direct = async () => {
      const response = await fetch(`${origin}/v1/items/item-1?limit=10`, {
        headers: { accept: "application/json", "x-api-key": "bench-api-key-value" },
      });
      return response.json();
    };
    const governed = () =>
      executeOnce(executor, {
        snapshot,
        args: { path: { id: "item-1" }, query: { limit: 10 } },
        authProfile: profile,
        partnerId: "bench",
        redactions: [{ path: "/tags", mode: "remove" }],
      });
    await time(warmup, direct);
    await time(warmup, governed);
    // Interleaved rounds so drift (GC, CPU frequency) hits both sides alike.
    const directSamples: number[] = [];
    const executorSamples: number[] = [];
    const rounds = 10;
    for (let round = 0; round < rounds; round++) {
      directSamples.push(...(await time(Math.ceil(iterations / rounds), direct)));
      executorSamples.push(...(await time(Math.ceil(iterations / rounds), governed)));
    }
    const d = summarize("direct fetch", directSamples);
    const e = summarize("executor.execute", executorSamples);
    return {
      direct: d,
      executor: e,
      overheadP50Ms: Number((e.p50Ms - d.p50Ms).toFixed(4)),
      overheadP99Ms: Number((e.p99Ms - d.p99Ms).toFixed(4)),
    };
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

if (import.meta.main) {
  console.log(JSON.stringify(await benchExecute(), null, 2));
}
