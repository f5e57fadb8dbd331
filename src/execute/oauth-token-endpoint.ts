import type { ClientAuthMethod } from "./auth-profiles.ts";
import { headerSafe, unavailable } from "./auth-profiles.ts";
import { readBoundedBody } from "./bounded-body.ts";
import { egressDenialOf } from "./egress.ts";
import { ExecutionError } from "./errors.ts";

export type FetchLike = (input: string | URL, init?: RequestInit) => Promise<Response>;

/** A token endpoint's successful answer, validated. */
export interface TokenResponse {
  readonly accessToken: string;
  readonly refreshToken?: string;
  /** Seconds, when the endpoint said. */
  readonly expiresIn?: number;
  readonly scope?: string;
}

export interface TokenRequest {
  readonly fetch: FetchLike;
  readonly tokenUrl: string;
  readonly clientId: string;
  /** Absent for public clients: client_id goes in the body. */
  readonly clientSecret?: string;
  readonly clientAuth?: ClientAuthMethod;
  readonly params: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
}

/** Token endpoint answers are small; anything larger is refused. */
const MAX_TOKEN_RESPONSE_BYTES = 64 * 1024;

/** RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic encoding. */
function basicCredentials(clientId: string, secret: string): string {
  const encode = (value: string) => encodeURIComponent(value).replaceAll("%20", "+");
  return Buffer.from(`${encode(clientId)}:${encode(secret)}`).toString("base64");
}

function refused(oauthError: string | undefined): ExecutionError {
  return new ExecutionError("auth_profile_unavailable", {
    details:
      oauthError === undefined
        ? { issue: "token_endpoint_refused" }
        : { issue: "token_endpoint_refused", oauth_error: oauthError },
  });
}

/** The RFC 6749 §5.2 `error` code of a refusal (invalid_grant, invalid_client, …), if any. */
export function refusalCode(error: unknown): string | undefined {
  if (!(error instanceof ExecutionError) || error.details?.issue !== "token_endpoint_refused")
    return undefined;
  const code = error.details.oauth_error;
  return typeof code === "string" ? code : "unspecified";
}

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    return undefined;
  }
}

function oauthErrorCode(body: unknown): string | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const code = (body as Record<string, unknown>).error;
  // Only a short registered-style code is kept; error_description is never read.
  return typeof code === "string" && /^[a-z_]{1,64}$/.test(code) ? code : undefined;
}

function parseTokenResponse(body: unknown): TokenResponse {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw unavailable("token_response_invalid");
  }
  const record = body as Record<string, unknown>;
  const accessToken = record.access_token;
  if (typeof accessToken !== "string" || accessToken.length === 0)
    throw unavailable("token_response_invalid");
  headerSafe(accessToken);
  const tokenType = record.token_type;
  // Only bearer tokens can be injected; DPoP or MAC tokens would be sent wrongly.
  if (tokenType !== undefined && (typeof tokenType !== "string" || tokenType.toLowerCase() !== "bearer")) {
    throw unavailable("token_type_unsupported");
  }
  const out: { -readonly [K in keyof TokenResponse]: TokenResponse[K] } = { accessToken };
  const expiresIn = typeof record.expires_in === "string" ? Number(record.expires_in) : record.expires_in;
  if (expiresIn !== undefined) {
    if (typeof expiresIn !== "number" || !Number.isFinite(expiresIn) || expiresIn <= 0) {
      throw unavailable("token_response_invalid");
    }
    out.expiresIn = expiresIn;
  }
  if (typeof record.refresh_token === "string" && record.refresh_token.length > 0) {
    out.refreshToken = record.refresh_token;
  }
  if (typeof record.scope === "string") out.scope = record.scope;
  return out;
}

/**
 * POSTs one form-encoded grant to a token endpoint with a deadline and a size bound.
 * Failures become `auth_profile_unavailable` (see refusalCode for a refusal); the
 * endpoint's own error text is never kept.
 */
export async function requestToken(request: TokenRequest): Promise<TokenResponse> {
  const form = new URLSearchParams(request.params);
  const headers: Record<string, string> = {
    "content-type": "application/x-www-form-urlencoded",
    accept: "application/json",
  };
  const secret = request.clientSecret;
  if (secret !== undefined && (request.clientAuth ?? "client_secret_basic") === "client_secret_basic") {
    headers.authorization = `Basic ${basicCredentials(request.clientId, secret)}`;
  } else {
    form.set("client_id", request.clientId);
    if (secret !== undefined) form.set("client_secret", secret);
  }
  let response: Response;
  let bytes: Uint8Array;
  try {
    response = await request.fetch(request.tokenUrl, {
      method: "POST",
      headers,
      body: form.toString(),
      redirect: "manual",
      signal: AbortSignal.timeout(request.timeoutMs),
    });
    bytes = await readBoundedBody(response, MAX_TOKEN_RESPONSE_BYTES);
  } catch (error) {
    const denial = egressDenialOf(error);
    if (denial !== undefined) {
      throw new ExecutionError("egress_denied", { details: { issue: "token_endpoint", rule: denial.rule } });
    }
    throw unavailable("token_endpoint_unreachable");
  }
  const body = parseJson(bytes);
  if (response.status !== 200) throw refused(oauthErrorCode(body));
  return parseTokenResponse(body);
}
