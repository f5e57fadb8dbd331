/**
 * Client of the upstream crypto service's action route, used by the managed API and by
 * the authority service to protect policies. Failures are typed so callers can tell an
 * outage (`upstream_unavailable`, `upstream_timeout`) from a refusal (token, partner
 * credentials) and from bad input (ciphertext, signature). Error messages are fixed per
 * code: nothing the upstream said, and no credential, ever ends up in one.
 */

import { isRecord } from "../../core/own-property.ts";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import type { PublicKeyRingJson } from "../../crypto/index.ts";
import type { ErrorCode, TableMapped } from "../../errors.ts";
import { isCryptoServiceReason } from "./reasons.ts";
import {
  fetchTransport,
  keepAliveTransport,
  type Transport,
  type TransportAnswer,
  TransportError,
} from "./transport.ts";
import {
  ACT_AS_HEADER,
  ACTIONS_PATH,
  type ActionBody,
  BINARY_ACTION_TYPE,
  DELEGATED_OWNERS_PATH,
  type DecryptPayload,
  type DecryptVerifyPayload,
  type EncryptPayload,
  encodeBinaryBody,
  PUBLIC_KEYS_PATH,
  type SignEncryptPayload,
  splitBinaryBody,
  type UnwrapPayload,
} from "./wire.ts";

export interface CryptoCredentials {
  /** Bearer token from the identity provider. */
  readonly token: string;
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
  /**
   * Act for this delegated owner (`act_as`): the credentials above are its delegate's
   * (decision 2513).
   */
  readonly actAs?: string;
}

export interface CryptoClientOptions {
  readonly baseUrl: string | URL;
  /** Deadline of one call, connect to last byte (default 5000 ms). */
  readonly timeoutMs?: number;
  /** Send with this fetch instead of node:http(s) with a keep-alive agent. */
  readonly fetch?: typeof globalThis.fetch;
  /**
   * decrypt-verify with a binary body (envelope and signed blob as bytes, not base64 in JSON;
   * decision 3011); JSON again if the upstream refuses it. Default false.
   */
  readonly binaryBodies?: boolean;
}

/** A 2xx answer's JSON object; anything else is `upstream_error`. */
function jsonObject(text: string, status: number): Record<string, unknown> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new CryptoClientError("upstream_error", { status, cause });
  }
  if (!isRecord(json)) throw new CryptoClientError("upstream_error", { status });
  return json;
}

export interface EncryptResult {
  readonly encryptedData: string;
  readonly keyId: string;
}

export interface DecryptResult {
  readonly decryptedData: string;
  /** The upstream payload exactly as received (the managed API passes it back unchanged). */
  readonly payload: Readonly<Record<string, unknown>>;
}

export interface SignEncryptResult {
  readonly encryptedData: string;
  /** The recipient key the data is encrypted to. */
  readonly keyId: string;
  readonly signerKeyId: string;
  readonly purpose: string;
}

export interface DecryptVerifyResult {
  readonly decryptedData: string;
  readonly isValidSignature: true;
  readonly signedBy: string;
  /** ISO 8601 with offset, as signed. */
  readonly signedTimestamp: string;
  readonly signerKeyId: string;
  readonly recipientKeyId: string;
  readonly purpose: string;
  /** base64 signed blob (document, signature, plaintext), when the upstream sent it. */
  readonly signedBlob: string | undefined;
}

export interface UnwrapResult {
  /** The 32-byte AEAD key of that envelope; the caller wipes it after use. */
  readonly contentKey: Buffer;
  readonly keyId: string;
}

export interface CallOptions {
  /** Sent as X-Request-Id so the upstream's log lines carry the caller's request id. */
  readonly requestId?: string;
}

