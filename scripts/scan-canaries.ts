/**
 * Scans captured output (e.g. the whole test run's stdout and stderr) for the planted
 * canaries of the reliability suite (`CANARY-<16 hex>`, test/helpers/canary.ts): any hit
 * means a planted secret reached a log line or an output somewhere.
 *
 *   node --test … 2>&1 | tee .authority-test.log
 *   node scripts/scan-canaries.ts .authority-test.log [more files…]
 *
 * Exit 0: no canary. Exit 1: canaries found (each reported as file:line with the canary
 * shortened, so the report does not repeat it). Exit 2: usage error or unreadable file.
 */
import { createReadStream } from "node:fs";
import { access } from "node:fs/promises";
import { createInterface } from "node:readline";
import { CANARY_PATTERN } from "../test/helpers/canary.ts";

export interface CanaryHit {
  readonly file: string;
  readonly line: number;
  /** The canary shortened to its marker and first hex digits. */
  readonly hint: string;
}

export async function scanFile(file: string): Promise<CanaryHit[]> {
  const hits: CanaryHit[] = [];
  const lines = createInterface({
    input: createReadStream(file, { encoding: "utf8" }),
    crlfDelay: Number.POSITIVE_INFINITY,
  });
  let number = 0;
  for await (const text of lines) {
    number++;
    for (const match of text.matchAll(CANARY_PATTERN)) {
      hits.push({ file, line: number, hint: `${match[0].slice(0, 10)}…` });
    }
  }
  return hits;
}

async function main(files: readonly string[]): Promise<number> {
  if (files.length === 0) {
    console.error("usage: node scripts/scan-canaries.ts <log file> [more files…]");
    return 2;
  }
  for (const file of files) {
    try {
      await access(file);
    } catch {
      console.error(`scan-canaries: cannot read ${file}`);
      return 2;
    }
  }
  const hits = (await Promise.all(files.map((file) => scanFile(file)))).flat();
  if (hits.length === 0) {
    console.log(`scan-canaries: no planted canary in ${files.join(", ")}`);
    return 0;
  }
  console.error(`scan-canaries: ${hits.length} planted canar${hits.length === 1 ? "y" : "ies"} found:`);
  for (const hit of hits.slice(0, 50)) console.error(`  ${hit.file}:${hit.line}: ${hit.hint}`);
  if (hits.length > 50) console.error(`  … and ${hits.length - 50} more`);
  return 1;
}

if (import.meta.main) process.exit(await main(process.argv.slice(2)));
