/**
 * Counting and reporting for the reliability suite: each file counts what it tried and
 * prints one summary line (`faults injected: N, bad inputs tried: N, attacks tried: N,
 * records lost: 0`) as a test diagnostic, and ends with the leak check over
 * every log line and response the system produced.
 */
import assert from "node:assert/strict";
import type { TestContext } from "node:test";
import type { System } from "./system.ts";

export interface SuiteCounts {
  faultsInjected: number;
  badInputsTried: number;
  attacksTried: number;
  recordsLost: number;
}

export function newCounts(): SuiteCounts {
  return { faultsInjected: 0, badInputsTried: 0, attacksTried: 0, recordsLost: 0 };
}

export function summaryLine(file: string, counts: SuiteCounts, extra = ""): string {
  return (
    `${file}: faults injected: ${counts.faultsInjected}, bad inputs tried: ${counts.badInputsTried}, ` +
    `attacks tried: ${counts.attacksTried}, records lost: ${counts.recordsLost}${extra === "" ? "" : `, ${extra}`}`
  );
}

/** The summary line as a test diagnostic (the reporters print it; `make unit`'s log keeps it). */
export function report(t: TestContext, file: string, counts: SuiteCounts, extra = ""): void {
  t.diagnostic(summaryLine(file, counts, extra));
}

/**
 * Every captured log line, and every response the system's `call()` received, is free of
 * planted canaries, watched secrets and sent tokens; no response carried a stack trace or
 * an internal path. Returns how much was scanned.
 */
export function assertNoLeaks(system: System): { responses: number; logLines: number } {
  system.scanLogs();
  const findings = system.leaks.findings();
  assert.deepEqual(findings, [], `leaks found: ${JSON.stringify(findings.slice(0, 10))}`);
  const { responses, logLines } = system.leaks.counts;
  assert.ok(logLines > 0, "the servers logged nothing: the capture is not wired");
  return { responses, logLines };
}

/** Asserts a request finished within `boundMs` and says what it was on failure. */
export function assertWithin(elapsedMs: number, boundMs: number, what: string): void {
  assert.ok(
    elapsedMs <= boundMs,
    `${what} took ${Math.round(elapsedMs)} ms, more than the ${boundMs} ms bound`,
  );
}
