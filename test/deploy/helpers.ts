import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parse, parseAllDocuments } from "yaml";

export const repoPath = (relative: string): string =>
  fileURLToPath(new URL(`../../${relative}`, import.meta.url));
export const readRepoFile = (relative: string): string => readFileSync(repoPath(relative), "utf8");
export const listRepoDir = (relative: string): string[] => readdirSync(repoPath(relative)).sort();

export type Obj = Record<string, unknown>;
export const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

export const loadYaml = (relative: string): unknown => parse(readRepoFile(relative));

/** Every document of a multi-document YAML file; throws on any parse error. */
export function loadYamlDocuments(relative: string): Obj[] {
  const docs = parseAllDocuments(readRepoFile(relative));
  const out: Obj[] = [];
  for (const doc of docs) {
    if (doc.errors.length > 0) throw new Error(`${relative}: ${doc.errors.map((e) => e.message).join("; ")}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    if (!isObj(value)) throw new Error(`${relative}: a document is not a mapping`);
    out.push(value);
  }
  return out;
}

/** Helm's values merge: maps merge recursively, anything else (lists too) replaces, null deletes. */
export function mergeValues(base: unknown, override: unknown): unknown {
  if (!isObj(base) || !isObj(override)) return override === undefined ? base : override;
  const out: Obj = { ...base };
  for (const [key, value] of Object.entries(override)) {
    if (value === null) delete out[key];
    else out[key] = mergeValues(base[key], value);
  }
  return out;
}

export const at = (value: unknown, path: readonly string[]): unknown =>
  path.reduce<unknown>((node, key) => (isObj(node) ? node[key] : undefined), value);

/**
 * Every Envoy bootstrap the repository ships, as text: the files of deploy/envoy, the
 * `envoy.yaml` of every ConfigMap in deploy/kubernetes, and every whole bootstrap
 * (`static_resources`) in a YAML block of the docs or the README.
 */
export function shippedEnvoyBootstraps(): Array<{ name: string; text: string }> {
  const files = listRepoDir("deploy/envoy")
    .filter((f) => f.endsWith(".yaml"))
    .map((f) => ({ name: `deploy/envoy/${f}`, text: readRepoFile(`deploy/envoy/${f}`) }));
  const configMaps = listRepoDir("deploy/kubernetes")
    .filter((f) => f.endsWith(".yaml"))
    .flatMap((f) =>
      loadYamlDocuments(`deploy/kubernetes/${f}`)
        .filter((doc) => doc.kind === "ConfigMap" && typeof at(doc, ["data", "envoy.yaml"]) === "string")
        .map((doc) => ({
          name: `deploy/kubernetes/${f} ConfigMap ${String(at(doc, ["metadata", "name"]))}`,
          text: String(at(doc, ["data", "envoy.yaml"])),
        })),
    );
  const docs = docsYamlBlocks()
    .filter(({ text }) => /^static_resources:/m.test(text))
    .map(({ file, text }, i) => ({ name: `${file} bootstrap #${i + 1}`, text }));
  return [...files, ...configMaps, ...docs];
}

/** The YAML code blocks of the docs and the README, in order. */
export function docsYamlBlocks(): Array<{ file: string; text: string }> {
  const files = [
    ...listRepoDir("docs")
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
    "README.md",
  ];
  return files.flatMap((file) =>
    [...readRepoFile(file).matchAll(/^```ya?ml\n([\s\S]*?)^```/gm)].map((m) => ({ file, text: m[1] ?? "" })),
  );
}