export interface CryptoClient {
  encrypt(credentials: CryptoCredentials, data: string, options?: CallOptions): Promise<EncryptResult>;
  decrypt(
    credentials: CryptoCredentials,
    encryptedData: string,
    options?: CallOptions,
  ): Promise<DecryptResult>;
  signEncrypt(
    credentials: CryptoCredentials,
    data: string,
    options?: CallOptions & { readonly purpose?: string; readonly recipient?: string },
  ): Promise<SignEncryptResult>;
  decryptVerify(
    credentials: CryptoCredentials,
    encryptedData: string,
    options?: CallOptions & { readonly purpose?: string; readonly signedBlob?: boolean },
  ): Promise<DecryptVerifyResult>;
  /**
   * The content key of one envelope addressed to the caller, asked with the envelope's header
   * only (base64): the caller decrypts and verifies locally (owner-crypto.ts).
   */
  unwrap(
    credentials: CryptoCredentials,
    envelopeHeader: string,
    options?: CallOptions,
  ): Promise<UnwrapResult>;
  /** An owner's public keys (verification of signed blobs); any valid bearer token may ask. */
  publicKeys(token: string, owner: string, options?: CallOptions): Promise<PublicKeyRingJson>;
  /**
   * Delegation (decision 2513), with the delegate's own credentials: provisions the owner
   * when it does not exist yet (idempotent), rotates its keys, retires (deletes) it.
   */
  delegatedOwner(
    credentials: CryptoCredentials,
    owner: string,
    operation: "provision" | "rotate" | "retire",
  ): Promise<void>;
}

export const cryptoClientErrorMessages = {
  upstream_unavailable: "The crypto service could not be reached.",
  upstream_timeout: "The crypto service did not answer in time.",
  invalid_token: "The crypto service rejected the bearer token.",
  invalid_credentials: "The crypto service rejected the partner credentials.",
  invalid_ciphertext: "The encrypted data is not valid for these credentials, or it was altered.",
  invalid_signature: "The signed data could not be verified.",
  wrong_purpose: "The signed data was made for another purpose.",
  unknown_recipient: "The recipient is not known to the crypto service.",
  unknown_owner: "The owner is not known to the crypto service.",
  not_delegated: "These credentials may not act for that owner at the crypto service.",
  invalid_request: "The crypto service refused the request as malformed.",
  upstream_error: "The crypto service gave an unexpected answer.",
} as const;

export type CryptoClientErrorCode = keyof typeof cryptoClientErrorMessages;

/** Codes that say the presented data is bad (altered, foreign, wrong purpose); the rest are faults. */
const dataFaultCodes: ReadonlySet<CryptoClientErrorCode> = new Set([
  "invalid_ciphertext",
  "invalid_signature",
  "wrong_purpose",
  "unknown_recipient",
  "invalid_request",
]);

/**
 * The table entry of each client failure, the precise code kept in `details.reason`. A
 * rejected token is our own configuration fault (the caller never sees the token), so it is
 * `internal`; an unexpected upstream answer is reported as unavailable.
 */
const authorityCodes: Record<CryptoClientErrorCode, ErrorCode> = {
  upstream_unavailable: "upstream_unavailable",
  upstream_timeout: "upstream_timeout",
  invalid_token: "internal",
  invalid_credentials: "insufficient_role",
  invalid_ciphertext: "invalid_request",
  invalid_signature: "invalid_request",
  wrong_purpose: "invalid_request",
  unknown_recipient: "invalid_request",
  unknown_owner: "upstream_unavailable",
  not_delegated: "upstream_unavailable",
  invalid_request: "invalid_request",
  upstream_error: "upstream_unavailable",
};

export class CryptoClientError extends Error implements TableMapped {
  readonly code: CryptoClientErrorCode;
  /** The upstream HTTP status, when it answered. */
  readonly status: number | undefined;
  /** The upstream request id, for correlating logs. */
  readonly requestId: string | undefined;
  /** Field or header names the upstream named (never values). */
  readonly fields: readonly string[] | undefined;

