/**
 * The report of one `make bench` run: machine facts, then each section's tables, each column
 * titled with its unit. Rendered as Markdown for docs/benchmarks.md and as the same tables on
 * the console. Numbers are written as measured; nothing here is hand-written.
 */
import { execFileSync } from "node:child_process";
import { cpus, loadavg, release, totalmem } from "node:os";

export interface Table {
  readonly title?: string;
  readonly rows: readonly object[];
}

export interface SectionReport {
  readonly name: string;
  readonly title: string;
  readonly targets?: string;
  readonly tables: readonly Table[];
  /** Wall-clock seconds the section took. */
  readonly seconds: number;
  /** When the section was measured, and the 1-minute load average then (sections of one page may come from different runs). */
  readonly measuredAt?: string;
  readonly loadAtStart?: number;
  /** A fixed workload's milliseconds before and after the section (bench/lib/cpu-probe.ts). */
  readonly cpuProbeMs?: readonly [number, number];
  /** Set when the section threw: its message (the run then fails). */
  readonly error?: string;
}

export interface MachineFacts {
  readonly date: string;
  readonly cores: number;
  readonly cpuModel: string;
  readonly memoryGb: number;
  readonly kernel: string;
  readonly node: string;
  readonly envoy: string;
  /** 1, 5 and 15 minute load averages. */
  readonly loadAtStart: readonly number[];
  readonly loadAtEnd?: readonly number[];
}

/** The facts of this machine now (the load average is read again at the end of the run). */
export function machineFacts(envoyBinary: string): MachineFacts {
  let envoy = "not found";
  try {
    const text = execFileSync(envoyBinary, ["--version"], { encoding: "utf8", timeout: 10_000 });
    envoy = /version: \S+?\/(\d+\.\d+\.\d+)/.exec(text)?.[1] ?? text.trim();
  } catch {
    // No Envoy: the Envoy section reports the failure itself.
  }
  return {
    date: new Date().toISOString(),
    cores: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? "unknown",
    memoryGb: Number((totalmem() / 1024 ** 3).toFixed(1)),
    kernel: release(),
    node: process.version,
    envoy,
    loadAtStart: loadavg().map((value) => Number(value.toFixed(2))),
  };
}

const WORDS: Readonly<Record<string, string>> = {
  cpu: "CPU",
  rss: "RSS",
  envoy: "Envoy",
  authz: "ext_authz",
};

function words(camel: string): string {
  return camel
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .split(" ")
    .map((word) => WORDS[word.toLowerCase()] ?? word.toLowerCase())
    .join(" ");
}

/** A row key as a column title with its unit: `p50Ms` → "p50 (ms)", `cpuUsPerCheck` → "CPU per check (µs)". */
export function columnTitle(key: string): string {
  const units: ReadonlyArray<[RegExp, string]> = [
    [/^(.*)UsPer(.+)$/, "µs"],
    [/^(.*)MsPer(.+)$/, "ms"],
  ];
  for (const [pattern, unit] of units) {
    const match = pattern.exec(key);
    if (match !== null) return `${words(match[1] ?? "")} per ${words(match[2] ?? "")} (${unit})`;
  }
  const suffixes: ReadonlyArray<[RegExp, string]> = [
    [/^(.+)Ms$/, "ms"],
    [/^(.+)Us$/, "µs"],
    [/^(.+)Mb$/i, "MB"],
    [/^(.+)Bytes$/, "bytes"],
    [/^(.*?)[Rr]eqPerSec$/, "req/s"],
    [/^(.+)PerSec$/, "/s"],
    [/^(.+)Ratio$/, "×"],
  ];
  for (const [pattern, unit] of suffixes) {
    const match = pattern.exec(key);
    if (match !== null) return match[1] === "" ? unit : `${words(match[1] ?? "")} (${unit})`;
  }
  return words(key);
}

function cell(value: unknown): string {
  if (typeof value === "number") {
    if (Number.isNaN(value)) return "–";
    return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(3)));
  }
  if (value === undefined || value === null) return "";
  return String(value).replaceAll("|", "\\|");
}

