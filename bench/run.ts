/**
 * `make bench`: runs every benchmark section and prints one table each, with the targets
 * beside them. `make bench ONLY=crypto,policy` runs a subset.
 */

type Row = Record<string, string | number | boolean | undefined>;

interface Section {
  readonly name: string;
  readonly title: string;
  readonly targets?: string;
  readonly run: () => Promise<readonly object[]>;
}

const sections: Section[] = [
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
    name: "path",
    title:
      "Path rule: decide() on a 100-operation catalog with literal siblings, the rule alone, render + re-match",
    targets: "all extra checks ≤ 25 µs CPU per Check (issue 15)",
    run: async () => (await import("./path-values.ts")).benchPathValues(),
  },
  {
    name: "authorize",
    title: "POST /v1/authorize-invocation over HTTP on loopback, warm policy",
    targets: "p99 ≤ 5 ms at 1,000 req/s; ≥ 5,000 req/s at saturation",
    run: async () => (await import("./authorize.ts")).benchAuthorize(),
  },
  {
    name: "managed",
    title: "Managed crypto API, 1 KB payloads, 16 connections (HTTPS → crypto service)",
    targets: "≥ 500 sign-encrypt/s and ≥ 2,000 decrypt-verify/s",
    run: async () => (await import("./managed.ts")).benchManaged(),
  },
  {
    name: "invoke",
    title: "Binding invoke vs calling the upstream directly, warm policy",
    targets: "added p50 ≤ 3 ms",
    run: async () => {
      const result = await (await import("./invoke.ts")).benchInvoke();
      return [
        { ...result.direct },
        { ...result.invoke },
        { name: "added by invoke", p50Ms: result.overheadP50Ms, p99Ms: result.overheadP99Ms },
        { name: "inside the engine (evidence timings)", p50Ms: result.engine.totalP50Ms },
      ];
    },
  },
  {
    name: "mcp",
    title: "Hosted MCP: tools/list for 500 allowed operations, tools/call vs the upstream directly",
    targets: "tools/list ≤ 20 ms p50; tools/call added p50 ≤ 3 ms",
    run: async () => (await (await import("./mcp.ts")).benchMcp()).rows,
  },
  {
    name: "sidecar",
    title: "Sidecar: ext_authz Check beside a no-op grpc-js server, forward proxy vs direct, RSS",
    targets:
      "Check ≥ 0.8× no-op throughput, p99 ≤ 1 ms at 1,000 req/s; proxy adds ≤ 1 ms p50, ≥ 0.5× direct; RSS ≤ 150 MB",
    run: async () => (await import("./sidecar.ts")).benchSidecar(),
  },
  {
    name: "sidecar-input",
    title: "Sidecar request enforcement (schema, constraints, body, headers_to_remove): CPU per Check",
    targets: "all extra checks together ≤ 25 µs CPU per Check",
    run: async () => (await import("./sidecar-input.ts")).benchSidecarInput(),
  },
  {
    name: "load",
    title: "Load with nothing lost: 20,000 mixed decisions + idempotent invokes",
    targets: "audit records = decisions, usage = decisions, each idempotent invoke executed once",
    run: async () => (await import("./load.ts")).benchLoad(),
  },
];

function format(value: unknown): string {
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(3);
  return value === undefined ? "" : String(value);
}

function printTable(rows: readonly object[]): void {
  const records = rows as readonly Row[];
  const columns = [...new Set(records.flatMap((row) => Object.keys(row)))];
  const cells = records.map((row) => columns.map((column) => format(row[column])));
  const widths = columns.map((column, i) =>
    Math.max(column.length, ...cells.map((line) => (line[i] ?? "").length)),
  );
  const line = (values: readonly string[]) =>
    `| ${values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  console.log(line(columns));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const values of cells) console.log(line(values));
}

async function main(): Promise<void> {
  const only = (process.env.ONLY ?? "").split(",").filter((name) => name.length > 0);
  const chosen = only.length === 0 ? sections : sections.filter((section) => only.includes(section.name));
  console.log(`Authority benchmarks — node ${process.version}, ${new Date().toISOString()}\n`);
  for (const section of chosen) {
    console.log(`## ${section.title}`);
    if (section.targets !== undefined) console.log(`Targets: ${section.targets}`);
    printTable(await section.run());
    console.log("");
  }
}

await main();
process.exit(0);