  constructor(
    code: CryptoClientErrorCode,
    options?: { status?: number; requestId?: string; fields?: readonly string[]; cause?: unknown },
  ) {
    super(
      cryptoClientErrorMessages[code],
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.name = "CryptoClientError";
    this.code = code;
    this.status = options?.status;
    this.requestId = options?.requestId;
    this.fields = options?.fields;
  }

  get authorityCode(): ErrorCode {
    return authorityCodes[this.code];
  }

  get authorityDetails(): Readonly<Record<string, unknown>> {
    return { reason: this.code };
  }

  get publicMessage(): string {
    return cryptoClientErrorMessages[this.code];
  }
}

/**
 * Whether a failure is the data's fault (a policy, envelope or sealed secret that does not
 * open: deny or refuse it) rather than the crypto service being unusable (fail closed, 503).
 */
export function isDataFault(error: unknown): error is CryptoClientError {
  return error instanceof CryptoClientError && dataFaultCodes.has(error.code);
}

/** One request over `send`; a transport failure becomes `upstream_timeout` or `upstream_unavailable`. */
export async function sendRequest(
  send: Transport,
  url: URL,
  request: Parameters<Transport>[1],
): Promise<TransportAnswer> {
  try {
    return await send(url, request);
  } catch (cause) {
    const timedOut = cause instanceof TransportError && cause.kind === "timeout";
    throw new CryptoClientError(timedOut ? "upstream_timeout" : "upstream_unavailable", { cause });
  }
}

function codeFor(status: number, reason: unknown): CryptoClientErrorCode {
  if (isCryptoServiceReason(reason)) {
    switch (reason) {
      case "invalid_ciphertext":
      case "invalid_signature":
      case "wrong_purpose":
      case "unknown_recipient":
      case "invalid_credentials":
        return reason;
      case "subject_not_allowed":
        return "invalid_credentials";
      case "owner_not_found":
        return "unknown_owner";
      case "owner_not_delegated":
        return "not_delegated";
      default:
        if (status >= 400 && status < 500) return status === 403 ? "invalid_credentials" : "invalid_request";
    }
  }
  if (status === 401) return "invalid_token";
  if (status === 403) return "invalid_credentials";
  if (status === 503) return "upstream_unavailable";
  if (status === 504) return "upstream_timeout";
  if (status === 400 || status === 404 || status === 413 || status === 415) return "invalid_request";
  return "upstream_error";
}

function requireString(payload: Record<string, unknown>, field: string, status: number): string {
  const value = payload[field];
  if (typeof value !== "string") throw new CryptoClientError("upstream_error", { status });
  return value;
}

export function createCryptoClient(options: CryptoClientOptions): CryptoClient {
  if (typeof options !== "object" || options === null)
    throw new TypeError("crypto client: options are required");
  let base: URL;
  try {
    base = new URL(options.baseUrl);
  } catch {
    throw new TypeError("crypto client: baseUrl is not a URL");
  }
  if (base.protocol !== "http:" && base.protocol !== "https:")
    throw new TypeError("crypto client: baseUrl must be http(s)");
  if (base.username !== "" || base.password !== "")
    throw new TypeError("crypto client: baseUrl must not carry credentials");
  const timeoutMs = positiveIntegerOption(options.timeoutMs, 5000, "crypto client: timeoutMs");
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new TypeError("crypto client: fetch must be a function");
  }
  const send: Transport = options.fetch === undefined ? keepAliveTransport() : fetchTransport(options.fetch);
  const binaryBodies = options.binaryBodies === true;
  const url = new URL(ACTIONS_PATH.slice(1), base.href.endsWith("/") ? base : `${base.href}/`);

