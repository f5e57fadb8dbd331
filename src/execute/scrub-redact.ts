/**
 * The pipeline's response stages, shared by both upstream clients (the executor for invoke,
 * broker and MCP; the sidecar's forward proxy): the injected secrets overwritten in the bytes
 * (in every decoded view: secret-scrub.ts), the body read for redaction (failing closed:
 * response-body.ts), every parsed string scanned again when the JSON text has escapes that
 * could spell a secret, then the operation's and the policy's rules and default
 * sensitive-field masking. What redaction does not parse — a body that is not JSON, and every
 * string of one that is — must not show a member a client could read that redaction would
 * have masked (embedded-members.ts). Throws ScrubError (the body cannot be scrubbed) or
 * RedactionDecodeError (it must be redacted and cannot be): the caller refuses the response,
 * never passes it through. Each client serializes the result its own way.
 */
import jsonPointer from "json-pointer";
import {
  isSensitiveKey,
  REDACTION_WILDCARD,
  type RedactionEvent,
  type RedactionRule,
  redactResponseBody,
} from "../core/redaction.ts";
import { holdsMember } from "./embedded-members.ts";
import { decodeTextLeniently, RedactionDecodeError, readForRedaction } from "./response-body.ts";
import type { SecretScrubber } from "./secret-scrub.ts";

export type ScrubbedBody =
  | { readonly kind: "empty"; readonly events: RedactionEvent[] }
  /** Redaction does not apply (no rules, not JSON): the scrubbed bytes, and their text as a client reads it. */
  | {
      readonly kind: "other";
      readonly bytes: Buffer;
      readonly text: string;
      readonly events: RedactionEvent[];
    }
  /** `plainUtf8`: the upstream sent UTF-8 without a BOM (re-serializing changes no encoding). */
  | {
      readonly kind: "json";
      readonly value: unknown;
      readonly plainUtf8: boolean;
      readonly events: RedactionEvent[];
    }
  | { readonly kind: "ndjson"; readonly values: unknown[]; readonly events: RedactionEvent[] };

const SECRET_EVENT: RedactionEvent = Object.freeze({ path: "", mode: "mask", source: "secret" });

/** Member names redaction masks: the default sensitive names and the last name of each rule's path. */
function coveredNames(rules: readonly RedactionRule[]): (name: string) => boolean {
  const named = new Set<string>();
  for (const rule of rules) {
    const last = jsonPointer.parse(rule.path).at(-1);
    if (last !== undefined && last !== REDACTION_WILDCARD) named.add(last);
  }
  return (name) => named.has(name) || isSensitiveKey(name);
}

/** Whether any string at any depth of a parsed value shows a covered member (explicit stack: no depth limit). */
function stringsHoldMember(root: unknown, isCovered: (name: string) => boolean): boolean {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node === "string") {
      if (holdsMember(node, isCovered)) return true;
    } else if (typeof node === "object" && node !== null) {
      for (const child of Array.isArray(node) ? node : Object.values(node)) stack.push(child);
    }
  }
  return false;
}

export function scrubAndRedact(
  bytes: Uint8Array,
  contentType: string | null | undefined,
  rules: readonly RedactionRule[],
  scrubber: SecretScrubber,
): ScrubbedBody {
  const buffer = Buffer.isBuffer(bytes)
    ? bytes
    : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const scrubbed = scrubber.scrubBytes(buffer);
  const events: RedactionEvent[] = scrubbed.found > 0 ? [{ ...SECRET_EVENT }] : [];
  const input = readForRedaction(scrubbed.value, contentType, rules.length > 0);
  if (input.kind === "empty") return { kind: "empty", events };
  const isCovered = coveredNames(rules);
  if (input.kind === "other") {
    const text = decodeTextLeniently(scrubbed.value, contentType);
    if (holdsMember(text, isCovered)) throw new RedactionDecodeError("embedded_member");
    return { kind: "other", bytes: scrubbed.value, text, events };
  }
  // An optional escape (\u0041…, \/) could spell a secret the byte scan cannot see.
  const escaped = scrubber.jsonNeedsRescan(input.text);
  const redact = (value: unknown): unknown => {
    const clean = escaped ? scrubber.scrubJson(value) : { value, found: 0 };
    if (clean.found > 0 && events.length === 0) events.push({ ...SECRET_EVENT });
    const redacted = redactResponseBody(clean.value, rules);
    if (stringsHoldMember(redacted.body, isCovered)) throw new RedactionDecodeError("embedded_member");
    events.push(...redacted.events);
    return redacted.body;
  };
  if (input.kind === "ndjson") return { kind: "ndjson", values: input.values.map(redact), events };
  return { kind: "json", value: redact(input.value), plainUtf8: input.plainUtf8, events };
}
