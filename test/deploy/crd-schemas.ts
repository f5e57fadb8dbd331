import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import ajvFormats from "ajv-formats";
import { parseAllDocuments } from "yaml";
import { isObj, type Obj, repoPath } from "./helpers.ts";

/**
 * Validation of custom resources against the CustomResourceDefinitions of the projects that
 * define them (cert-manager, prometheus-operator, Istio), as an API server with strict field
 * validation would: each version's openAPIV3Schema read as a structural schema, so an object
 * node that does not keep unknown fields (`x-kubernetes-preserve-unknown-fields`) refuses any
 * field it does not declare, at any depth.
 *
 * The CRD files come from the Go module proxy, fetched by scripts/ensure-test-peers.sh into
 * .tools/schemas (same directory names as its CRD_SOURCES). What an API server does beyond the
 * schema is not done here: CEL rules (`x-kubernetes-validations`) are not evaluated, and
 * `metadata` is ObjectMeta (checked by the Kubernetes models, not by the CRD).
 */

export const CRD_SOURCES = [
  "cert-manager-v1.21.2",
  "prometheus-operator-v0.85.0",
  "istio-api-v1.32.0",
] as const;

const schemasDir = repoPath(".tools/schemas");

type Schema = Obj;

/** One openAPIV3Schema node → the JSON Schema ajv checks (structural semantics made explicit). */
export function structuralSchema(node: Schema, root = false): Schema {
  const out: Schema = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "description" || key === "default" || key === "example" || key === "nullable") continue;
    if (key.startsWith("x-kubernetes-")) continue;
    if (key === "properties" && isObj(value)) {
      out.properties = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [name, structuralSchema(child as Schema)]),
      );
    } else if ((key === "items" || key === "not") && isObj(value)) {
      out[key] = structuralSchema(value);
    } else if (key === "additionalProperties" && isObj(value)) {
      out[key] = structuralSchema(value);
    } else if ((key === "allOf" || key === "anyOf" || key === "oneOf") && Array.isArray(value)) {
      out[key] = value.map((branch: Schema) => structuralSchema(branch));
    } else {
      out[key] = value;
    }
  }
  if (node["x-kubernetes-int-or-string"] === true && out.anyOf === undefined) {
    delete out.type;
    out.type = ["integer", "string"];
  }
  const embedded = node["x-kubernetes-embedded-resource"] === true;
  if (root || embedded) {
    // apiVersion, kind and metadata are implied; metadata is ObjectMeta, checked elsewhere
    const properties = isObj(out.properties) ? out.properties : {};
    out.properties = {
      ...properties,
      apiVersion: { type: "string" },
      kind: { type: "string" },
      metadata: { type: "object" },
    };
  }
  // Pruning semantics: an object node keeps only the fields it declares, unless it says it keeps
  // unknown ones or declares a map (additionalProperties). Under strict field validation an
  // unknown field is an error rather than silently dropped.
  if (
    node.type === "object" &&
    node["x-kubernetes-preserve-unknown-fields"] !== true &&
    node.additionalProperties === undefined
  ) {
    out.additionalProperties = false;
  }
  return out;
}

export interface CrdRegistry {
  /** `group/version/Kind` → validator; undefined when no loaded CRD defines it */
  validator(apiVersion: string, kind: string): ValidateFunction | undefined;
  readonly kinds: readonly string[];
}

function readCrds(): Obj[] {
  const crds: Obj[] = [];
  for (const source of CRD_SOURCES) {
    const dir = join(schemasDir, source);
    if (!existsSync(dir)) {
      throw new Error(
        `CRD schemas missing: ${dir} (scripts/ensure-test-peers.sh fetches them; run \`make test-peers\`)`,
      );
    }
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml"))) {
      for (const doc of parseAllDocuments(readFileSync(join(dir, file), "utf8"))) {
        if (doc.errors.length > 0) throw new Error(`${source}/${file}: ${doc.errors[0]?.message}`);
        const value: unknown = doc.toJS();
        if (isObj(value) && value.kind === "CustomResourceDefinition") crds.push(value);
      }
    }
  }
  return crds;
}

/** Formats a CRD may name that ajv-formats does not know: Kubernetes does not check them either. */
function collectFormats(node: unknown, into: Set<string>): void {
  if (Array.isArray(node)) for (const child of node) collectFormats(child, into);
  else if (isObj(node)) {
    if (typeof node.format === "string") into.add(node.format);
    for (const child of Object.values(node)) collectFormats(child, into);
  }
}

/**
 * CRD patterns are Go RE2. The one construct they use that JavaScript lacks is a leading flag
 * group (`(?i)…`, after an optional `^`): it becomes the RegExp flag.
 */
const re2: ((source: string, flags: string) => RegExp) & { code: string } = Object.assign(
  (source: string, flags: string): RegExp => {
    const group = /^(\^?)\(\?([ims]+)\)/.exec(source);
    if (group === null) return new RegExp(source, flags);
    const rest = `${group[1] ?? ""}${source.slice(group[0].length)}`;
    return new RegExp(rest, `${flags}${group[2] ?? ""}`);
  },
  { code: "re2 flag groups as RegExp flags" },
);

export function loadCrdRegistry(): CrdRegistry {
  const schemas = new Map<string, Schema>();
  for (const crd of readCrds()) {
    const spec = crd.spec as { group: string; names: { kind: string }; versions: Obj[] };
    for (const version of spec.versions) {
      if (version.served !== true) continue;
      const schema = (version.schema as Obj | undefined)?.openAPIV3Schema;
      if (!isObj(schema)) continue;
      schemas.set(`${spec.group}/${String(version.name)}/${spec.names.kind}`, structuralSchema(schema, true));
    }
  }
  const ajv = new Ajv({ strict: false, allErrors: true, code: { regExp: re2 } });
  ajvFormats.default(ajv);
  const formats = new Set<string>();
  collectFormats([...schemas.values()], formats);
  for (const format of formats) if (ajv.formats[format] === undefined) ajv.addFormat(format, true);
  const compiled = new Map<string, ValidateFunction>();
  return {
    kinds: [...schemas.keys()].sort(),
    validator(apiVersion, kind) {
      const key = `${apiVersion}/${kind}`;
      const known = compiled.get(key);
      if (known) return known;
      const schema = schemas.get(key);
      if (schema === undefined) return undefined;
      const validate = ajv.compile(schema);
      compiled.set(key, validate);
      return validate;
    },
  };
}

/** The API server drops null fields (not nullable) before validating; so does this. */
const withoutNulls = (object: unknown): unknown =>
  JSON.parse(JSON.stringify(object, (_key, value: unknown) => (value === null ? undefined : value)));

/**
 * The schema errors of one object, as readable lines (path: message), or a line saying no CRD
 * defines its kind. Empty when the object is valid.
 */
export function customResourceErrors(registry: CrdRegistry, object: Obj): string[] {
  const apiVersion = String(object.apiVersion);
  const kind = String(object.kind);
  const validate = registry.validator(apiVersion, kind);
  if (validate === undefined) return [`no CRD defines ${apiVersion} ${kind}`];
  if (validate(withoutNulls(object))) return [];
  return (validate.errors ?? []).map((e: ErrorObject) =>
    e.keyword === "additionalProperties"
      ? `${e.instancePath || "/"}: unknown field "${String(e.params.additionalProperty)}"`
      : `${e.instancePath || "/"}: ${e.message ?? e.keyword}`,
  );
}