  /** One exchange; an answer that is not 2xx becomes the failure its JSON body names. */
  async function exchange(
    credentials: CryptoCredentials | { readonly token: string },
    body: { readonly type: string; readonly content: string | Uint8Array } | undefined,
    callOptions: CallOptions,
    target: URL = url,
    method?: "DELETE",
  ): Promise<TransportAnswer> {
    const answer = await sendRequest(send, target, {
      headers: {
        ...(body === undefined ? {} : { "content-type": body.type }),
        ...("actAs" in credentials && credentials.actAs !== undefined
          ? { [ACT_AS_HEADER]: credentials.actAs }
          : {}),
        accept:
          body?.type === BINARY_ACTION_TYPE ? `${BINARY_ACTION_TYPE}, application/json` : "application/json",
        authorization: `Bearer ${credentials.token}`,
        ...("apiKey" in credentials
          ? {
              api_key: credentials.apiKey,
              access_key: credentials.accessKey,
              secret_key: credentials.secretKey,
            }
          : {}),
        ...(callOptions.requestId === undefined ? {} : { "x-request-id": callOptions.requestId }),
      },
      ...(body === undefined
        ? { method: method ?? ("GET" as const), body: "" }
        : {
            body: body.content,
            ...(body.type === BINARY_ACTION_TYPE ? { bytesOf: BINARY_ACTION_TYPE } : {}),
          }),
      timeoutMs,
    });
    const { status, requestId } = answer;
    if (status >= 200 && status < 300) return answer;
    let json: unknown;
    try {
      json = JSON.parse(answer.body);
    } catch (cause) {
      throw new CryptoClientError(codeFor(status, undefined), { status, cause });
    }
    const details = isRecord(json) && isRecord(json.details) ? json.details : {};
    const fields = Array.isArray(details.fields)
      ? details.fields.filter((f) => typeof f === "string")
      : undefined;
    throw new CryptoClientError(codeFor(status, details.reason), {
      status,
      ...(requestId === undefined ? {} : { requestId }),
      ...(fields === undefined ? {} : { fields }),
    });
  }

  async function call(
    credentials: CryptoCredentials | { readonly token: string },
    body: ActionBody | Readonly<Record<string, string>> | undefined,
    callOptions: CallOptions,
    target: URL = url,
    method?: "DELETE",
  ): Promise<Record<string, unknown>> {
    const content =
      body === undefined ? undefined : { type: "application/json", content: JSON.stringify(body) };
    const answer = await exchange(credentials, content, callOptions, target, method);
    if (answer.status === 204) return {};
    return jsonObject(answer.body, answer.status);
  }

  /** Whether the upstream refused a binary body (415: an older crypto service); then JSON only. */
  let binaryRefused = false;

  /**
   * decrypt-verify with a binary body (wire.ts BINARY_ACTION_TYPE): the envelope and the signed
   * blob cross as bytes. The answer is the JSON payload it stands for (`signed_blob` as base64),
   * so both formats are read alike; undefined when this call goes as JSON instead: an envelope
   * that is not canonical base64 (the upstream refuses it as it always did) or an upstream
   * that takes no binary body.
   */
  async function binaryDecryptVerify(
    credentials: CryptoCredentials,
    head: ActionBody,
    encryptedData: string,
    callOptions: CallOptions,
  ): Promise<Record<string, unknown> | undefined> {
    if (binaryRefused) return undefined;
    const envelope = Buffer.from(encryptedData, "base64");
    if (envelope.toString("base64") !== encryptedData) return undefined;
    let answer: TransportAnswer;
    try {
      answer = await exchange(
        credentials,
        { type: BINARY_ACTION_TYPE, content: encodeBinaryBody(head, envelope) },
        callOptions,
      );
    } catch (error) {
      if (!(error instanceof CryptoClientError && error.status === 415)) throw error;
      binaryRefused = true;
      return undefined;
    }
    const bytes = answer.bytes;
    if (bytes === undefined) return jsonObject(answer.body, answer.status);
    try {
      // Its head holds the plaintext (decrypted_data): bounded by the answer, not a request's 4 KB.
      const split = splitBinaryBody(bytes, bytes.length);
      const payload = jsonObject(split.head, answer.status);
      const blob = split.bytes;
      // A view, not a copy: the whole answer (the plaintext in it) is wiped below.
      return blob.length === 0
        ? payload
        : {
            ...payload,
            signed_blob: Buffer.from(blob.buffer, blob.byteOffset, blob.length).toString("base64"),
          };
    } catch (error) {
      if (error instanceof CryptoClientError) throw error;
      throw new CryptoClientError("upstream_error", { status: answer.status, cause: error });
    } finally {
      bytes.fill(0);
    }
  }

