/**
 * `authority demo`: the development environment on free ports in a temporary state
 * directory (so it never collides with a running `authority dev`), a short walk-through of
 * every runtime path with each outcome checked, then shutdown. The summary says whether
 * every outcome was the expected one.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "../../observability/logger.ts";
import { type DevEnvironment, startDevEnvironment } from "../environment.ts";
import { createDemoContext, type DemoContext } from "./context.ts";
import { createReporter, type DemoSummary } from "./reporter.ts";
import { adminSection, authorizeSection } from "./steps-authorize.ts";
import { bindingSection } from "./steps-binding.ts";
import { downstreamSection } from "./steps-downstream.ts";
import { managedSection } from "./steps-managed.ts";
import { mcpSection } from "./steps-mcp.ts";
import { policySafetySection } from "./steps-policy-safety.ts";
import { sidecarSection } from "./steps-sidecar.ts";
import { userGrantSection } from "./steps-user-grant.ts";

export interface DemoOptions {
  /** Where the story is told (one line per call). */
  readonly write: (line: string) => void;
  readonly color?: boolean;
  /** Component logs (quiet by default in the command). */
  readonly log: Logger;
  readonly redisUrl?: string;
  /** Deadline of one section (default 20 s). */
  readonly sectionTimeoutMs?: number;
}

export interface DemoResult extends DemoSummary {
  readonly durationMs: number;
}

interface Section {
  readonly name: string;
  readonly run: (ctx: DemoContext) => Promise<void>;
  /** Its own deadline, for a section that starts processes (default: the option's). */
  readonly timeoutMs?: number;
}

const sections: readonly Section[] = [
  { name: "admin API", run: adminSection },
  { name: "authorize-invocation", run: authorizeSection },
  { name: "managed crypto API", run: managedSection },
  { name: "headless binding invoke", run: bindingSection },
  { name: "hosted MCP", run: mcpSection },
  { name: "downstream MCP server", run: downstreamSection },
  { name: "sidecar", run: sidecarSection },
  // It moves the agent's policy onto the user's grant (the section after it has its own subject).
  { name: "acting for the user", run: userGrantSection },
  // Runs `authority audit export` and `audit verify` (three processes): a longer deadline.
  { name: "policy safety and the record", run: policySafetySection, timeoutMs: 60_000 },
];

function withDeadline<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

function printEnvironment(write: (line: string) => void, env: DevEnvironment): void {
  const { urls } = env;
  write("Started on free ports, state in a temporary directory:");
  write(`  authority service    ${urls.authority}`);
  write(`  managed crypto API   ${urls.managed}`);
  write(`  crypto service       ${urls.crypto}`);
  write(`  identity provider    ${urls.idp}`);
  write(`  sample customers API ${urls.sampleApi}`);
  if (urls.sidecar !== undefined) {
    write(
      `  sidecar              grpc ${urls.sidecar.grpc}, proxy ${urls.sidecar.proxy}, metrics ${urls.sidecar.metrics}`,
    );
  }
  for (const warning of env.warnings) write(`  warning: ${warning}`);
}

export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const started = Date.now();
  const report = createReporter({
    write: options.write,
    ...(options.color === undefined ? {} : { color: options.color }),
  });
  const stateDir = await mkdtemp(join(tmpdir(), "authority-demo-"));
  let env: DevEnvironment | undefined;
  try {
    options.write("authority demo: every runtime path, allowed and denied, each outcome checked.");
    env = await startDevEnvironment({
      stateDir,
      ports: "ephemeral",
      log: options.log,
      ...(options.redisUrl === undefined ? {} : { redisUrl: options.redisUrl }),
    });
    printEnvironment(options.write, env);
    const ctx = createDemoContext(env, report);
    for (const section of sections) {
      try {
        const deadline = section.timeoutMs ?? options.sectionTimeoutMs ?? 20_000;
        await withDeadline(section.run(ctx), deadline, section.name);
      } catch (error) {
        report.error(section.name, error);
      }
    }
  } catch (error) {
    report.error("start the development environment", error);
  } finally {
    await env?.close();
    await rm(stateDir, { recursive: true, force: true });
  }
  const summary = report.summary();
  const durationMs = Date.now() - started;
  options.write("");
  options.write(
    `${summary.failed === 0 ? "All" : "Not all"} outcomes as expected: ${summary.passed} passed, ${summary.failed} failed` +
      `${summary.skipped > 0 ? `, ${summary.skipped} skipped` : ""} (${(durationMs / 1000).toFixed(1)} s).`,
  );
  for (const failure of summary.failures) options.write(`  failed: ${failure}`);
  return { ...summary, durationMs };
}
