/**
 * `make sidecar-snapshot`: the sidecar's V8 start-up snapshot (decision 2799).
 *
 * 1. esbuild bundles scripts/sidecar-snapshot-entry.ts (the sidecar command and everything it
 *    imports) into one CommonJS file: a snapshot's entry can `require` built-ins only. Of the
 *    validators generated at build time (src/core/generated-validators/), only those of the
 *    schemas the bundle's own modules declare go in. Whitespace and comments are left out and
 *    the bundle must be ASCII: V8 keeps a script's whole source in the heap as one string, and a
 *    single character past Latin-1 (a "…" in a comment) stores all of it at two bytes per
 *    character (decision 3021: the 3.6 MB bundle took 7.3 MB of the blob).
 *    `node:http`, `https`, `http2` and `tls` hold native handles Node cannot write into a
 *    snapshot, so the bundle gets each as a stand-in that loads the real module on first use
 *    (after start) and answers its constant tables (`http2.constants`, `METHODS`, `STATUS_CODES`)
 *    from a copy taken here.
 * 2. `node --build-snapshot` evaluates the bundle and writes the heap to `sidecar.blob`.
 * 3. `node-version` names the Node that built it (bin/authority-sidecar compares it before it
 *    starts Node from the blob: another Node refuses the blob and exits);
 *    `snapshot.json` (written last) names the Node, the directory it was built in, the files the bundle was built from (the
 *    repository's own, the .proto files and the lock file that fixes node_modules) and their
 *    hash; bin/authority.ts starts from the blob only while both still match.
 *
 *   node scripts/build-sidecar-snapshot.ts [output directory, default build/sidecar-snapshot]
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type BuildOptions, build, type Plugin } from "esbuild";
import {
  BLOB_FILE,
  NODE_VERSION_FILE,
  SNAPSHOT_DIR,
  type SnapshotStamp,
  STAMP_FILE,
  sourcesDigest,
} from "../src/cli/sidecar-snapshot.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
/**
 * The built-ins Node cannot snapshot, each with the constant tables the bundle reads while it is
 * evaluated (copied at build: fixed per Node version, which the stamp pins). Nothing that a
 * flag or the environment sets at run time (`maxHeaderSize`, cipher lists, agents) is copied.
 */
const LAZY_BUILTINS: Readonly<Record<string, readonly string[]>> = {
  http: ["METHODS", "STATUS_CODES"],
  https: [],
  http2: ["constants"],
  tls: [],
};
const require = createRequire(import.meta.url);

function lazyBuiltinSource(name: string): string {
  const real = require(`node:${name}`) as Record<string, unknown>;
  const keys = Object.keys(real);
  const data = Object.fromEntries((LAZY_BUILTINS[name] ?? []).map((key) => [key, real[key]]));
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

/** The stand-ins above, and each source's own `import.meta.url` (a bundle has only one). */
const snapshotSafe: Plugin = {
  name: "snapshot-safe",
  setup(builder) {
    const lazy = new RegExp(`^(node:)?(${Object.keys(LAZY_BUILTINS).join("|")})$`);
    builder.onResolve({ filter: lazy }, (args) =>
      args.namespace === "lazy-builtin"
        ? undefined
        : { path: args.path.replace(/^node:/, ""), namespace: "lazy-builtin" },
    );
    builder.onLoad({ filter: /.*/, namespace: "lazy-builtin" }, (args) => ({
      contents: lazyBuiltinSource(args.path),
      loader: "js",
    }));
    builder.onLoad({ filter: /\.ts$/ }, (args) => ({
      contents: readFileSync(args.path, "utf8").replaceAll(
        "import.meta.url",
        JSON.stringify(pathToFileURL(args.path).href),
      ),
      loader: "ts",
    }));
  },
};

/**
 * The keys of the schemas that the bundle's modules of src/ declare (each schema given to
 * compileSchema is a module-level constant: importing a module declares its schemas).
 */
async function declaredSchemaKeys(options: BuildOptions): Promise<ReadonlySet<string>> {
  const { metafile } = await build({ ...options, write: false, metafile: true });
  for (const input of Object.keys(metafile.inputs)) {
    if (input.startsWith("src/") && input.endsWith(".ts"))
      await import(pathToFileURL(join(ROOT, input)).href);
  }
  const { declaredSchemas, schemaKey } = await import("../src/core/schema-validator.ts");
  return new Set(declaredSchemas().map(schemaKey));
}

/** The generated validators' index with only the keys given: the others stay out of the bundle. */
function onlyValidators(keys: ReadonlySet<string>): Plugin {
  return {
    name: "only-declared-validators",
    setup(builder) {
      builder.onLoad({ filter: /[\\/]generated-validators[\\/]index\.cjs$/ }, (args) => {
        const index = require(args.path) as Record<string, unknown>;
        const kept = Object.keys(index).filter((key) => keys.has(key));
        return {
          contents: `"use strict";\nmodule.exports = {\n${kept.map((key) => `  "${key}": () => require("./${key}.cjs"),`).join("\n")}\n};\n`,
          loader: "js",
          resolveDir: dirname(args.path),
        };
      });
    },
  };
}

function filesUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(ROOT, join(entry.parentPath, entry.name)));
}

const out = resolve(ROOT, process.argv[2] ?? SNAPSHOT_DIR);
mkdirSync(out, { recursive: true });
rmSync(join(out, STAMP_FILE), { force: true });
rmSync(join(out, NODE_VERSION_FILE), { force: true });
const bundle = join(out, "sidecar.cjs");
const options: BuildOptions = {
  absWorkingDir: ROOT,
  entryPoints: ["scripts/sidecar-snapshot-entry.ts"],
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node24",
  outfile: bundle,
  minifyWhitespace: true,
  plugins: [snapshotSafe],
  logLevel: "warning",
};
const keys = await declaredSchemaKeys(options);
const result = await build({
  ...options,
  metafile: true,
  plugins: [snapshotSafe, onlyValidators(keys)],
});
// read byte by byte: any byte of a multi-byte UTF-8 character is in this range
const notAscii = /[\u0080-\u00ff]/.exec(readFileSync(bundle, "latin1"));
if (notAscii !== null) {
  throw new Error(
    `the sidecar bundle is not ASCII at byte ${String(notAscii.index)}: its source would take two bytes per character in the snapshot`,
  );
}
const snapshot = spawnSync(
  process.execPath,
  ["--snapshot-blob", join(out, BLOB_FILE), "--build-snapshot", bundle],
  { cwd: ROOT, encoding: "utf8" },
);
if (snapshot.status !== 0) {
  process.stderr.write(snapshot.stderr);
  throw new Error(`node --build-snapshot failed (exit ${String(snapshot.status)})`);
}
const sources = [
  ...Object.keys(result.metafile.inputs).filter(
    (input) => !input.includes(":") && !input.startsWith("node_modules/"),
  ),
  ...filesUnder("proto"),
  "package-lock.json",
].sort();
const stamp: SnapshotStamp = {
  node: process.version,
  root: ROOT,
  sources,
  sha256: sourcesDigest(ROOT, sources),
};
writeFileSync(join(out, NODE_VERSION_FILE), `${process.version}\n`);
writeFileSync(join(out, STAMP_FILE), `${JSON.stringify(stamp, null, 2)}\n`);
process.stdout.write(`sidecar snapshot: ${join(out, BLOB_FILE)} (${sources.length} sources)\n`);
