import { LineCounter, parseDocument } from "yaml";
import { ProblemList } from "./errors.ts";
import { isRecord } from "./json-pointer.ts";
import { importLimits } from "./limits.ts";

export type DocumentFormat = "json" | "yaml";

/**
 * Turns submitted text (or an already-parsed object) into a plain JSON tree: bounded in
 * size, depth and YAML aliasing, with duplicate keys refused. Every input goes through a
 * JSON round trip so later steps see fresh, plain data whatever the caller handed in.
 */
export function readDocumentSource(
  input: unknown,
  format: DocumentFormat | undefined,
): Record<string, unknown> {
  const problems = new ProblemList();
  let text: string;
  let chosen: DocumentFormat;
  if (typeof input === "string") {
    text = input;
    chosen = format ?? (/^\s*\{/.test(input) ? "json" : "yaml");
  } else if (isRecord(input)) {
    try {
      text = JSON.stringify(input);
    } catch {
      // Cycles, BigInt or a nesting deep enough to exhaust the stack.
      problems.add("", "the document is not plain JSON data");
      problems.throwIfAny();
      return {};
    }
    chosen = "json";
  } else {
    problems.add("", "the document must be a JSON or YAML text or an object");
    problems.throwIfAny();
    return {};
  }
  if (text.length > importLimits.maxDocumentChars) {
    problems.add("", `the document is larger than ${importLimits.maxDocumentChars} characters`);
    problems.throwIfAny();
  }
  const value = chosen === "json" ? parseJson(text, problems) : parseYaml(text, problems);
  problems.throwIfAny();
  if (!isRecord(value)) {
    problems.add("", "the document must be an object at the top level");
    problems.throwIfAny();
    return {};
  }
  if (depthOf(value) > importLimits.maxDepth) {
    problems.add("", `the document is nested more than ${importLimits.maxDepth} levels deep`);
    problems.throwIfAny();
  }
  // YAML can produce values JSON cannot hold (Infinity, NaN): normalize them away here.
  const normalized: unknown = JSON.parse(JSON.stringify(value));
  return isRecord(normalized) ? normalized : {};
}

function parseJson(text: string, problems: ProblemList): unknown {
  try {
    const value: unknown = JSON.parse(text);
    // JSON.parse keeps the last of two equal keys silently; a second "/users" path would
    // vanish from review, so JSON objects are checked for duplicate keys too.
    findJsonDuplicateKeys(text, problems);
    return value;
  } catch (error) {
    problems.add(
      "",
      `the document is not valid JSON: ${error instanceof SyntaxError ? error.message : "parse error"}`,
    );
    return undefined;
  }
}

function parseYaml(text: string, problems: ProblemList): unknown {
  const lines = new LineCounter();
  const doc = parseDocument(text, {
    lineCounter: lines,
    version: "1.2",
    schema: "core",
    uniqueKeys: true,
    stringKeys: true,
    merge: false,
    prettyErrors: false,
    strict: true,
  });
  for (const error of doc.errors) {
    const at = lines.linePos(error.pos[0]);
    const where = ` (line ${at.line}, column ${at.col})`;
    problems.add("", `the document is not valid YAML${where}: ${firstLine(error.message)}`);
  }
  if (doc.errors.length > 0) return undefined;
  try {
    return doc.toJS({ maxAliasCount: importLimits.maxYamlAliases });
  } catch (error) {
    if (error instanceof ReferenceError) {
      problems.add("", "the YAML document uses too many aliases (possible expansion attack)");
    } else {
      problems.add("", "the YAML document could not be read");
    }
    return undefined;
  }
}

function firstLine(message: string): string {
  const line = message.split("\n", 1)[0] ?? "";
  return line.replace(/ at line \d+, column \d+:?$/, "");
}

/** Iterative, so a hostile nesting cannot exhaust the stack. */
function depthOf(root: unknown): number {
  let max = 0;
  const stack: Array<{ value: unknown; depth: number }> = [{ value: root, depth: 1 }];
  while (stack.length > 0) {
    const item = stack.pop();
    if (item === undefined) break;
    const { value, depth } = item;
    if (typeof value !== "object" || value === null) continue;
    if (depth > max) max = depth;
    if (max > importLimits.maxDepth) return max;
    const children = Array.isArray(value) ? value : Object.values(value);
    for (const child of children) stack.push({ value: child, depth: depth + 1 });
  }
  return max;
}

/**
 * A small JSON scanner (the text already parsed, so it is well-formed) that reports
 * objects holding the same key twice, with the pointer of the object.
 */
function findJsonDuplicateKeys(text: string, problems: ProblemList): void {
  type Frame =
    | { kind: "object"; keys: Set<string>; pointer: string; pending: string | undefined }
    | {
        kind: "array";
        index: number;
        pointer: string;
      };
  const stack: Frame[] = [];
  const childPointer = (): string => {
    const top = stack.at(-1);
    if (top === undefined) return "";
    if (top.kind === "array") return `${top.pointer}/${top.index}`;
    return `${top.pointer}/${(top.pending ?? "").replaceAll("~", "~0").replaceAll("/", "~1")}`;
  };
  let i = 0;
  let expectKey = false;
  while (i < text.length) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const top = stack.at(-1);
      if (expectKey && top?.kind === "object") {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (top.keys.has(key)) {
          const where = `${top.pointer}/${key.replaceAll("~", "~0").replaceAll("/", "~1")}`;
          problems.add(where, `duplicate key ${JSON.stringify(key)}`);
        }
        top.keys.add(key);
        top.pending = key;
        expectKey = false;
      }
      i = j + 1;
      continue;
    }
    if (c === "{") {
      stack.push({ kind: "object", keys: new Set(), pointer: childPointer(), pending: undefined });
      expectKey = true;
    } else if (c === "[") {
      stack.push({ kind: "array", index: 0, pointer: childPointer() });
    } else if (c === "}" || c === "]") {
      stack.pop();
    } else if (c === ",") {
      const top = stack.at(-1);
      if (top?.kind === "array") top.index++;
      else expectKey = true;
    }
    i++;
  }
}
