/**
 * Runs a guide's `sh` blocks as written, in order, in one `bash -euo pipefail`, from the
 * repository root: what test/docs/onboarding.test.ts and protect-your-api.test.ts share. Only
 * the replacements a test names (documented addresses, the state directory, ports) change the
 * page's text; a guard kills the background processes the page starts, even when a step fails.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
export const repo = new URL("../../", import.meta.url).pathname;

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export function shellBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((match) => match[1] ?? "");
}

/** The outputs a page shows on lines of their own inside its `sh` blocks (`# {…}`, `# GET 200`). */
export function documentedOutputs(blocks: readonly string[]): string[] {
  return blocks
    .flatMap((block) => block.split("\n"))
    .map((line) => /^# (.+)$/.exec(line)?.[1])
    .filter((text) => text !== undefined);
}

export interface GuideRun {
  readonly blocks: readonly string[];
  readonly stdout: string;
  /** Non-empty output lines. */
  readonly lines: readonly string[];
}

export async function runGuide(options: {
  /** The page, relative to the repository root. */
  readonly page: string;
  readonly replacements: readonly (readonly [string, string])[];
  /** Shell variables holding the PIDs of background processes the page starts. */
  readonly pidVariables: readonly string[];
  readonly env: Readonly<Record<string, string>>;
}): Promise<GuideRun> {
  const blocks = shellBlocks(await readFile(join(repo, options.page), "utf8"));
  let script = blocks.join("\n");
  for (const [from, to] of options.replacements) script = script.replaceAll(from, to);
  const kill = options.pidVariables.map((name) => `kill \${${name}:-} 2>/dev/null || true`).join("; ");
  const guarded = `trap '${kill}' EXIT\n${script}`;
  const { stdout } = await run("bash", ["-euo", "pipefail", "-c", guarded], {
    cwd: repo,
    env: { ...process.env, ...options.env },
    timeout: 180_000,
    maxBuffer: 4 * 1024 * 1024,
  });
  return { blocks, stdout, lines: stdout.split("\n").filter((line) => line.trim().length > 0) };
}

/** Every `expected` line is among `lines`, in that order (other lines may come between). */
export function assertInOrder(lines: readonly string[], expected: readonly string[], stdout: string): void {
  let at = 0;
  for (const line of expected) {
    while (at < lines.length && lines[at] !== line) at += 1;
    assert.ok(at < lines.length, `documented output ${line} in order in:\n${stdout}`);
    at += 1;
  }
}
