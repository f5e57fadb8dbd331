import { readFile } from "node:fs/promises";
import type { Command } from "commander";

interface ReplayOptions {
  readonly url: string;
  readonly partner: string;
  readonly subject: string;
  readonly capability: string;
  readonly assignment: string;
  readonly since?: string;
  readonly until?: string;
  readonly examples?: string;
  readonly maxAllowToDeny?: string;
  readonly maxDenyToAllow?: string;
  readonly maxFlips?: string;
}

/** The counts of a dry run's answer the gate reads (docs/admin-api.md, `dry_run`). */
export interface ReplayCounts {
  readonly truncated: boolean;
  readonly replay: { readonly allow_to_deny: { count: number }; readonly deny_to_allow: { count: number } };
}

export interface GateThresholds {
  readonly maxAllowToDeny?: number;
  readonly maxDenyToAllow?: number;
  readonly maxFlips?: number;
}

export interface GateResult {
  readonly passed: boolean;
  /** Each threshold exceeded, or `truncated` when a gated replay could not read its whole window. */
  readonly failures: readonly string[];
}

/**
 * The CI gate: passes when no threshold given is exceeded. A window longer than one replay reads
 * fails a gated run (its counts would be a lower bound: fail closed).
 */
export function replayGate(answer: ReplayCounts, thresholds: GateThresholds): GateResult {
  const allowToDeny = answer.replay.allow_to_deny.count;
  const denyToAllow = answer.replay.deny_to_allow.count;
  const checks: Array<[string, number, number | undefined]> = [
    ["allow_to_deny", allowToDeny, thresholds.maxAllowToDeny],
    ["deny_to_allow", denyToAllow, thresholds.maxDenyToAllow],
    ["flips", allowToDeny + denyToAllow, thresholds.maxFlips],
  ];
  const failures = checks
    .filter(([, count, most]) => most !== undefined && count > most)
    .map(([name, count, most]) => `${name} ${count} > ${most}`);
  const gated = checks.some(([, , most]) => most !== undefined);
  if (gated && answer.truncated)
    failures.push("truncated: the window holds more records than one replay reads");
  return { passed: failures.length === 0, failures };
}

function count(name: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value)) throw new Error(`--${name} is not a whole number`);
  return value;
}

function thresholdsOf(options: ReplayOptions): GateThresholds {
  const allowToDeny = count("max-allow-to-deny", options.maxAllowToDeny);
  const denyToAllow = count("max-deny-to-allow", options.maxDenyToAllow);
  const flips = count("max-flips", options.maxFlips);
  return {
    ...(allowToDeny === undefined ? {} : { maxAllowToDeny: allowToDeny }),
    ...(denyToAllow === undefined ? {} : { maxDenyToAllow: denyToAllow }),
    ...(flips === undefined ? {} : { maxFlips: flips }),
  };
}

function dryRunUrl(options: ReplayOptions): URL {
  const segment = encodeURIComponent;
  const url = new URL(
    `/partners/${segment(options.partner)}/caab/subjects/${segment(options.subject)}/policies/${segment(options.capability)}`,
    options.url,
  );
  url.searchParams.set("dry_run", "true");
  if (options.since !== undefined) url.searchParams.set("since", options.since);
  if (options.until !== undefined) url.searchParams.set("until", options.until);
  if (options.examples !== undefined) url.searchParams.set("examples", options.examples);
  return url;
}

/** Exit codes: 0 the gate passed, 1 a threshold was exceeded, 2 the replay could not run. */
const USAGE_OR_SERVER_ERROR = 2;

/**
 * `authority replay`: the dry run of an assignment (the PUT body in a file, as a change under
 * review holds it) over the recorded decisions of its subject and capability, printed as JSON
 * with the gate's verdict; exits 1 when flips exceed a threshold given (a CI gate). The admin
 * token comes from AUTHORITY_TOKEN, never from an argument.
 */
export function register(program: Command): void {
  program
    .command("replay")
    .description("Replay recorded decisions against a proposed assignment, changing nothing (a CI gate)")
    .requiredOption("--url <url>", "the authority's base URL")
    .requiredOption("--partner <id>", "the partner")
    .requiredOption("--subject <id>", "the subject")
    .requiredOption("--capability <id>", "the capability")
    .requiredOption("--assignment <file>", "the proposed assignment: the JSON body of the policy PUT")
    .option("--since <time>", "start of the window (ISO 8601; default seven days before --until)")
    .option("--until <time>", "end of the window (ISO 8601; default now)")
    .option("--examples <n>", "most examples per direction (default 5)")
    .option("--max-allow-to-deny <n>", "fail when more allowed decisions would be denied")
    .option("--max-deny-to-allow <n>", "fail when more denied decisions would be allowed")
    .option("--max-flips <n>", "fail when more decisions would flip, both ways together")
    .action(async (options: ReplayOptions, cmd: Command) => {
      const fail = (message: string): never =>
        cmd.error(`authority replay: ${message}`, { exitCode: USAGE_OR_SERVER_ERROR });
      const token = process.env.AUTHORITY_TOKEN;
      if (token === undefined || token === "") fail("set AUTHORITY_TOKEN to an admin token");
      let thresholds: GateThresholds = {};
      let body = "";
      try {
        thresholds = thresholdsOf(options);
        body = JSON.stringify(JSON.parse(await readFile(options.assignment, "utf8")));
      } catch (error) {
        fail((error as Error).message);
      }
      const response = await fetch(dryRunUrl(options), {
        method: "PUT",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body,
      });
      const answer = (await response.json()) as ReplayCounts & Record<string, unknown>;
      if (!response.ok || answer.replay === undefined) {
        process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
        fail(`the authority answered ${response.status}`);
      }
      const gate = replayGate(answer, thresholds);
      process.stdout.write(`${JSON.stringify({ ...answer, gate }, null, 2)}\n`);
      if (!gate.passed) process.exitCode = 1;
    });
}
