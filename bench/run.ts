/**
 * `make bench`: runs every bench module below, prints each one's tables with its targets, and
 * writes the whole report — date, machine facts, every figure with its unit — to
 * docs/benchmarks.md (bench/report.ts). That page is the only place benchmark figures live.
 *
 *   node bench/run.ts                 every module; writes docs/benchmarks.md
 *   node bench/run.ts --quick         the modules that have a quick form, tiny counts (a smoke
 *                                     run: checks the benches still work, figures meaningless);
 *                                     writes nothing unless --out is given
 *   node bench/run.ts --only=envoy,sidecar-input   a subset (also ONLY=…); writes nothing
 *                                     unless --out is given
 *   node bench/run.ts --only=a,b --update   measures those modules again and replaces only
 *                                     their sections of docs/benchmarks.md (also UPDATE=1)
 *   node bench/run.ts --out=FILE      writes the report to FILE instead
 *
 * A module that throws is reported as failed in the page and the run exits 1.
 */
import { readFile, writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { cpuProbeMs } from "./lib/cpu-probe.ts";
import {
  type MachineFacts,
  machineFacts,
  renderReport,
  renderSection,
  type SectionReport,
  type Table,
} from "./report.ts";

export interface BenchContext {
  /** The smoke form: tiny counts, only to prove the module still runs. */
  readonly quick: boolean;
}

type Rows = readonly object[];

/**
 * One bench module in the report. `run` returns one table (rows) or several; `quick` marks a
 * module that has a smoke form (run receives { quick: true }).
 */
export interface BenchModule {
  readonly name: string;
  readonly title: string;
  readonly targets?: string;
  readonly quick?: boolean;
  readonly run: (context: BenchContext) => Promise<Rows | readonly Table[]>;
}

/**
 * The bench modules, in report order. A new bench joins the report by adding an entry here
 * (its module under bench/, imported lazily so `--only` loads nothing else).
 */
export const BENCH_MODULES: readonly BenchModule[] = [
  {
    name: "envoy",
    title:
      "Through one real Envoy: Envoy alone vs Envoy's own jwt_authn + rbac (the floor) vs Envoy + the authority sidecar (ext_authz gRPC)",
    targets:
      "the base of the side-by-side with OPA-Envoy; ratios to Envoy alone and to the in-proxy floor on the same decisions (issue 30); the sidecar's extra checks ≤ 25 µs CPU per Check at 1,000 req/s (issue 15)",
    quick: true,
    run: async ({ quick }) => {
      const { benchEnvoy, envoyTables } = await import("./envoy.ts");
      return envoyTables(await benchEnvoy(quick ? ENVOY_QUICK : {}));
    },
  },
  {
    name: "sidecar",
    title: "Sidecar: ext_authz Check beside a no-op grpc-js server, forward proxy vs direct, RSS",
    targets:
      "Check ≥ 0.8× no-op throughput, p99 ≤ 1 ms at 1,000 req/s; proxy adds ≤ 1 ms p50, ≥ 0.5× direct; RSS ≤ 150 MB",
    run: async () => (await import("./sidecar.ts")).benchSidecar(),
  },
  {
    name: "sidecar-start",
    title:
      "Sidecar start-up, idle and memory over fresh processes: start → first allowed Check, readiness, idle CPU, RSS at 1,000 Checks/s",
    targets:
      "start → first allowed Check ≤ 250 ms; the first Check after /readyz is allowed; idle CPU ≤ 2 ms/s; RSS at 1,000 req/s ≤ 80 MB; no event-loop stall over 5 ms (issue 30)",
    quick: true,
    run: async ({ quick }) =>
      (await import("./sidecar-start.ts")).benchSidecarStart(
        quick ? { rounds: 2, idleMs: 2000, loadMs: 2000 } : {},
      ),
  },
  {
    name: "sidecar-input",
    title:
      "Sidecar request enforcement in-process (body, schema, constraints, headers_to_remove): CPU per Check",
    targets: "all extra checks together ≤ 25 µs CPU per Check",
    quick: true,
    run: async ({ quick }) =>
      (await import("./sidecar-input.ts")).benchSidecarInput(quick ? 2_000 : undefined),
  },
  {
    name: "path",
    title:
      "Path rule: decide() on a 100-operation catalog with literal siblings, the rule alone, render + re-match; a shadow policy on the Check and authorize paths",
    targets:
      "all extra checks ≤ 25 µs CPU per Check (issue 15); a shadow ≤ 1.2× the CPU of one decision on the Check and authorize paths (issue 34)",
    quick: true,
    run: async ({ quick }) => (await import("./path-values.ts")).benchPathValues(quick ? 2_000 : undefined),
  },
  {
    name: "decision-chain",
    title:
      "Tamper-evident decision records: CPU to link one record into its hash chain (authorize decision, a Check's shipped record, MCP row with 4 KB representations, evidence), a response's receipt, and one checkpoint signature",
    targets: "≤ 10 µs CPU per decision for the chain (issue 34)",
    quick: true,
    run: async ({ quick }) =>
      (await import("./decision-chain.ts")).benchDecisionChain(quick ? 2_000 : undefined),
  },
  {
    name: "policy-scale",
    title:
      "Flat with the number of agents: the sidecar's policy path (verified-policy cache, Redis, signature check, decide()) over 10 / 1,000 / 10,000 subjects with 5-operation policies and 10 / 1,000 with 500-operation ones",
    targets:
      "warm CPU per Check at 10,000 subjects ≤ 1.5× that at 10 subjects; a burst of 100 new subjects' first Checks within the 200 ms deadline (issue 30)",
    quick: true,
    run: async ({ quick }) =>
      (await import("./policy-scale.ts")).benchPolicyScale(
        quick ? { subjects: [10, 100], operations: [5], checks: 500, burst: 10 } : {},
      ),
  },
  {
    name: "crypto",
    title: "Post-quantum primitives (median per call)",
    run: async () => (await import("./crypto.ts")).benchCrypto(),
  },
  {
    name: "store",
    title: "Stores (median per call)",
    run: async () => (await import("./store.ts")).benchStore(),
  },
  {
    name: "observability",
    title:
      "Observability per decision: the decision-log export (mask, batch, OTLP JSON, send) per record; tracing off (the stage wrapper) and on (a Check's four spans, exported)",
    targets:
      "the export's and tracing's CPU per decision, beside a Check's (issue 31); tracing off adds nothing measurable",
    quick: true,
    run: async ({ quick }) =>
      (await import("./observability.ts")).benchObservability(quick ? 2_000 : undefined),
  },
  {
    name: "log-query",
    title:
      "Filtered audit queries at 1,000,000 records: first page (limit 100), median ms; fill rate; retention batch",
    targets:
      "a filtered first page holds its matches in ≤ 50 ms on every store at 1 M records (issue 31); Redis walks ≤ 5,000 index members per call (decision 2651): `next` on a short page says so",
    quick: true,
    run: async ({ quick }) =>
      (await import("./log-query.ts")).benchLogQuery(quick ? { records: 5_000, runs: 3 } : {}),
  },
  {
    name: "execute",
    title: "Executor overhead vs direct fetch",
    targets: "executor adds ≤ 1 ms p50 over a bare fetch",
    run: async () => {
      const result = await (await import("./execute.ts")).benchExecute();
      return [
        { ...result.direct },
        { ...result.executor },
        { name: "added by the executor", p50Ms: result.overheadP50Ms, p99Ms: result.overheadP99Ms },
      ];
    },
  },
  {
    name: "scrub",
    title: "Secret scrubbing and fail-closed decoding per proxied response (CPU µs)",
    targets: "a 2 KiB JSON response: a few µs added",
    run: async () => (await import("./response-scrub.ts")).benchResponseScrub(),
  },
  {
    name: "policy",
    title: "Policy compile+protect and load+verify (cold, no cache)",
    targets: "load+verify of a 100-operation policy ≤ 2 ms median; compile+protect ≤ 5 ms median",
    run: async () => (await import("./policy.ts")).benchPolicy(),
  },
  {
    name: "policy-load",
    title:
      "Policy load on a cold cache through the crypto service (content-key unwrap) and the managed API, beside the embedded key ring; warm path",
    targets:
      "cold load through the crypto service ≤ 5 ms median (issue 17); warm unchanged; the managed API's decrypt-verify reported beside (decision 2301)",
    quick: true,
    run: async ({ quick }) =>
      (await import("./policy-load.ts")).benchPolicyLoad(quick ? { iterations: 5 } : {}),
  },
  {
    name: "authorize",
    title: "POST /v1/authorize-invocation over HTTP on loopback, warm policy, beside OPA's REST server",
    targets:
      "p99 ≤ 5 ms at 1,000 req/s; ≥ 5,000 req/s at saturation; ratios to OPA on the same request, rate and decisions (issue 30)",
    run: async () => (await import("./authorize.ts")).benchAuthorize(),
  },
  {
    name: "revocation",
    title:
      "Revocation propagation: a policy revoked on the authority, four sidecars asked back to back until each denies",
    targets: "denied by every sidecar (four) ≤ 100 ms p99 (issue 30)",
    quick: true,
    run: async ({ quick }) =>
      (await import("./revocation.ts")).benchRevocation(quick ? { sidecars: 2, trials: 2 } : {}),
  },
  {
    name: "store-backends",
    title: "authorize-invocation and binding invoke at saturation, PostgreSQL beside SQLite",
    targets:
      "PostgreSQL ≥ 0.8× SQLite's saturation throughput, each route; CPU per request (service + database) beside it, the figure a loaded machine disturbs least",
    run: async () => {
      const module = await import("./store-backends.ts");
      return [
        { title: "Saturation throughput:", rows: await module.benchStoreBackends() },
        {
          title:
            "Cost per record of the audit writer's append (decision 2751: ids checked against the log's):",
          rows: await module.benchAppendCost(),
        },
      ];
    },
  },
  {
    name: "managed",
    title:
      "Managed crypto API, 1 KB payloads, 16 connections (HTTPS → crypto service), rounds of every operation in turn, the load generator in a process of its own",
    targets: "≥ 500 sign-encrypt/s and ≥ 2,000 decrypt-verify/s (medians over the rounds)",
    run: async () => (await import("./managed.ts")).benchManaged(),
  },
  {
    name: "invoke",
    title: "Binding invoke vs calling the upstream directly, warm policy (rounds: fresh worlds)",
    targets: "added p50 ≤ 3 ms (the median over the rounds)",
    run: async () => (await (await import("./invoke.ts")).benchInvoke()).rows,
  },
  {
    name: "mcp",
    title:
      "Hosted MCP: tools/list for 500 allowed operations, tools/call vs the upstream directly (rounds: fresh services)",
    targets: "tools/list ≤ 20 ms p50; tools/call added p50 ≤ 1.5 ms (medians over the rounds)",
    run: async () => (await (await import("./mcp.ts")).benchMcp()).rows,
  },
  {
    name: "mcp-downstream",
    title:
      "A downstream MCP server behind /mcp: tools/call vs the downstream directly, tools/list of 500 tools",
    targets: "tools/call added p50 ≤ 2 ms",
    run: async () => (await import("./mcp-downstream.ts")).benchMcpDownstream(),
  },
  {
    name: "load",
    title: "Load with nothing lost: 20,000 mixed decisions + idempotent invokes",
    targets: "audit records = decisions, usage = decisions, each idempotent invoke executed once",
    run: async () => (await import("./load.ts")).benchLoad(),
  },
];

/** The Envoy bench's smoke form (also what test/bench/envoy.test.ts runs). */
export const ENVOY_QUICK = {
  rate: 100,
  durationMs: 500,
  warmupMs: 300,
  rounds: 1,
  checkPairs: 2,
  checkPairMs: 500,
  // A loaded CI machine may take longer than the shipped 0.25 s (and the sidecar's own
  // 200 ms deadline) for a Check: a smoke run checks the bench works, not the deadlines.
  extAuthzTimeout: "5s",
  sidecarDecisionTimeoutMs: 4000,
  warmCompileCache: false,
} as const;

const isTables = (result: Rows | readonly Table[]): result is readonly Table[] =>
  result.length > 0 && Array.isArray((result[0] as { rows?: unknown }).rows);

export async function runModule(module: BenchModule, context: BenchContext): Promise<SectionReport> {
  const probeBefore = cpuProbeMs();
  const started = performance.now();
  const base = {
    name: module.name,
    title: module.title,
    measuredAt: new Date().toISOString(),
    loadAtStart: Number((loadavg()[0] ?? 0).toFixed(2)),
    ...(module.targets === undefined ? {} : { targets: module.targets }),
  };
  try {
    const result = await module.run(context);
    const tables = isTables(result) ? result : [{ rows: result }];
    const seconds = (performance.now() - started) / 1000;
    return { ...base, tables, seconds, cpuProbeMs: [probeBefore, cpuProbeMs()] };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { ...base, tables: [], seconds: (performance.now() - started) / 1000, error: message };
  }
}

interface Arguments {
  readonly quick: boolean;
  readonly only: readonly string[];
  readonly out: string | undefined;
  /** Keep the sections of the page at `out` that this run does not measure. */
  readonly update: boolean;
}

const PAGE = fileURLToPath(new URL("../docs/benchmarks.md", import.meta.url));

function parseArguments(argv: readonly string[]): Arguments {
  let quick = false;
  let only = (process.env.ONLY ?? "").split(",").filter((name) => name.length > 0);
  let out: string | undefined;
  let update = process.env.UPDATE === "1";
  for (const argument of argv) {
    if (argument === "--quick") quick = true;
    else if (argument === "--update") update = true;
    else if (argument.startsWith("--only="))
      only = argument.slice("--only=".length).split(",").filter(Boolean);
    else if (argument.startsWith("--out=")) out = argument.slice("--out=".length);
    else throw new Error(`unknown argument ${argument} (--quick, --only=a,b, --update, --out=FILE)`);
  }
  const unknown = only.filter((name) => !BENCH_MODULES.some((module) => module.name === name));
  if (unknown.length > 0)
    throw new Error(
      `no bench module ${unknown.join(", ")}; known: ${BENCH_MODULES.map((m) => m.name).join(", ")}`,
    );
  if (update && quick) throw new Error("--update keeps measured figures: it cannot take --quick");
  // A full run replaces the committed page; --update replaces the sections it measured.
  const writes = !quick && (only.length === 0 || update);
  return { quick, only, update, out: out ?? (writes ? PAGE : undefined) };
}

async function main(): Promise<number> {
  const args = parseArguments(process.argv.slice(2));
  const facts: MachineFacts = machineFacts(fileURLToPath(new URL("../.tools/bin/envoy", import.meta.url)));
  const chosen = BENCH_MODULES.filter(
    (module) =>
      (args.only.length === 0 || args.only.includes(module.name)) && (!args.quick || module.quick === true),
  );
  console.log(
    `Authority benchmarks — node ${facts.node}, envoy ${facts.envoy}, ${facts.cores} cores, load ${facts.loadAtStart.join(" ")}, ${facts.date}${args.quick ? " (quick: smoke counts, figures not meaningful)" : ""}\n`,
  );
  const sections: SectionReport[] = [];
  for (const module of chosen) {
    const section = await runModule(module, { quick: args.quick });
    sections.push(section);
    console.log(renderSection(section));
  }
  const end: MachineFacts = {
    ...facts,
    loadAtEnd: loadavg().map((value) => Number(value.toFixed(2))),
  };
  if (args.out !== undefined) {
    const flags = [args.quick ? "--quick" : "", args.only.length > 0 ? `--only=${args.only.join(",")}` : ""];
    const command = ["make bench", ...flags.filter(Boolean)].join(" ");
    const previous = args.update ? await readFile(args.out, "utf8").catch(() => undefined) : undefined;
    const order = BENCH_MODULES.map((module) => module.name);
    await writeFile(
      args.out,
      renderReport(end, sections, args.update ? "make bench" : command, {
        order,
        ...(previous === undefined ? {} : { previous }),
      }),
    );
    console.log(`report written to ${args.out}`);
  }
  const failed = sections.filter((section) => section.error !== undefined);
  for (const section of failed) console.error(`bench module ${section.name} failed: ${section.error}`);
  return failed.length === 0 ? 0 : 1;
}

if (import.meta.main) process.exit(await main());
