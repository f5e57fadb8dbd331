/**
 * The wire format of the upstream crypto service's action route (docs/managed-crypto.md),
 * shared by the server and its client. Parsing is pure: JSON in, a typed request out.
 */

import { isRecord } from "../../core/own-property.ts";
import { CryptoServiceError } from "./reasons.ts";

export const ACTIONS_PATH = "/v1/actions";
export const ADMIN_OWNERS_PATH = "/v1/admin/owners";
/** `GET <path>/<owner>/public-keys`: an owner's public keys, for any authenticated caller. */
export const PUBLIC_KEYS_PATH = "/v1/owners";
/**
 * Delegation (decision 2513): a service owner provisions (`POST`, body `{ "id" }`), rotates
 * (`POST <path>/<id>/rotate`) and retires (`DELETE <path>/<id>`) the subject owners it acts
 * for, authenticated with its own bearer token and partner credentials; nobody receives the
 * delegated owner's credentials.
 */
export const DELEGATED_OWNERS_PATH = "/v1/delegated-owners";
/** Owners a service may provision for itself: subjects' policy keys only. */
export const DELEGATED_OWNER_PREFIX = "subject:";
/** Action-route header: run the action as this delegated owner (the caller must be its delegate). */
export const ACT_AS_HEADER = "act_as";

/** Headers carrying the caller's partner credentials (besides `Authorization: Bearer`). */
export const PARTNER_HEADERS = ["api_key", "access_key", "secret_key"] as const;
export type PartnerHeader = (typeof PARTNER_HEADERS)[number];

/** Purpose signed into sign-encrypt documents when the caller names none. */
export const DEFAULT_PURPOSE = "managed-crypto/v1";

/**
 * Owner ids of the crypto service (URLs, `signed_by`): short, plain, unambiguous. `~` is for
 * `subject:<partner>~<id>`, a subject in its partner's namespace.
 */
export const OWNER_ID = /^[A-Za-z0-9][A-Za-z0-9._:@~-]{0,127}$/;

export type ActionCode = "e" | "d" | "s" | "v" | "u";

/**
 * The action route's second body format (decision 3011): decrypt-verify with its envelope and
 * answer as bytes rather than base64 inside JSON, so the hop neither grows them by a third nor
 * scans them as JSON strings. A binary body is
 *
 *   u32 BE head length || head: the JSON body without its byte field || the bytes
 *
 * Request: the head is the JSON body without `encrypted_data`, the bytes are the envelope; only
 * `["d","v"]`. Answer (HTTP 200 to a binary request, same content type): the head is the JSON
 * payload without `signed_blob`, the bytes are the signed blob (none when the request said
 * `"signed_blob": false`). Failures answer in JSON as always.
 */
export const BINARY_ACTION_TYPE = "application/vnd.authority.action+binary";
/**
 * Largest head of a binary request: its fields besides the envelope are short. An answer's head
 * carries `decrypted_data` (a policy text: hundreds of KB), so an answer is split with the answer's
 * own length as the bound; the transport that read it whole bounds that.
 */
export const MAX_BINARY_HEAD_BYTES = 4096;

/** Frames a head and its bytes as one binary body. */
export function encodeBinaryBody(head: object, bytes: Uint8Array): Buffer {
  const json = Buffer.from(JSON.stringify(head));
  const body = Buffer.allocUnsafe(4 + json.length + bytes.length);
  body.writeUInt32BE(json.length, 0);
  json.copy(body, 4);
  body.set(bytes, 4 + json.length);
  return body;
}

/**
 * The head (still JSON text, for the caller's own parser) and a view of the bytes; throws on a bad
 * frame or a head over `maxHeadBytes` (a request's bound unless the caller names another).
 */
export function splitBinaryBody(
  body: Uint8Array,
  maxHeadBytes: number = MAX_BINARY_HEAD_BYTES,
): { readonly head: string; readonly bytes: Uint8Array } {
  const frame = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (frame.length < 4) throw new RangeError("binary body shorter than its length prefix");
  const length = frame.readUInt32BE(0);
  if (length > maxHeadBytes || length > frame.length - 4) {
    throw new RangeError("binary body head length out of range");
  }
  return { head: frame.toString("utf8", 4, 4 + length), bytes: frame.subarray(4 + length) };
}

export type ActionRequest =
  | { readonly kind: "encrypt"; readonly data: string }
  | { readonly kind: "decrypt"; readonly encryptedData: string }
  | {
      readonly kind: "sign-encrypt";
      readonly data: string;
      readonly purpose: string;
      readonly recipient: string | undefined;
    }
  | {
      readonly kind: "decrypt-verify";
      /** base64 text from a JSON body, the envelope's bytes from a binary one. */
      readonly encryptedData: string | Uint8Array;
      readonly purpose: string | undefined;
      /** Whether the answer carries `signed_blob` (default true; `"signed_blob": false` leaves it out). */
      readonly signedBlob: boolean;
    }
  | { readonly kind: "unwrap"; readonly envelopeHeader: string };

/** The upstream request body, as sent. */
export interface ActionBody {
  readonly actions: readonly ActionCode[];
  readonly data?: string;
  readonly encrypted_data?: string;
  readonly purpose?: string;
  readonly recipient?: string;
  /** decrypt-verify only: false leaves `signed_blob` out of the answer. */
  readonly signed_blob?: boolean;
  /** unwrap only: base64 of an envelope's header (magic .. nonce). */
  readonly envelope_header?: string;
}

/**
 * The content key of one envelope addressed to the caller (docs/managed-crypto.md,
 * "Unwrap"): base64 of the AEAD key that opens that envelope and no other.
 */
export interface UnwrapPayload {
  readonly content_key: string;
  readonly key_id: string;
}

