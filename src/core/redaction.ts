import jsonPointer from "json-pointer";
import { CoreError } from "./core-error.ts";
import { isRecord } from "./own-property.ts";

export type RedactionMode = "remove" | "mask";

/** A response redaction rule as the policy carries it. */
export interface RedactionRule {
  /** JSON pointer; a "*" token matches every array element or object key (our extension). */
  readonly path: string;
  readonly mode: RedactionMode;
  /** With mask: how many trailing characters stay visible. Default 0; ignored by remove. */
  readonly keep_last?: number;
}

/** `secret`: an injected credential the upstream echoed was overwritten (headers: removed). */
export type RedactionSource = "operation" | "default" | "header" | "secret";

/** What was redacted and where — never the value. */
export interface RedactionEvent {
  readonly path: string;
  readonly mode: RedactionMode;
  readonly source: RedactionSource;
}

/**
 * What a response reports of its redaction: at most this many events, each path at most this
 * many characters. An upstream chooses how many sensitive members its answer has and how deep
 * they sit (a 1 MiB answer can hold 56,000 masked members under 4 KiB paths: 216 MB of events),
 * so the list callers, evidence and MCP results receive is bounded; the masking itself is not.
 */
export const REPORTED_EVENTS_MAX = 100;
export const REPORTED_EVENT_PATH_MAX = 256;

/** The first REPORTED_EVENTS_MAX events, paths cut to REPORTED_EVENT_PATH_MAX with a trailing "…". */
export function reportedEvents(events: readonly RedactionEvent[]): RedactionEvent[] {
  return events
    .slice(0, REPORTED_EVENTS_MAX)
    .map((event) =>
      event.path.length <= REPORTED_EVENT_PATH_MAX
        ? event
        : { ...event, path: `${event.path.slice(0, REPORTED_EVENT_PATH_MAX)}…` },
    );
}

export interface RedactionResult {
  readonly body: unknown;
  readonly events: RedactionEvent[];
}

export class RedactionError extends CoreError<"redaction_rule_invalid"> {}

export const REDACTION_WILDCARD = "*";
export const MASK_CHARACTER = "*";

type Container = unknown[] | Record<string, unknown>;

