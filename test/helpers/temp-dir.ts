/**
 * A fresh directory under the OS temp dir, removed by cleanup() (or `await using`), and in
 * any case when the process exits.
 *
 *   const dir = await makeTempDir("store-");
 *   after(() => dir.cleanup());
 *   join(dir.path, "authority.db")
 */
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TempDir {
  readonly path: string;
  cleanup(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const pending = new Set<string>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once("exit", () => {
    for (const path of pending) rmSync(path, { recursive: true, force: true });
  });
}

export async function makeTempDir(prefix = "authority-test-"): Promise<TempDir> {
  installExitHook();
  const path = await mkdtemp(join(tmpdir(), prefix));
  pending.add(path);
  const cleanup = async (): Promise<void> => {
    pending.delete(path);
    await rm(path, { recursive: true, force: true });
  };
  return { path, cleanup, [Symbol.asyncDispose]: cleanup };
}