  return {
    async encrypt(credentials, data, callOptions = {}) {
      const payload = await call(credentials, { actions: ["e"], data }, callOptions);
      return {
        encryptedData: requireString(payload, "encrypted_data" satisfies keyof EncryptPayload, 200),
        keyId: requireString(payload, "key_id", 200),
      };
    },
    async decrypt(credentials, encryptedData, callOptions = {}) {
      const payload = await call(credentials, { actions: ["d"], encrypted_data: encryptedData }, callOptions);
      return {
        decryptedData: requireString(payload, "decrypted_data" satisfies keyof DecryptPayload, 200),
        payload,
      };
    },
    async signEncrypt(credentials, data, callOptions = {}) {
      const payload = await call(
        credentials,
        {
          actions: ["s", "e"],
          data,
          ...(callOptions.purpose === undefined ? {} : { purpose: callOptions.purpose }),
          ...(callOptions.recipient === undefined ? {} : { recipient: callOptions.recipient }),
        },
        callOptions,
      );
      return {
        encryptedData: requireString(payload, "encrypted_data" satisfies keyof SignEncryptPayload, 200),
        keyId: requireString(payload, "key_id", 200),
        signerKeyId: requireString(payload, "signer_key_id", 200),
        purpose: requireString(payload, "purpose", 200),
      };
    },
    async decryptVerify(credentials, encryptedData, callOptions = {}) {
      const head: ActionBody = {
        actions: ["d", "v"],
        ...(callOptions.purpose === undefined ? {} : { purpose: callOptions.purpose }),
        ...(callOptions.signedBlob === false ? { signed_blob: false } : {}),
      };
      const payload =
        (binaryBodies
          ? await binaryDecryptVerify(credentials, head, encryptedData, callOptions)
          : undefined) ?? (await call(credentials, { ...head, encrypted_data: encryptedData }, callOptions));
      // Anything but an explicit true is a failed verification, whatever else came back.
      if (payload.is_valid_signature !== true)
        throw new CryptoClientError("invalid_signature", { status: 200 });
      return {
        decryptedData: requireString(payload, "decrypted_data" satisfies keyof DecryptVerifyPayload, 200),
        isValidSignature: true,
        signedBy: requireString(payload, "signed_by", 200),
        signedTimestamp: requireString(payload, "signed_timestamp", 200),
        signerKeyId: requireString(payload, "signer_key_id", 200),
        recipientKeyId: requireString(payload, "recipient_key_id", 200),
        purpose: requireString(payload, "purpose", 200),
        signedBlob: typeof payload.signed_blob === "string" ? payload.signed_blob : undefined,
      };
    },
    async unwrap(credentials, envelopeHeader, callOptions = {}) {
      const payload = await call(
        credentials,
        { actions: ["u"], envelope_header: envelopeHeader },
        callOptions,
      );
      const contentKey = Buffer.from(
        requireString(payload, "content_key" satisfies keyof UnwrapPayload, 200),
        "base64",
      );
      if (contentKey.length !== 32) throw new CryptoClientError("upstream_error", { status: 200 });
      return { contentKey, keyId: requireString(payload, "key_id", 200) };
    },
    async publicKeys(token, owner, callOptions = {}) {
      const keysUrl = new URL(
        `${PUBLIC_KEYS_PATH.slice(1)}/${encodeURIComponent(owner)}/public-keys`,
        base.href.endsWith("/") ? base : `${base.href}/`,
      );
      const payload = await call({ token }, undefined, callOptions, keysUrl);
      if (payload.owner !== owner || !Array.isArray(payload.keys))
        throw new CryptoClientError("upstream_error", { status: 200 });
      return payload as unknown as PublicKeyRingJson;
    },
    async delegatedOwner(credentials, owner, operation) {
      const root = base.href.endsWith("/") ? base : `${base.href}/`;
      const path = DELEGATED_OWNERS_PATH.slice(1);
      const { actAs: _ignored, ...delegate } = credentials;
      if (operation === "provision") {
        await call(delegate, { id: owner }, {}, new URL(path, root));
        return;
      }
      const ownerUrl = new URL(`${path}/${encodeURIComponent(owner)}`, root);
      if (operation === "rotate") await call(delegate, {}, {}, new URL(`${ownerUrl.href}/rotate`));
      else await call(delegate, undefined, {}, ownerUrl, "DELETE");
    },
  };
}
