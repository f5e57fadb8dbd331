/**
 * Fills NODE_COMPILE_CACHE with every module the servers load, so that a process started
 * from the image neither strips TypeScript (a ≈ 17 MB WebAssembly compiler) nor compiles the
 * modules again (docs/sidecar.md, "Memory"). Run at image build with the NODE_OPTIONS the
 * containers use: the cache depends on V8's flags.
 *
 *   NODE_COMPILE_CACHE=/app/.compile-cache node scripts/warm-compile-cache.ts
 *
 * Importing a module under src/ only defines things (no module starts a server on import).
 * Worker-thread entries (`*-thread.ts`) run only inside their worker and are left out. The
 * entry point, bin/authority.ts, runs its CLI when loaded: it is cached by `authority --help`
 * in a child process with the same flags.
 */
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { flushCompileCache, getCompileCacheDir } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

function modulesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return modulesUnder(path);
    // .cjs: the generated schema validators (src/core/generated-validators/), loaded on first use.
    const module = entry.name.endsWith(".ts") || entry.name.endsWith(".cjs");
    return module && !entry.name.endsWith("-thread.ts") ? [path] : [];
  });
}

if (getCompileCacheDir() === undefined) {
  console.error("NODE_COMPILE_CACHE is not set (or the cache could not be enabled): nothing to fill");
  process.exit(1);
}
const modules = modulesUnder(join(root, "src"));
for (const path of modules) await import(pathToFileURL(path).href);
flushCompileCache();
const help = spawnSync(process.execPath, [...process.execArgv, join(root, "bin/authority.ts"), "--help"], {
  stdio: "ignore",
});
if (help.status !== 0) {
  console.error(`authority --help exited with ${help.status}`);
  process.exit(1);
}
console.log(`compile cache ${getCompileCacheDir()}: ${modules.length} modules`);
