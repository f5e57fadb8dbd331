/**
 * The pipeline's response stages, shared by both upstream clients (the executor for invoke,
 * broker and MCP; the sidecar's forward proxy): the injected secrets overwritten in the bytes,
 * the body read for redaction (failing closed: response-body.ts), every parsed string scanned
 * again when the JSON text has escapes that could spell a secret, then the operation's and the
 * policy's rules and default sensitive-field masking. Throws ScrubError (the body cannot be
 * scrubbed) or RedactionDecodeError (it must be redacted and is not JSON): the caller refuses
 * the response, never passes it through. Each client serializes the result its own way.
 */
import { type RedactionEvent, type RedactionRule, redactResponseBody } from "../core/redaction.ts";
import { readForRedaction } from "./response-body.ts";
import type { SecretScrubber } from "./secret-scrub.ts";

export type ScrubbedBody =
  | { readonly kind: "empty"; readonly events: RedactionEvent[] }
  /** Redaction does not apply (no rules, not JSON): the scrubbed bytes as they are. */
  | { readonly kind: "other"; readonly bytes: Buffer; readonly events: RedactionEvent[] }
  /** `plainUtf8`: the upstream sent UTF-8 without a BOM (re-serializing changes no encoding). */
  | {
      readonly kind: "json";
      readonly value: unknown;
      readonly plainUtf8: boolean;
      readonly events: RedactionEvent[];
    }
  | { readonly kind: "ndjson"; readonly values: unknown[]; readonly events: RedactionEvent[] };

const SECRET_EVENT: RedactionEvent = Object.freeze({ path: "", mode: "mask", source: "secret" });

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
  if (input.kind === "other") return { kind: "other", bytes: scrubbed.value, events };
  // An optional escape (\u0041…, \/) could spell a secret the byte scan cannot see.
  const escaped = scrubber.jsonNeedsRescan(input.text);
  const redact = (value: unknown): unknown => {
    const clean = escaped ? scrubber.scrubJson(value) : { value, found: 0 };
    if (clean.found > 0 && events.length === 0) events.push({ ...SECRET_EVENT });
    const redacted = redactResponseBody(clean.value, rules);
    events.push(...redacted.events);
    return redacted.body;
  };
  if (input.kind === "ndjson") return { kind: "ndjson", values: input.values.map(redact), events };
  return { kind: "json", value: redact(input.value), plainUtf8: input.plainUtf8, events };
}
