import { linearPatternProblem } from "../core/linear-pattern.ts";
import { appendPointer, isRecord, own, resolveFragment, setOwn } from "./json-pointer.ts";
import { SUPPORTED_FORMATS } from "./schema-ajv.ts";

export type OpenApiVersion = "3.0" | "3.1";

export type JsonSchema = Record<string, unknown>;

/** Which side of the exchange a schema describes. */
export type SchemaDirection = "request" | "response" | "any";

/** Thrown when inlined schemas grow past their node budget. */
export class SchemaBudgetError extends Error {
  readonly code = "schema_too_large";
}

/** Thrown when one schema nests deeper than the converter follows. */
export class SchemaDepthError extends Error {
  readonly code = "schema_too_deep";
}

const MAX_SCHEMA_DEPTH = 256;

/** Counts converted nodes; one budget per operation, one for the whole import. */
export class NodeBudget {
  #left: number;
  readonly #parent: NodeBudget | undefined;

  constructor(limit: number, parent?: NodeBudget) {
    this.#left = limit;
    this.#parent = parent;
  }

  take(count = 1): void {
    this.#left -= count;
    if (this.#left < 0) throw new SchemaBudgetError("schema budget exceeded");
    this.#parent?.take(count);
  }
}

/** Keywords whose value is data (copied as is), all known to ajv's 2020-12 dialect. */
const DATA_KEYWORDS = new Set([
  "type",
  "enum",
  "const",
  "multipleOf",
  "maximum",
  "minimum",
  "maxLength",
  "minLength",
  "maxItems",
  "minItems",
  "uniqueItems",
  "maxContains",
  "minContains",
  "maxProperties",
  "minProperties",
  "required",
  "dependentRequired",
  "title",
  "description",
  "default",
  "deprecated",
  "readOnly",
  "writeOnly",
  "examples",
  "contentEncoding",
  "contentMediaType",
]);

const SCHEMA_KEYWORDS = new Set([
  "not",
  "if",
  "then",
  "else",
  "additionalProperties",
  "propertyNames",
  "contains",
  "unevaluatedItems",
  "unevaluatedProperties",
  "contentSchema",
]);

const SCHEMA_ARRAY_KEYWORDS = new Set(["allOf", "anyOf", "oneOf", "prefixItems"]);

const SCHEMA_MAP_KEYWORDS = new Set(["properties", "patternProperties", "$defs", "dependentSchemas"]);

/**
 * OpenAPI annotations and identifiers that JSON Schema validation does not use; dropped
 * without a warning. `$id`/`$schema` go too: every snapshot schema is self-contained and
 * compiled in one ajv instance, where a repeated `$id` would clash.
 */
const SILENT_DROP = new Set([
  "example",
  "xml",
  "externalDocs",
  "discriminator",
  "$schema",
  "$id",
  "$comment",
  "$anchor",
  "$dynamicAnchor",
  "$vocabulary",
]);

/** Why a pattern is refused (not ECMAScript, or not runnable in linear time), or undefined. */
function patternProblem(pattern: unknown): string | undefined {
  if (typeof pattern !== "string") return "a pattern must be a string";
  const problem = linearPatternProblem(pattern);
  return problem === undefined
    ? undefined
    : `pattern ${JSON.stringify(pattern.slice(0, 200))} is refused: ${problem}`;
}

/** The document location a local `$ref` names ("#/components/schemas/X" → "/components/schemas/X"). */
function refPointer(ref: string): string {
  try {
    return ref.startsWith("#") ? decodeURIComponent(ref.slice(1)) : "";
  } catch {
    return "";
  }
}

export interface ConvertContext {
  readonly version: OpenApiVersion;
  /** The dereferenced document; `$ref`s left in it (circular ones) resolve against it. */
  readonly document: Record<string, unknown>;
  readonly budget: NodeBudget;
  /** Receives one message per dropped construct; the caller prefixes the operation. */
  readonly warn: (message: string) => void;
  /** Receives what makes the document unimportable, at its location in the document. */
  readonly refuse: (pointer: string, message: string) => void;
}

/**
 * Builds one self-contained JSON Schema 2020-12 document from OpenAPI schema objects.
 * References the parser left in place (circular ones) become local `$defs` entries, so a
 * recursive model stays recursive instead of being cut or expanded without end.
 */
export class SchemaBuilder {
  readonly #ctx: ConvertContext;
  readonly #defNames = new Map<string, string>();
  readonly #defs: Record<string, unknown> = {};

  readonly #direction: SchemaDirection;

  /**
   * `direction` applies OpenAPI's readOnly/writeOnly rule to `required`: a required
   * read-only property is required in responses only, a write-only one in requests only.
   */
  constructor(ctx: ConvertContext, direction: SchemaDirection = "any") {
    this.#ctx = ctx;
    this.#direction = direction;
  }