/** A Markdown table (also readable as plain text). */
export function renderTable(rows: readonly object[]): string {
  const records = rows as ReadonlyArray<Record<string, unknown>>;
  const keys = [...new Set(records.flatMap((row) => Object.keys(row)))];
  const titles = keys.map(columnTitle);
  const cells = records.map((row) => keys.map((key) => cell(row[key])));
  const widths = titles.map((title, i) =>
    Math.max(title.length, ...cells.map((line) => (line[i] ?? "").length)),
  );
  const line = (values: readonly string[]) =>
    `| ${values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  return [line(titles), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...cells.map(line)].join("\n");
}

/** A section's Markdown between markers that name its module: `--update` replaces it alone. */
export function renderSection(section: SectionReport): string {
  const lines = [`<!-- bench:${section.name} -->`, `## ${section.title}`, ""];
  if (section.targets !== undefined) lines.push(`Targets: ${section.targets}`, "");
  if (section.error !== undefined) lines.push(`**Failed:** ${section.error}`, "");
  for (const table of section.tables) {
    if (table.title !== undefined) lines.push(`${table.title}`, "");
    lines.push(renderTable(table.rows), "");
  }
  const when = section.measuredAt === undefined ? "" : `, measured ${section.measuredAt}`;
  const load = section.loadAtStart === undefined ? "" : `, load ${section.loadAtStart}`;
  const probe = section.cpuProbeMs === undefined ? "" : `, CPU probe ${section.cpuProbeMs.join(" → ")} ms`;
  lines.push(
    `_\`${section.name}\`: ${section.seconds.toFixed(0)} s${when}${load}${probe}_`,
    `<!-- /bench:${section.name} -->`,
    "",
  );
  return lines.join("\n");
}

const SECTION = /<!-- bench:([\w-]+) -->\n[\s\S]*?<!-- \/bench:\1 -->\n\n?/g;

/** The rendered sections of a page, by module name. */
export function pageSections(page: string): Map<string, string> {
  const sections = new Map<string, string>();
  for (const match of page.matchAll(SECTION))
    if (match[1] !== undefined) sections.set(match[1], `${match[0].trimEnd()}\n`);
  return sections;
}

export function renderFacts(facts: MachineFacts): string {
  const load = (values: readonly number[] | undefined) => (values === undefined ? "?" : values.join(" / "));
  return [
    `- Date: ${facts.date}`,
    `- Machine: ${facts.cores} cores (${facts.cpuModel}), ${facts.memoryGb} GB, Linux ${facts.kernel}`,
    `- Load average (1 / 5 / 15 min): ${load(facts.loadAtStart)} at start, ${load(facts.loadAtEnd)} at end`,
    `- Node ${facts.node}, Envoy ${facts.envoy}`,
  ].join("\n");
}

/**
 * The page: the machine, then one rendered section per module in `order`. A section comes from
 * this run when it is in `sections`, otherwise from `previous` (the page before, when only
 * some modules were run again with --update); a module in neither is listed as not measured.
 */
export function renderReport(
  facts: MachineFacts,
  sections: readonly SectionReport[],
  command: string,
  options: { readonly order?: readonly string[]; readonly previous?: string } = {},
): string {
  const fresh = new Map(sections.map((section) => [section.name, renderSection(section)]));
  const kept = options.previous === undefined ? new Map<string, string>() : pageSections(options.previous);
  const order = options.order ?? sections.map((section) => section.name);
  const missing = order.filter((name) => !fresh.has(name) && !kept.has(name));
  return [
    "# Benchmarks",
    "",
    `Generated by \`${command}\` (bench/run.ts); do not edit by hand — run it again. Each figure`,
    "was measured on this machine; compare figures within one section, not across machines.",
    "Each section says when it was measured and the load then (`make bench ONLY=a,b UPDATE=1`",
    "measures some sections again). Where the load average is well above the core count, other",
    "work shared the CPUs and latencies are inflated: CPU time per request is the least disturbed figure.",
    "The machine is a VM whose host runs other work too, which its load average does not show: each",
    "section's CPU probe is the milliseconds a fixed single-threaded workload took before and after it",
    "(bench/lib/cpu-probe.ts); where it is higher, every figure of that section was measured on a slower CPU.",
    "",
    renderFacts(facts),
    ...(missing.length === 0 ? [] : [`- Not measured yet: ${missing.join(", ")}`]),
    "",
    ...order.flatMap((name) => fresh.get(name) ?? kept.get(name) ?? []),
  ].join("\n");
}