/** Defines instead of assigning, so a "__proto__" key stays an ordinary own property. */
function setOwn(target: Container, key: string | number, value: unknown): void {
  if (Array.isArray(target)) target[Number(key)] = value;
  else Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** Deep copy of arrays and objects, iterative so deep bodies cannot overflow the stack. */
function cloneJson(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  const root: Container = Array.isArray(value) ? [] : {};
  const stack: [unknown, Container][] = [[value, root]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [source, target] = next;
    const entries: [string | number, unknown][] = Array.isArray(source)
      ? source.map((v, i) => [i, v])
      : Object.entries(source as Record<string, unknown>);
    for (const [key, child] of entries) {
      if (typeof child === "object" && child !== null) {
        const copy: Container = Array.isArray(child) ? [] : {};
        setOwn(target, key, copy);
        stack.push([child, copy]);
      } else {
        setOwn(target, key, child);
      }
    }
  }
  return root;
}

const ARRAY_INDEX = /^(?:0|[1-9][0-9]*)$/;

function parsePointer(path: unknown): string[] {
  if (typeof path !== "string")
    throw new RedactionError("redaction_rule_invalid", "rule path must be a string");
  if (path === "") return [];
  if (/~(?![01])/.test(path))
    throw new RedactionError("redaction_rule_invalid", "invalid '~' escape in rule path");
  try {
    return jsonPointer.parse(path);
  } catch {
    throw new RedactionError("redaction_rule_invalid", "rule path must be a JSON pointer");
  }
}

interface Target {
  readonly tokens: string[];
  readonly parent: Container;
  readonly key: string;
}

/** Every existing location the tokens address, in document order; only own properties count. */
function resolveTargets(root: unknown, tokens: readonly string[]): Target[] {
  const out: Target[] = [];
  const walk = (node: unknown, depth: number, trail: string[]): void => {
    const token = tokens[depth];
    if (token === undefined) return;
    const last = depth === tokens.length - 1;
    const visit = (parent: Container, key: string, child: unknown): void => {
      const next = [...trail, key];
      if (last) out.push({ tokens: next, parent, key });
      else walk(child, depth + 1, next);
    };
    if (Array.isArray(node)) {
      if (token === REDACTION_WILDCARD) {
        for (let i = 0; i < node.length; i++) visit(node, String(i), node[i]);
      } else if (ARRAY_INDEX.test(token) && Number(token) < node.length)
        visit(node, token, node[Number(token)]);
    } else if (isRecord(node)) {
      if (token === REDACTION_WILDCARD) for (const key of Object.keys(node)) visit(node, key, node[key]);
      else if (Object.hasOwn(node, token)) visit(node, token, node[token]);
    }
  };
  walk(root, 0, []);
  return out;
}

/**
 * Masks a value: every character but the last `keepLast` becomes "*". Non-strings are
 * JSON-stringified first. When keepLast reaches the length the value is masked fully:
 * keeping everything would not be a mask.
 */
export function maskValue(value: unknown, keepLast = 0): string {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  const chars = Array.from(text);
  const keep = keepLast >= chars.length ? 0 : Math.max(0, Math.floor(keepLast));
  return MASK_CHARACTER.repeat(chars.length - keep) + chars.slice(chars.length - keep).join("");
}

function checkRule(rule: RedactionRule): void {
  if (rule === null || typeof rule !== "object")
    throw new RedactionError("redaction_rule_invalid", "rule must be an object");
  if (rule.mode !== "remove" && rule.mode !== "mask") {
    throw new RedactionError("redaction_rule_invalid", "rule mode must be remove or mask");
  }
  if (rule.keep_last !== undefined && !(Number.isInteger(rule.keep_last) && rule.keep_last >= 0)) {
    throw new RedactionError("redaction_rule_invalid", "keep_last must be a non-negative integer");
  }
}

function applyRule(state: { body: unknown }, rule: RedactionRule, events: RedactionEvent[]): void {
  const tokens = parsePointer(rule.path);
  if (tokens.length === 0) {
    // The empty pointer names the whole body.
    state.body = rule.mode === "remove" ? null : maskValue(state.body, rule.keep_last);
    events.push({ path: "", mode: rule.mode, source: "operation" });
    return;
  }
  const targets = resolveTargets(state.body, tokens);
  for (const target of targets) {
    events.push({ path: jsonPointer.compile(target.tokens), mode: rule.mode, source: "operation" });
  }
  if (rule.mode === "mask") {
    for (const target of targets) {
      const parent = target.parent as Record<string, unknown>;
      setOwn(target.parent, target.key, maskValue(parent[target.key], rule.keep_last));
    }
    return;
  }
  // All targets of one rule sit at the same depth, so none contains another; removing in
  // reverse document order keeps the array indices of the remaining targets valid.
  for (const target of [...targets].reverse()) {
    if (Array.isArray(target.parent)) target.parent.splice(Number(target.key), 1);
    else delete target.parent[target.key];
  }
}

/**
 * Applies operation rules in order, each to the result of the previous one. The input is
 * never mutated. A pointer that addresses nothing is a no-op without an event; a
 * malformed rule throws RedactionError (callers fail closed rather than return an
 * unredacted body).
 */
export function applyRedactions(body: unknown, rules: readonly RedactionRule[]): RedactionResult {
  for (const rule of rules) checkRule(rule);
  const state = { body: cloneJson(body) };
  const events: RedactionEvent[] = [];
  for (const rule of rules) applyRule(state, rule, events);
  return { body: state.body, events };
}

const SENSITIVE_FRAGMENTS = [
  "password",
  "passwd",
  "passphrase",
  "secret",
  "apikey",
  "authorization",
  "accesskey",
  "privatekey",
  "credential",
  "cookie",
  "cardnumber",
  "creditcard",
  "ccnumber",
  "cardno",
  "socialsecurity",
] as const;

const SENSITIVE_WORDS: ReadonlySet<string> = new Set(["pwd", "ssn", "cvv", "cvc", "cvv2"]);

/** Splits camelCase, PascalCase, snake_case, kebab-case and spaced keys into lower-case words. */
function keyWords(key: string): string[] {
  return key
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w.length > 0);
}

/**
 * Whether a field or header name looks like it holds a secret or personal data:
 * password, secret, token (a word ending in "token", not "tokens": usage counters stay),
 * api_key, authorization, access_key, secret_key, private_key, client_secret, credential,
 * cookie, ssn, card number spellings and card verification codes. Case-insensitive.
 */
export function isSensitiveKey(key: string): boolean {
  // Response bodies repeat the same few keys: remember answers (bounded; pure function).
  const known = sensitiveKeyAnswers.get(key);
  if (known !== undefined) return known;
  const answer = classifyKey(key);
  if (key.length <= MAX_REMEMBERED_KEY_LENGTH) {
    if (sensitiveKeyAnswers.size >= MAX_REMEMBERED_KEYS) sensitiveKeyAnswers.clear();
    sensitiveKeyAnswers.set(key, answer);
  }
  return answer;
}

const MAX_REMEMBERED_KEYS = 4096;
const MAX_REMEMBERED_KEY_LENGTH = 128;
const sensitiveKeyAnswers = new Map<string, boolean>();

function classifyKey(key: string): boolean {
  const words = keyWords(key);
  const joined = words.join("");
  if (SENSITIVE_FRAGMENTS.some((fragment) => joined.includes(fragment))) return true;
  return words.some((w) => SENSITIVE_WORDS.has(w) || w.endsWith("token"));
}