  /**
   * Converts a schema found where an object schema is expected (booleans become objects);
   * `pointer` is its location in the document, for the problems found inside it.
   */
  convertRoot(schema: unknown, pointer: string): JsonSchema {
    const out = this.#convert(schema, 0, pointer);
    if (out === true) return {};
    if (out === false) return { not: {} };
    return out;
  }

  /** Attaches the collected `$defs` to the root schema of this builder. */
  finish(root: JsonSchema): JsonSchema {
    if (Object.keys(this.#defs).length === 0) return root;
    const existing = isRecord(root.$defs) ? root.$defs : {};
    const merged: Record<string, unknown> = { ...existing };
    for (const [name, value] of Object.entries(this.#defs)) setOwn(merged, name, value);
    return { ...root, $defs: merged };
  }

  #convert(node: unknown, depth: number, pointer: string): JsonSchema | boolean {
    if (depth > MAX_SCHEMA_DEPTH) throw new SchemaDepthError("schema nested too deeply");
    this.#ctx.budget.take();
    if (typeof node === "boolean") return node;
    if (!isRecord(node)) return {};
    const ref = own(node, "$ref");
    if (typeof ref === "string") {
      const target = this.#defRef(ref, depth);
      // OpenAPI 3.0 ignores the siblings of $ref; 3.1 (JSON Schema 2020-12) applies them.
      if (this.#ctx.version === "3.0") return target;
      const rest = this.#convertKeywords(node, depth, new Set(["$ref"]), pointer);
      return Object.keys(rest).length === 0 ? target : { ...rest, ...target };
    }
    return this.#convertKeywords(node, depth, new Set(), pointer);
  }

  #defRef(ref: string, depth: number): JsonSchema {
    let name = this.#defNames.get(ref);
    if (name === undefined) {
      const base = (ref.split("/").at(-1) ?? "def").replace(/[^A-Za-z0-9_.-]/g, "_") || "def";
      name = base;
      for (let n = 2; Object.hasOwn(this.#defs, name); n++) name = `${base}_${n}`;
      this.#defNames.set(ref, name);
      // Reserve the name before converting, so the target can refer to itself.
      setOwn(this.#defs, name, {});
      const target = resolveFragment(this.#ctx.document, ref);
      if (target === undefined) {
        this.#ctx.warn(`unresolved $ref ${JSON.stringify(ref)} replaced by an empty schema`);
      }
      setOwn(this.#defs, name, this.#convert(target ?? {}, depth + 1, refPointer(ref)));
    }
    return { $ref: `#/$defs/${name}` };
  }

  #convertKeywords(
    node: Record<string, unknown>,
    depth: number,
    skip: ReadonlySet<string>,
    pointer: string,
  ): JsonSchema {
    const out: JsonSchema = {};
    const next = depth + 1;
    for (const [key, value] of Object.entries(node)) {
      if (skip.has(key) || key === "nullable" || key.startsWith("x-") || SILENT_DROP.has(key)) continue;
      const at = appendPointer(pointer, key);
      if (DATA_KEYWORDS.has(key)) {
        setOwn(out, key, this.#copyData(value, 0));
      } else if (SCHEMA_KEYWORDS.has(key)) {
        setOwn(out, key, this.#convert(value, next, at));
      } else if (SCHEMA_ARRAY_KEYWORDS.has(key)) {
        if (Array.isArray(value)) {
          setOwn(
            out,
            key,
            value.map((v, i) => this.#convert(v, next, appendPointer(at, i))),
          );
        }
      } else if (SCHEMA_MAP_KEYWORDS.has(key) || key === "definitions") {
        this.#convertMap(out, key === "definitions" ? "$defs" : key, value, next, at);
      } else if (key === "items") {
        if (Array.isArray(value)) {
          // Draft 2019 tuple form: 2020-12 spells it prefixItems (+ items for the rest).
          out.prefixItems = value.map((v, i) => this.#convert(v, next, appendPointer(at, i)));
          const additional = own(node, "additionalItems");
          if (additional !== undefined)
            out.items = this.#convert(additional, next, appendPointer(pointer, "additionalItems"));
        } else {
          out.items = this.#convert(value, next, at);
        }
      } else if (key === "additionalItems") {
        // Only meaningful with the tuple form of items, handled above.
      } else if (key === "dependencies") {
        this.#convertDependencies(out, value, next, at);
      } else if (key === "pattern") {
        // Refused, never dropped: dropping a pattern would admit what its author excluded.
        const problem = patternProblem(value);
        if (problem === undefined) out.pattern = value;
        else this.#ctx.refuse(at, problem);
      } else if (key === "format") {
        if (typeof value === "string" && SUPPORTED_FORMATS.has(value)) out.format = value;
        else this.#ctx.warn(`format ${JSON.stringify(String(value))} is not supported and was dropped`);
      } else if (key === "exclusiveMinimum" || key === "exclusiveMaximum") {
        this.#convertExclusive(out, node, key, value);
      } else if (key === "$dynamicRef") {
        this.#ctx.warn("$dynamicRef is not supported and was dropped");
      } else {
        this.#ctx.warn(`schema keyword ${JSON.stringify(key)} is not supported and was dropped`);
      }
    }
    this.#dropOneWayRequired(out);
    // ajv's strict mode refuses keywords that would be ignored; they constrain nothing anyway.
    if (!("if" in out)) {
      delete out.then;
      delete out.else;
    } else if (!("then" in out) && !("else" in out)) {
      delete out.if;
    }
    if ("contains" in out && out.minContains === 0 && !("maxContains" in out)) {
      delete out.contains;
    }
    if (!("contains" in out)) {
      delete out.minContains;
      delete out.maxContains;
    }
    return own(node, "nullable") === true ? this.#applyNullable(out) : out;
  }

  #dropOneWayRequired(out: JsonSchema): void {
    if (this.#direction === "any" || !Array.isArray(out.required) || !isRecord(out.properties)) return;
    const flag = this.#direction === "request" ? "readOnly" : "writeOnly";
    const properties = out.properties;
    const kept = out.required.filter((name) => {
      const property = typeof name === "string" ? own(properties, name) : undefined;
      return !(isRecord(property) && property[flag] === true);
    });
    if (kept.length === out.required.length) return;
    if (kept.length === 0) delete out.required;
    else out.required = kept;
  }

  #convertMap(out: JsonSchema, key: string, value: unknown, depth: number, pointer: string): void {
    if (!isRecord(value)) return;
    const map: Record<string, unknown> = isRecord(out[key]) ? (out[key] as Record<string, unknown>) : {};
    for (const [name, schema] of Object.entries(value)) {
      const at = appendPointer(pointer, name);
      const problem = key === "patternProperties" ? patternProblem(name) : undefined;
      if (problem !== undefined) {
        this.#ctx.refuse(at, problem);
        continue;
      }
      setOwn(map, name, this.#convert(schema, depth, at));
    }
    setOwn(out, key, map);
  }

  #convertDependencies(out: JsonSchema, value: unknown, depth: number, pointer: string): void {
    if (!isRecord(value)) return;
    const required: Record<string, unknown> = {};
    const schemas: Record<string, unknown> = {};
    for (const [name, dependency] of Object.entries(value)) {
      if (Array.isArray(dependency)) setOwn(required, name, this.#copyData(dependency, 0));
      else setOwn(schemas, name, this.#convert(dependency, depth, appendPointer(pointer, name)));
    }
    if (Object.keys(required).length > 0) out.dependentRequired = required;
    if (Object.keys(schemas).length > 0) out.dependentSchemas = schemas;
  }

  /**
   * OpenAPI 3.0 (draft 4) writes `exclusiveMinimum: true` beside `minimum`; 2020-12 wants
   * the bound itself. The inclusive bound may stay: it is implied by the exclusive one.
   */
  #convertExclusive(
    out: JsonSchema,
    node: Record<string, unknown>,
    key: "exclusiveMinimum" | "exclusiveMaximum",
    value: unknown,
  ): void {
    if (typeof value === "number") {
      out[key] = value;
      return;
    }
    const bound = own(node, key === "exclusiveMinimum" ? "minimum" : "maximum");
    if (value === true && typeof bound === "number") out[key] = bound;
  }

  /** OpenAPI 3.0 `nullable: true` is `"null"` in the type list in 2020-12. */
  #applyNullable(out: JsonSchema): JsonSchema {
    const type = out.type;
    if (typeof type === "string") {
      out.type = type === "null" ? type : [type, "null"];
    } else if (Array.isArray(type)) {
      if (!type.includes("null")) out.type = [...type, "null"];
    } else if ("allOf" in out || "anyOf" in out || "oneOf" in out || "$ref" in out) {
      // Common 3.0 idiom `nullable` + `allOf: [$ref]`: null or the composed schema.
      return { anyOf: [out, { type: "null" }] };
    } else {
      return out;
    }
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    return out;
  }

  #copyData(value: unknown, depth: number): unknown {
    if (depth > MAX_SCHEMA_DEPTH) throw new SchemaDepthError("schema data nested too deeply");
    if (Array.isArray(value)) {
      this.#ctx.budget.take();
      return value.map((v) => this.#copyData(v, depth + 1));
    }
    if (isRecord(value)) {
      this.#ctx.budget.take();
      const copy: Record<string, unknown> = {};
      for (const [key, child] of Object.entries(value)) setOwn(copy, key, this.#copyData(child, depth + 1));
      return copy;
    }
    return value;
  }
}
