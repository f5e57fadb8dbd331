import type { JsonAnswer, JsonFetch } from "../core/json-fetch.ts";
import { isRecord } from "../core/own-property.ts";
/**
 * A small OAuth 2.0 token-endpoint client (password and client-credentials grants), used
 * by `authority token` and by services that trade service-account credentials for a
 * bearer token. Errors carry the endpoint's RFC 6749 error code, never a credential.
 */

export type TokenGrant =
  | { readonly type: "client_credentials"; readonly clientId: string; readonly clientSecret: string }
  | {
      readonly type: "password";
      readonly username: string;
      readonly password: string;
      readonly clientId?: string;
      readonly clientSecret?: string;
    };

export interface TokenRequest {
  readonly tokenUrl: string | URL;
  readonly grant: TokenGrant;
  readonly scope?: string;
  readonly audience?: string;
  readonly timeoutMs?: number;
  /** Sends the request (the sidecar's node:http transport, decision 3081); default the global fetch. */
  readonly fetch?: JsonFetch;
}

export interface TokenResponse {
  readonly accessToken: string;
  readonly tokenType: string;
  readonly expiresIn: number | undefined;
  readonly scope: string | undefined;
}

export class TokenRequestError extends Error {
  /** The endpoint's `error` (e.g. invalid_grant), or `token_endpoint_unavailable`. */
  readonly code: string;
  readonly status: number | undefined;

  constructor(code: string, message: string, status?: number, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TokenRequestError";
    this.code = code;
    this.status = status;
  }
}

/** RFC 6749 §2.3.1: client id and secret are form-urlencoded before Basic encoding. */
function basicCredentials(clientId: string, clientSecret: string): string {
  const encode = (value: string) => encodeURIComponent(value).replace(/%20/g, "+");
  return `Basic ${Buffer.from(`${encode(clientId)}:${encode(clientSecret)}`).toString("base64")}`;
}

function requestBody(request: TokenRequest): { body: URLSearchParams; authorization?: string } {
  const body = new URLSearchParams();
  const { grant } = request;
  body.set("grant_type", grant.type);
  let authorization: string | undefined;
  if (grant.type === "client_credentials") {
    authorization = basicCredentials(grant.clientId, grant.clientSecret);
  } else {
    body.set("username", grant.username);
    body.set("password", grant.password);
    if (grant.clientId !== undefined && grant.clientSecret !== undefined) {
      authorization = basicCredentials(grant.clientId, grant.clientSecret);
    }
  }
  if (request.scope !== undefined && request.scope.length > 0) body.set("scope", request.scope);
  if (request.audience !== undefined && request.audience.length > 0) body.set("audience", request.audience);
  return authorization === undefined ? { body } : { body, authorization };
}

// Hand-written, not oauth4webapi (execute/oauth-token-endpoint.ts uses it): the password grant
// of a public client sends no client_id, which oauth4webapi refuses (decision 1801).
export async function requestToken(request: TokenRequest): Promise<TokenResponse> {
  const url = new URL(request.tokenUrl);
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new TokenRequestError("invalid_request", "token URL must be http(s)");
  }
  const { body, authorization } = requestBody(request);
  const send: JsonFetch = request.fetch ?? globalThis.fetch;
  let response: JsonAnswer;
  try {
    response = await send(url.href, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        accept: "application/json",
        ...(authorization === undefined ? {} : { authorization }),
      },
      body: Buffer.from(body.toString()),
      redirect: "error",
      signal: AbortSignal.timeout(request.timeoutMs ?? 10_000),
    });
  } catch (cause) {
    throw new TokenRequestError(
      "token_endpoint_unavailable",
      "the token endpoint could not be reached",
      undefined,
      {
        cause,
      },
    );
  }
  let json: unknown;
  try {
    json = await response.json();
  } catch (cause) {
    throw new TokenRequestError(
      "token_endpoint_unavailable",
      `the token endpoint answered ${response.status} without JSON`,
      response.status,
      { cause },
    );
  }
  const ok = response.status >= 200 && response.status < 300;
  if (!ok || !isRecord(json) || typeof json.access_token !== "string") {
    const error = isRecord(json) && typeof json.error === "string" ? json.error : "invalid_response";
    const description =
      isRecord(json) && typeof json.error_description === "string" ? `: ${json.error_description}` : "";
    throw new TokenRequestError(
      error,
      `token request failed (${response.status} ${error})${description}`,
      response.status,
    );
  }
  return {
    accessToken: json.access_token,
    tokenType: typeof json.token_type === "string" ? json.token_type : "Bearer",
    expiresIn: typeof json.expires_in === "number" ? json.expires_in : undefined,
    scope: typeof json.scope === "string" ? json.scope : undefined,
  };
}
