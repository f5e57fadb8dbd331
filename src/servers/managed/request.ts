/**
 * Reading a managed API request: the five credential headers and the one body field of the
 * operation. Pure. Every missing or empty item is named at once (names only, never values).
 */

import { isRecord } from "../../core/own-property.ts";
import { ManagedError } from "./errors.ts";

export const CREDENTIAL_HEADERS = ["username", "password", "api_key", "access_key", "secret_key"] as const;
export type CredentialHeader = (typeof CREDENTIAL_HEADERS)[number];

/** Upper bounds on header values, checked before any value is hashed or forwarded. */
const MAX_LENGTH: Readonly<Record<CredentialHeader, number>> = {
  username: 256,
  password: 1024,
  api_key: 512,
  access_key: 512,
  secret_key: 512,
};

export interface ManagedCredentials {
  readonly username: string;
  readonly password: string;
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
  /**
   * Optional header `act_as`: the delegated owner the partner credentials act for, passed to
   * the crypto service, which decides (decision 2513).
   */
  readonly actAs?: string;
}

/** Owner ids are at most 128 characters (the crypto service checks their form). */
const MAX_ACT_AS_LENGTH = 128;

export type BodyField = "data" | "encrypted_data";

export interface ManagedRequest {
  readonly credentials: ManagedCredentials;
  readonly value: string;
  /**
   * Optional `purpose` (sign-encrypt: signed into the document; decrypt-verify: must equal the
   * signed one). The upstream checks its form; here only that it is one bounded string.
   */
  readonly purpose: string | undefined;
  /** Optional `signed_blob` (decrypt-verify: false leaves the original signature out). */
  readonly signedBlob: boolean | undefined;
}

const MAX_PURPOSE_LENGTH = 128;

type Headers = Readonly<Record<string, string | readonly string[] | undefined>>;

function isPresent(value: unknown): boolean {
  return value !== undefined && value !== null && value !== "";
}

export function parseManagedRequest(headers: Headers, body: unknown, field: BodyField): ManagedRequest {
  const missing: string[] = CREDENTIAL_HEADERS.filter((name) => !isPresent(headers[name]));
  const record = isRecord(body) ? body : {};
  const bodyValue = record[field];
  if (!isPresent(bodyValue)) missing.push(field);
  if (missing.length > 0) {
    const missingHeaders = missing.filter((name) => name !== field);
    const parts = [
      missingHeaders.length > 0 ? `header(s) ${missingHeaders.join(", ")}` : "",
      missingHeaders.length < missing.length ? `body field ${field}` : "",
    ].filter((part) => part !== "");
    throw new ManagedError("missing_field", {
      message: `Missing or empty ${parts.join(" and ")}.`,
      fields: missing,
    });
  }
  const invalid: string[] = CREDENTIAL_HEADERS.filter((name) => {
    const value = headers[name];
    return typeof value !== "string" || value.length > MAX_LENGTH[name];
  });
  if (typeof bodyValue !== "string") invalid.push(field);
  const purpose = record.purpose;
  if (
    purpose !== undefined &&
    (typeof purpose !== "string" || purpose.length === 0 || purpose.length > MAX_PURPOSE_LENGTH)
  ) {
    invalid.push("purpose");
  }
  const signedBlob = record.signed_blob;
  if (signedBlob !== undefined && typeof signedBlob !== "boolean") invalid.push("signed_blob");
  const actAs = headers.act_as;
  if (
    actAs !== undefined &&
    (typeof actAs !== "string" || actAs.length === 0 || actAs.length > MAX_ACT_AS_LENGTH)
  ) {
    invalid.push("act_as");
  }
  if (invalid.length > 0) {
    throw new ManagedError("invalid_field", {
      message: `Invalid ${invalid.join(", ")}: each must be one string of bounded length.`,
      fields: invalid,
    });
  }
  const read = (name: CredentialHeader): string => {
    const value = headers[name];
    return typeof value === "string" ? value : "";
  };
  return {
    credentials: {
      username: read("username"),
      password: read("password"),
      apiKey: read("api_key"),
      accessKey: read("access_key"),
      secretKey: read("secret_key"),
      ...(typeof actAs === "string" ? { actAs } : {}),
    },
    value: typeof bodyValue === "string" ? bodyValue : "",
    purpose: typeof purpose === "string" ? purpose : undefined,
    signedBlob: typeof signedBlob === "boolean" ? signedBlob : undefined,
  };
}