/** Success payloads, as sent. */
export interface EncryptPayload {
  readonly encrypted_data: string;
  readonly key_id: string;
}

export interface DecryptPayload {
  readonly decrypted_data: string;
}

export interface SignEncryptPayload {
  readonly encrypted_data: string;
  readonly key_id: string;
  readonly signer_key_id: string;
  readonly purpose: string;
}

export interface DecryptVerifyPayload {
  readonly decrypted_data: string;
  readonly is_valid_signature: true;
  readonly signed_by: string;
  readonly signed_timestamp: string;
  readonly signer_key_id: string;
  readonly recipient_key_id: string;
  readonly purpose: string;
  /**
   * base64 of the signed blob: document || ML-DSA signature || plaintext (crypto/sign-encrypt.ts);
   * absent when the request said `"signed_blob": false`.
   */
  readonly signed_blob?: string;
}

const KINDS: Readonly<Record<string, ActionRequest["kind"]>> = {
  e: "encrypt",
  d: "decrypt",
  "s,e": "sign-encrypt",
  "d,v": "decrypt-verify",
  u: "unwrap",
};

/** Fields each action reads; any other known field is refused so nothing is silently ignored. */
const FIELDS: Readonly<Record<ActionRequest["kind"], readonly string[]>> = {
  encrypt: ["data"],
  decrypt: ["encrypted_data"],
  "sign-encrypt": ["data", "purpose", "recipient"],
  "decrypt-verify": ["encrypted_data", "purpose", "signed_blob"],
  unwrap: ["envelope_header"],
};

const OPTIONAL_FIELDS = [
  "data",
  "encrypted_data",
  "purpose",
  "recipient",
  "signed_blob",
  "envelope_header",
] as const;

function invalid(message: string, fields?: readonly string[]): CryptoServiceError {
  return new CryptoServiceError("invalid_request", fields === undefined ? { message } : { message, fields });
}

function requiredString(body: Record<string, unknown>, field: string): string {
  const value = body[field];
  if (value === undefined || value === null || value === "") {
    throw new CryptoServiceError("missing_field", {
      message: `The body field ${field} is required and must be a non-empty string.`,
      fields: [field],
    });
  }
  if (typeof value !== "string") throw invalid(`The body field ${field} must be a string.`, [field]);
  return value;
}

function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.length === 0) {
    throw invalid(`The body field ${field} must be a non-empty string when present.`, [field]);
  }
  return value;
}

/** The action list's canonical key ("s,e"), or a 400 naming what is wrong. */
function actionKind(actions: unknown): ActionRequest["kind"] {
  if (actions === undefined) {
    throw new CryptoServiceError("missing_field", {
      message: "The body field actions is required.",
      fields: ["actions"],
    });
  }
  if (!Array.isArray(actions) || !actions.every((a) => typeof a === "string")) {
    throw invalid("The body field actions must be an array of action codes.", ["actions"]);
  }
  const kind = KINDS[actions.join(",")];
  if (kind === undefined) {
    throw invalid('The body field actions must be ["e"], ["d"], ["s","e"], ["d","v"] or ["u"].', ["actions"]);
  }
  return kind;
}

/**
 * A binary body's request: the head parsed as a JSON body (the same checks, the envelope
 * standing in for `encrypted_data`, which the head must not carry); only `["d","v"]`.
 */
export function parseBinaryActionRequest(head: unknown, envelope: Uint8Array): ActionRequest {
  if (!isRecord(head)) throw invalid("The head of a binary body must be a JSON object.");
  if (head.encrypted_data !== undefined) {
    throw invalid("A binary body carries encrypted_data as its bytes, not in its head.", ["encrypted_data"]);
  }
  if (actionKind(head.actions) !== "decrypt-verify") {
    throw invalid('A binary body is for the actions ["d","v"] only.', ["actions"]);
  }
  if (envelope.length === 0) {
    throw new CryptoServiceError("missing_field", {
      message: "The binary body carries no encrypted_data bytes.",
      fields: ["encrypted_data"],
    });
  }
  const request = parseActionRequest({ ...head, encrypted_data: "bytes" });
  if (request.kind !== "decrypt-verify") throw invalid('A binary body is for the actions ["d","v"] only.');
  return { ...request, encryptedData: envelope };
}

export function parseActionRequest(body: unknown): ActionRequest {
  if (!isRecord(body)) throw invalid("The body must be a JSON object.");
  const kind = actionKind(body.actions);
  const allowed = FIELDS[kind];
  const unused = OPTIONAL_FIELDS.filter((field) => body[field] !== undefined && !allowed.includes(field));
  if (unused.length > 0) {
    throw invalid(`The body field(s) ${unused.join(", ")} are not used by this action.`, unused);
  }
  switch (kind) {
    case "encrypt":
      return { kind, data: requiredString(body, "data") };
    case "decrypt":
      return { kind, encryptedData: requiredString(body, "encrypted_data") };
    case "sign-encrypt":
      return {
        kind,
        data: requiredString(body, "data"),
        purpose: optionalString(body, "purpose") ?? DEFAULT_PURPOSE,
        recipient: optionalString(body, "recipient"),
      };
    case "decrypt-verify":
      if (body.signed_blob !== undefined && typeof body.signed_blob !== "boolean") {
        throw invalid("The body field signed_blob must be a boolean when present.", ["signed_blob"]);
      }
      return {
        kind,
        encryptedData: requiredString(body, "encrypted_data"),
        purpose: optionalString(body, "purpose"),
        signedBlob: body.signed_blob !== false,
      };
    case "unwrap":
      return { kind, envelopeHeader: requiredString(body, "envelope_header") };
  }
}