/**
 * Masks, at any depth, the value of every key isSensitiveKey recognizes (strings,
 * numbers, objects and arrays; null and booleans hold no secret and stay). Locations
 * listed in `skip` (already handled by an operation rule) are left alone.
 */
export function defaultSensitiveFieldRedaction(
  body: unknown,
  options: { readonly skip?: ReadonlySet<string> } = {},
): RedactionResult {
  return maskSensitiveFields(cloneJson(body), options.skip);
}

/** defaultSensitiveFieldRedaction on a value the caller owns: masks it in place. */
function maskSensitiveFields(root: unknown, skip: ReadonlySet<string> | undefined): RedactionResult {
  const events: RedactionEvent[] = [];
  interface Frame {
    readonly node: unknown;
    readonly pointer: string;
    readonly entries: [string, unknown][];
    index: number;
  }
  const frame = (node: unknown, pointer: string): Frame => ({
    node,
    pointer,
    entries: Array.isArray(node)
      ? node.map((v, i) => [String(i), v])
      : isRecord(node)
        ? Object.entries(node)
        : [],
    index: 0,
  });
  // An explicit stack walks in document order without recursion, so depth cannot overflow.
  const stack: Frame[] = [frame(root, "")];
  for (let top = stack.at(-1); top !== undefined; top = stack.at(-1)) {
    const item = top.entries[top.index++];
    if (item === undefined) {
      stack.pop();
      continue;
    }
    const [key, value] = item;
    const path = `${top.pointer}/${jsonPointer.escape(key)}`;
    if (isRecord(top.node) && isSensitiveKey(key) && value !== null && typeof value !== "boolean") {
      if (skip?.has(path)) continue;
      setOwn(top.node, key, maskValue(value));
      events.push({ path, mode: "mask", source: "default" });
    } else if (typeof value === "object" && value !== null) {
      stack.push(frame(value, path));
    }
  }
  return { body: root, events };
}

/**
 * Operation rules first, then default sensitive-field redaction, which leaves the
 * locations an operation rule already masked as the rule made them (keep_last holds).
 */
export function redactResponseBody(body: unknown, rules: readonly RedactionRule[]): RedactionResult {
  const operation = applyRedactions(body, rules);
  const skip = new Set(operation.events.map((e) => e.path));
  // applyRedactions returned a copy: it is masked in place, not copied again.
  const defaults = maskSensitiveFields(operation.body, skip);
  return { body: defaults.body, events: [...operation.events, ...defaults.events] };
}

/** Headers that reveal credentials, session state or server internals. */
export const SENSITIVE_RESPONSE_HEADERS: ReadonlySet<string> = new Set([
  "set-cookie",
  "set-cookie2",
  "cookie",
  "authorization",
  "proxy-authorization",
  "proxy-authenticate",
  "www-authenticate",
  "authentication-info",
  "proxy-authentication-info",
  "x-api-key",
  "x-auth-token",
  "x-access-token",
  "x-csrf-token",
  "x-xsrf-token",
  "server",
  "x-powered-by",
  "x-aspnet-version",
  "x-aspnetmvc-version",
  "x-generator",
  "x-runtime",
  "x-backend-server",
  "x-served-by",
  "via",
]);

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1) and content-length, which redaction makes stale:
 * the server that sends the sanitized response sets its own framing.
 */
export const HOP_BY_HOP_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "content-length",
]);

export type HeaderValue = string | number | readonly string[] | undefined;

export interface SanitizedHeaders {
  /** Lower-case names. */
  readonly headers: Record<string, string | string[]>;
  /** One per removed sensitive header; path is the lower-case header name. */
  readonly events: RedactionEvent[];
}

/**
 * Drops sensitive, hop-by-hop and Connection-nominated headers from an upstream response.
 * Names are compared case-insensitively; values are never inspected beyond Connection.
 */
export function sanitizeResponseHeaders(headers: Readonly<Record<string, HeaderValue>>): SanitizedHeaders {
  const merged = new Map<string, string[]>();
  for (const [rawName, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const name = rawName.toLowerCase();
    const values = Array.isArray(value) ? value.map(String) : [String(value)];
    merged.set(name, [...(merged.get(name) ?? []), ...values]);
  }
  const nominated = new Set(
    (merged.get("connection") ?? [])
      .flatMap((v) => v.split(","))
      .map((token) => token.trim().toLowerCase())
      .filter((token) => token.length > 0),
  );
  const out: Record<string, string | string[]> = {};
  const events: RedactionEvent[] = [];
  for (const [name, values] of merged) {
    if (SENSITIVE_RESPONSE_HEADERS.has(name) || isSensitiveKey(name)) {
      events.push({ path: name, mode: "remove", source: "header" });
      continue;
    }
    if (HOP_BY_HOP_HEADERS.has(name) || nominated.has(name)) continue;
    const [only] = values;
    setOwn(out, name, values.length === 1 && only !== undefined ? only : values);
  }
  return { headers: out, events };
}
