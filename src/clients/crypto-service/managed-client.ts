/**
 * The authority service's path to the crypto service through the managed crypto API (spec
 * part B): sign-encrypt and decrypt-verify with the five credential headers (username,
 * password, api_key, access_key, secret_key) read from a mounted secret file. The managed API
 * trades username and password for the identity provider's token and caches it, so this side
 * keeps no token. The `{ statusCode, body }` answers are checked field by field; failures
 * become the same CryptoClientErrors as the direct client's, so the policy protector and the
 * envelope crypto treat both paths alike. Messages are fixed per code (no upstream text, no
 * credential).
 */

import { isRecord } from "../../core/own-property.ts";
import {
  CryptoClientError,
  type CryptoClientErrorCode,
  type DecryptVerifyResult,
  sendRequest,
} from "./client.ts";
import type { OwnerCrypto, PartnerKeys } from "./owner-crypto.ts";
import { keepAliveTransport } from "./transport.ts";

export interface ManagedOwnerCredentials extends PartnerKeys {
  /** The identity-provider service account the managed API authenticates. */
  readonly username: string;
  readonly password: string;
  /** Act for this delegated owner (header `act_as`; decision 2513). */
  readonly actAs?: string;
}

export interface ManagedCryptoClientOptions {
  /** The managed API's base URL (its operations are under `/v1`). */
  readonly baseUrl: string | URL;
  /** PEM CA the managed API's certificate chains to (a private CA); default: the system store. */
  readonly ca?: string | Buffer;
  /** Deadline of one call (default 5000 ms). */
  readonly timeoutMs?: number;
}

export interface ManagedCryptoClient {
  /** The operations of one owner, authenticated with that owner's five credentials. */
  owner(owner: string, credentials: ManagedOwnerCredentials): OwnerCrypto;
}

/** The managed API's `details.reason` → the client's code (anything else: upstream_error). */
const reasonCodes: Readonly<Record<string, CryptoClientErrorCode>> = {
  upstream_unavailable: "upstream_unavailable",
  upstream_error: "upstream_unavailable",
  idp_unavailable: "upstream_unavailable",
  rate_limited: "upstream_unavailable",
  idp_rate_limited: "upstream_unavailable",
  upstream_timeout: "upstream_timeout",
  // Our own service account or its keys refused: a configuration fault, never the caller's.
  invalid_idp_credentials: "invalid_credentials",
  upstream_token_rejected: "invalid_credentials",
  invalid_partner_credentials: "invalid_credentials",
  unknown_owner: "unknown_owner",
  owner_not_delegated: "not_delegated",
  invalid_ciphertext: "invalid_ciphertext",
  invalid_signature: "invalid_signature",
  invalid_data: "invalid_request",
  missing_field: "invalid_request",
  invalid_field: "invalid_request",
};

function text(source: Record<string, unknown>, field: string): string {
  const value = source[field];
  if (typeof value !== "string") throw new CryptoClientError("upstream_error", { status: 200 });
  return value;
}

export function createManagedCryptoClient(options: ManagedCryptoClientOptions): ManagedCryptoClient {
  let base: URL;
  try {
    base = new URL(options.baseUrl);
  } catch {
    throw new TypeError("managed crypto client: baseUrl is not a URL");
  }
  if (base.protocol !== "http:" && base.protocol !== "https:")
    throw new TypeError("managed crypto client: baseUrl must be http(s)");
  if (base.username !== "" || base.password !== "")
    throw new TypeError("managed crypto client: baseUrl must not carry credentials");
  const timeoutMs = options.timeoutMs ?? 5000;
  const send = keepAliveTransport(options.ca === undefined ? {} : { ca: options.ca });
  const root = base.href.endsWith("/") ? base.href : `${base.href}/`;
  const urls = {
    signEncrypt: new URL("v1/sign-encrypt", root),
    decryptVerify: new URL("v1/decrypt-verify", root),
  };

  async function call(
    url: URL,
    credentials: ManagedOwnerCredentials,
    body: Record<string, string | boolean>,
  ): Promise<Record<string, unknown>> {
    const answer = await sendRequest(send, url, {
      headers: {
        "content-type": "application/json",
        accept: "application/json",
        username: credentials.username,
        password: credentials.password,
        api_key: credentials.apiKey,
        access_key: credentials.accessKey,
        secret_key: credentials.secretKey,
        ...(credentials.actAs === undefined ? {} : { act_as: credentials.actAs }),
      },
      body: JSON.stringify(body),
      timeoutMs,
    });
    const { status } = answer;
    let json: unknown;
    try {
      json = JSON.parse(answer.body);
    } catch (cause) {
      throw new CryptoClientError(status >= 500 ? "upstream_unavailable" : "upstream_error", {
        status,
        cause,
      });
    }
    if (status !== 200) {
      const reason = isRecord(json) && isRecord(json.details) ? json.details.reason : undefined;
      const code = typeof reason === "string" ? reasonCodes[reason] : undefined;
      throw new CryptoClientError(code ?? (status >= 500 ? "upstream_unavailable" : "upstream_error"), {
        status,
        ...(answer.requestId === undefined ? {} : { requestId: answer.requestId }),
      });
    }
    if (!isRecord(json) || json.statusCode !== 200 || !isRecord(json.body)) {
      throw new CryptoClientError("upstream_error", { status });
    }
    return json.body;
  }

  return {
    owner(owner, credentials) {
      return {
        owner,
        async signEncrypt(data, { purpose }) {
          return text(await call(urls.signEncrypt, credentials, { data, purpose }), "encrypted_data");
        },
        async decryptVerify(encryptedData, { purpose, signedBlob }): Promise<DecryptVerifyResult> {
          const body = await call(urls.decryptVerify, credentials, {
            encrypted_data: encryptedData,
            purpose,
            ...(signedBlob === false ? { signed_blob: false } : {}),
          });
          // Anything but an explicit true is a failed verification, whatever else came back.
          if (body.is_valid_signature !== true)
            throw new CryptoClientError("invalid_signature", { status: 200 });
          const metadata = isRecord(body.metadata) ? body.metadata : {};
          const signedPurpose = text(metadata, "purpose");
          if (signedPurpose !== purpose) throw new CryptoClientError("wrong_purpose", { status: 200 });
          return {
            decryptedData: text(body, "decrypted_data"),
            isValidSignature: true,
            signedBy: text(body, "signed_by"),
            signedTimestamp: text(body, "signed_timestamp"),
            signerKeyId: text(metadata, "signer_key_id"),
            recipientKeyId: text(metadata, "recipient_key_id"),
            purpose: signedPurpose,
            signedBlob: typeof metadata.signed_blob === "string" ? metadata.signed_blob : undefined,
          };
        },
      };
    },
  };
}
