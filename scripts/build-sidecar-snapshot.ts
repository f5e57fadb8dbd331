/**
 * Spike: bundle the sidecar (esbuild) and write a V8 start-up snapshot of its module graph.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { spawnSync } from "node:child_process";
import { build, type Plugin } from "esbuild";

const require = createRequire(import.meta.url);
const LAZY_BUILTINS = ["http", "https", "http2", "tls"];

function plainData(value: unknown): boolean {
  try {
    return JSON.stringify(value) !== undefined && typeof value !== "function";
  } catch {
    return false;
  }
}

function lazyBuiltinSource(name: string): string {
  const real = require(`node:${name}`) as Record<string, unknown>;
  const keys = Object.keys(real);
  const data = Object.fromEntries(keys.filter((key) => plainData(real[key])).map((key) => [key, real[key]]));
  return `"use strict";
const keys = ${JSON.stringify(keys)};
const data = ${JSON.stringify(data)};
let real;
const load = () => (real ??= require("node:${name}"));
module.exports = new Proxy({}, {
  get: (_, key) => (Object.hasOwn(data, key) ? data[key] : load()[key]),
  has: (_, key) => keys.includes(key),
  ownKeys: () => keys,
  getOwnPropertyDescriptor: (_, key) =>
    keys.includes(key) ? { configurable: true, enumerable: true, writable: true, value: undefined } : undefined,
});
`;
}

const lazyBuiltins: Plugin = {
  name: "lazy-builtins",
  setup(b) {
    b.onResolve({ filter: new RegExp(`^(node:)?(${LAZY_BUILTINS.join("|")})$`) }, (args) =>
      args.namespace === "lazy-builtin"
        ? undefined
        : { path: args.path.replace(/^node:/, ""), namespace: "lazy-builtin" },
    );
    b.onLoad({ filter: /.*/, namespace: "lazy-builtin" }, (args) => ({
      contents: lazyBuiltinSource(args.path),
      loader: "js",
    }));
    b.onLoad({ filter: /\/src\/.*\.ts$/ }, (args) => ({
      contents: readFileSync(args.path, "utf8").replaceAll(
        "import.meta.url",
        JSON.stringify(pathToFileURL(args.path).href),
      ),
      loader: "ts",
    }));
  },
};

const out = process.argv[2] ?? "build/sidecar-snapshot";
await build({
  entryPoints: ["scripts/sidecar-snapshot-entry.ts"],
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node24",
  outfile: `${out}/sidecar.cjs`,
  plugins: [lazyBuiltins],
  logLevel: "warning",
});
const result = spawnSync(
  process.execPath,
  ["--snapshot-blob", `${out}/sidecar.blob`, "--build-snapshot", `${out}/sidecar.cjs`],
  { stdio: "inherit" },
);
process.exit(result.status ?? 1);
