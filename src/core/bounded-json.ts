import { AuthorityError } from "../errors.ts";

/**
 * The bounds every JSON value from outside the process is held to before anything walks,
 * validates, redacts, hashes or serializes it: request bodies (every HTTP route, the sidecar's
 * ext_authz and forward proxy), upstream responses (partner-controlled), token endpoint
 * answers, decrypted envelopes and token claims. V8's `JSON.parse` is iterative, so parsing a
 * deeply nested text is safe; what comes after (JSON.stringify, structuredClone, ajv, the
 * recursive walkers) is not. Checked once at the entry, the bounds let every later step
 * recurse safely and keep the work per value linear in its size (docs/security.md, "Bounded
 * work on caller input").
 */
export interface JsonLimits {
  /** Containers nested in one another; the top-level object or array is level 1. */
  readonly maxDepth: number;
  /** Members of one object. */
  readonly maxKeys: number;
  /**
   * Characters of the JSON pointer of any value (its keys and indexes along the way, with
   * their separators): bounds long keys, and what a long path costs every value under it.
   */
  readonly maxPointerLength: number;
}

export const JSON_LIMITS: JsonLimits = Object.freeze({
  maxDepth: 128,
  maxKeys: 10_000,
  maxPointerLength: 4096,
});

export type JsonLimitReason = "depth" | "keys" | "pointer";

/** A value beyond one of the limits: a 400 `input_too_complex` naming the limit, never the value. */
export class JsonLimitError extends AuthorityError {
  readonly reason: JsonLimitReason;

  constructor(reason: JsonLimitReason, limit: number, location: string) {
    super("input_too_complex", `The ${location} exceeds the ${reason} limit (${limit}).`, {
      details: { reason, limit, location },
    });
    this.name = "JsonLimitError";
    this.reason = reason;
  }
}

interface Pending {
  readonly value: object;
  readonly depth: number;
  readonly pointerLength: number;
}

/**
 * Throws JsonLimitError when `value` exceeds `limits`. Iterative (an explicit stack), so the
 * check itself cannot overflow, and it stops at the first container over a limit. Linear in
 * the number of values. `location` names the input in the message (`body`, `claims`, …).
 */
export function checkJsonBounds(value: unknown, location = "body", limits: JsonLimits = JSON_LIMITS): void {
  if (typeof value !== "object" || value === null) return;
  const stack: Pending[] = [{ value, depth: 1, pointerLength: 0 }];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const { depth, pointerLength } = top;
    if (depth > limits.maxDepth) throw new JsonLimitError("depth", limits.maxDepth, location);
    if (Array.isArray(top.value)) {
      const items: unknown[] = top.value;
      for (let i = 0; i < items.length; i++) {
        const item = items[i];
        if (typeof item !== "object" || item === null) continue;
        const length = pointerLength + 1 + String(i).length;
        if (length > limits.maxPointerLength)
          throw new JsonLimitError("pointer", limits.maxPointerLength, location);
        stack.push({ value: item, depth: depth + 1, pointerLength: length });
      }
      continue;
    }
    const record = top.value as Record<string, unknown>;
    let keys = 0;
    for (const key in record) {
      if (!Object.hasOwn(record, key)) continue;
      if (++keys > limits.maxKeys) throw new JsonLimitError("keys", limits.maxKeys, location);
      // Escaping (~0, ~1) can only lengthen a pointer: the unescaped length is a lower bound.
      const length = pointerLength + 1 + key.length;
      if (length > limits.maxPointerLength)
        throw new JsonLimitError("pointer", limits.maxPointerLength, location);
      const child = record[key];
      if (typeof child === "object" && child !== null)
        stack.push({ value: child, depth: depth + 1, pointerLength: length });
    }
  }
}

/**
 * `JSON.parse`, then the bounds: the one way text from outside becomes a value. A text that
 * is not JSON throws the parser's SyntaxError; one beyond a limit throws JsonLimitError.
 */
export function parseBoundedJson(text: string, location = "body", limits: JsonLimits = JSON_LIMITS): unknown {
  const value: unknown = JSON.parse(text);
  checkJsonBounds(value, location, limits);
  return value;
}
