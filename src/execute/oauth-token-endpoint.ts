import * as oauth from "oauth4webapi";
import { parseBoundedJson } from "../core/bounded-json.ts";
import type { ClientAuthMethod } from "./auth-profiles.ts";
import { headerSafe, unavailable } from "./auth-profiles.ts";
import { readBoundedBody } from "./bounded-body.ts";
import { egressDenialOf, type FetchLike } from "./egress.ts";
import { ExecutionError } from "./errors.ts";

export type { FetchLike };

/** A token endpoint's successful answer, validated. */
export interface TokenResponse {
  readonly accessToken: string;
  readonly refreshToken?: string;
  /** Seconds, when the endpoint said. */
  readonly expiresIn?: number;
  readonly scope?: string;
  /** RFC 8693 §2.2.1, when the endpoint said. */
  readonly issuedTokenType?: string;
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

/**
 * client_secret_basic as this client has always sent it (RFC 6749 §2.3.1: form-encoded, then
 * Basic), not oauth4webapi's ClientSecretBasic: that one also percent-encodes `-`, `_` and `.`,
 * which token endpoints that do not form-decode the credentials refuse (and the secret scrubber
 * knows this form of the header).
 */
function clientSecretBasic(secret: string): oauth.ClientAuth {
  const encode = (value: string) => encodeURIComponent(value).replaceAll("%20", "+");
  return (_server, client, _body, headers) => {
    const pair = `${encode(client.client_id)}:${encode(secret)}`;
    headers.set("authorization", `Basic ${Buffer.from(pair).toString("base64")}`);
  };
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
    // The token endpoint is a partner's: its answer is bounded like a caller's.
    return parseBoundedJson(new TextDecoder("utf-8", { fatal: true }).decode(bytes), "token response");
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
  if (typeof record.issued_token_type === "string") out.issuedTokenType = record.issued_token_type;
  return out;
}

/**
 * An ID token (a provider answers one to a code grant with `openid`) is not what this client
 * asks for: it is never read, so it is dropped unverified rather than checked against keys and
 * algorithms the profile does not name.
 */
function withoutIdToken(response: Response, body: unknown): Response {
  if (typeof body !== "object" || body === null || !Object.hasOwn(body, "id_token")) return response;
  const { id_token: _dropped, ...rest } = body as Record<string, unknown>;
  return new Response(JSON.stringify(rest), { status: response.status, headers: response.headers });
}

/** Statuses whose Response may not carry a body (the Fetch standard's null body statuses). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

interface ClientAuthInput {
  readonly clientSecret?: string;
  readonly clientAuth?: ClientAuthMethod;
}

function clientAuthOf(request: ClientAuthInput): oauth.ClientAuth {
  const secret = request.clientSecret;
  if (secret === undefined) return oauth.None();
  return (request.clientAuth ?? "client_secret_basic") === "client_secret_basic"
    ? clientSecretBasic(secret)
    : oauth.ClientSecretPost(secret);
}

/** The caller's fetch (egress gate), reading every answer under MAX_TOKEN_RESPONSE_BYTES. */
function boundedFetchOf(fetch: FetchLike) {
  let bytes: Uint8Array = new Uint8Array();
  const boundedFetch = async (url: string, init: oauth.CustomFetchOptions<"POST", URLSearchParams>) => {
    const answer = await fetch(url, {
      method: "POST",
      headers: init.headers,
      body: init.body,
      redirect: "manual",
      signal: init.signal,
    });
    bytes = await readBoundedBody(answer, MAX_TOKEN_RESPONSE_BYTES);
    const body = NULL_BODY_STATUSES.has(answer.status) ? null : bytes.slice();
    return new Response(body, { status: answer.status, headers: answer.headers });
  };
  return { boundedFetch, bytes: () => bytes };
}

/** A request the egress gate refused, else the issue given. */
function endpointFailure(error: unknown, issue: string): ExecutionError {
  const denial = egressDenialOf(error);
  return denial === undefined
    ? unavailable(issue)
    : new ExecutionError("egress_denied", { details: { issue: "token_endpoint", rule: denial.rule } });
}

function endpointUrl(value: string): URL {
  try {
    return new URL(value);
  } catch {
    throw unavailable("token_endpoint_unreachable");
  }
}

/**
 * POSTs one form-encoded grant to a token endpoint with a deadline and a size bound.
 * oauth4webapi builds the request (client authentication, form) and checks the success
 * answer; the caller's fetch (egress policy) sends it, through a fetch that bounds the body.
 * Failures become `auth_profile_unavailable` (see refusalCode for a refusal); the
 * endpoint's own error text is never kept.
 */
export async function requestToken(request: TokenRequest): Promise<TokenResponse> {
  const { grant_type: grantType, ...params } = request.params;
  if (grantType === undefined) throw new TypeError("params.grant_type is required");
  const tokenEndpoint = endpointUrl(request.tokenUrl);
  const server: oauth.AuthorizationServer = {
    issuer: tokenEndpoint.origin,
    token_endpoint: tokenEndpoint.href,
  };
  const bounded = boundedFetchOf(request.fetch);
  let response: Response;
  try {
    response = await oauth.genericTokenEndpointRequest(
      server,
      { client_id: request.clientId },
      clientAuthOf(request),
      grantType,
      new URLSearchParams(params),
      {
        [oauth.customFetch]: bounded.boundedFetch,
        // Which endpoints may be reached, http or not, is the egress policy's decision.
        [oauth.allowInsecureRequests]: true,
        signal: AbortSignal.timeout(request.timeoutMs),
      },
    );
  } catch (error) {
    throw endpointFailure(error, "token_endpoint_unreachable");
  }
  const body = parseJson(bounded.bytes());
  if (response.status !== 200) throw refused(oauthErrorCode(body));
  try {
    await oauth.processGenericTokenEndpointResponse(
      server,
      { client_id: request.clientId },
      withoutIdToken(response, body),
    );
  } catch {
    // Answered 200 but not a conforming token response (oauth4webapi says which; we keep the issue only).
    const tokenType = (body as Record<string, unknown> | undefined)?.token_type;
    throw unavailable(
      typeof tokenType === "string" && tokenType.toLowerCase() !== "bearer"
        ? "token_type_unsupported"
        : "token_response_invalid",
    );
  }
  return parseTokenResponse(body);
}

export interface RevocationRequest extends ClientAuthInput {
  readonly fetch: FetchLike;
  readonly revocationUrl: string;
  readonly clientId: string;
  readonly token: string;
  readonly tokenTypeHint: "refresh_token" | "access_token";
  readonly timeoutMs: number;
}

/** RFC 7009: asks the provider to revoke a token; `auth_profile_unavailable` when it would not. */
export async function revokeToken(request: RevocationRequest): Promise<void> {
  const endpoint = endpointUrl(request.revocationUrl);
  const server: oauth.AuthorizationServer = { issuer: endpoint.origin, revocation_endpoint: endpoint.href };
  const bounded = boundedFetchOf(request.fetch);
  let response: Response;
  try {
    response = await oauth.revocationRequest(
      server,
      { client_id: request.clientId },
      clientAuthOf(request),
      request.token,
      {
        [oauth.customFetch]: bounded.boundedFetch,
        [oauth.allowInsecureRequests]: true,
        additionalParameters: { token_type_hint: request.tokenTypeHint },
        signal: AbortSignal.timeout(request.timeoutMs),
      },
    );
  } catch (error) {
    throw endpointFailure(error, "revocation_endpoint_unreachable");
  }
  if (response.status !== 200) {
    const code = oauthErrorCode(parseJson(bounded.bytes()));
    throw unavailable("revocation_refused", code);
  }
}
