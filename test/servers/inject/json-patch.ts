import { isDeepStrictEqual } from "node:util";
import type { JsonPatchOperation } from "../../../src/servers/inject/patch.ts";

/**
 * A small RFC 6902 applier for the tests, written from the RFC (no such package is
 * installed), strict where the API server is strict: a missing parent, an out-of-range
 * index or a failed `test` throws, and the document is never changed on failure.
 */

type Container = Record<string, unknown> | unknown[];

export class JsonPatchError extends Error {
  readonly code = "json_patch_failed";
}

/** RFC 6901 pointer → reference tokens. */
export function parsePointer(pointer: string): string[] {
  if (pointer === "") return [];
  if (!pointer.startsWith("/")) throw new JsonPatchError(`invalid JSON pointer ${pointer}`);
  return pointer
    .slice(1)
    .split("/")
    .map((t) => {
      if (/~[^01]|~$/.test(t)) throw new JsonPatchError(`invalid escape in ${pointer}`);
      return t.replaceAll("~1", "/").replaceAll("~0", "~");
    });
}

const isContainer = (v: unknown): v is Container => typeof v === "object" && v !== null;

function arrayIndex(token: string, length: number, allowEnd: boolean): number {
  if (allowEnd && token === "-") return length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new JsonPatchError(`invalid array index ${token}`);
  const i = Number(token);
  if (i > length || (!allowEnd && i === length)) throw new JsonPatchError(`array index ${i} out of range`);
  return i;
}

function resolveParent(doc: unknown, tokens: string[]): { parent: Container; last: string } {
  const last = tokens.at(-1);
  if (last === undefined) throw new JsonPatchError("the root has no parent");
  let node: unknown = doc;
  for (const token of tokens.slice(0, -1)) {
    if (Array.isArray(node)) node = node[arrayIndex(token, node.length, false)];
    else if (isContainer(node) && Object.hasOwn(node, token)) node = (node as Record<string, unknown>)[token];
    else throw new JsonPatchError(`path not found at ${token}`);
  }
  if (!isContainer(node)) throw new JsonPatchError("parent is not an object or array");
  return { parent: node, last };
}

function get(doc: unknown, pointer: string): unknown {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) return doc;
  const { parent, last } = resolveParent(doc, tokens);
  if (Array.isArray(parent)) return parent[arrayIndex(last, parent.length, false)];
  if (!Object.hasOwn(parent, last)) throw new JsonPatchError(`${pointer} does not exist`);
  return parent[last];
}

function add(doc: unknown, pointer: string, value: unknown): unknown {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) return value;
  const { parent, last } = resolveParent(doc, tokens);
  if (Array.isArray(parent)) parent.splice(arrayIndex(last, parent.length, true), 0, value);
  else parent[last] = value;
  return doc;
}

function remove(doc: unknown, pointer: string): unknown {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) throw new JsonPatchError("cannot remove the root");
  const { parent, last } = resolveParent(doc, tokens);
  if (Array.isArray(parent)) parent.splice(arrayIndex(last, parent.length, false), 1);
  else if (Object.hasOwn(parent, last)) delete parent[last];
  else throw new JsonPatchError(`${pointer} does not exist`);
  return doc;
}

/** Applies `ops` to a deep copy of `document` and returns the copy. */
export function applyJsonPatch<T>(document: T, ops: readonly JsonPatchOperation[]): T {
  let doc: unknown = structuredClone(document);
  for (const op of ops) {
    switch (op.op) {
      case "add":
        doc = add(doc, op.path, structuredClone(op.value));
        break;
      case "remove":
        doc = remove(doc, op.path);
        break;
      case "replace":
        get(doc, op.path);
        doc = add(remove(doc, op.path), op.path, structuredClone(op.value));
        break;
      case "move": {
        if (op.path.startsWith(`${op.from}/`)) throw new JsonPatchError("cannot move into a child");
        const value = get(doc, op.from);
        doc = add(remove(doc, op.from), op.path, value);
        break;
      }
      case "copy":
        doc = add(doc, op.path, structuredClone(get(doc, op.from)));
        break;
      case "test":
        if (!isDeepStrictEqual(get(doc, op.path), op.value))
          throw new JsonPatchError(`test failed at ${op.path}`);
        break;
    }
  }
  return doc as T;
}
