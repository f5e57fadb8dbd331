import { createHash, randomBytes } from "node:crypto";
import { sendJson, startServer, type TestServer } from "./helpers.ts";

/**
 * A small real OAuth 2.0 server on 127.0.0.1:0: /authorize (code + PKCE S256), /token
 * (client_credentials, authorization_code, refresh_token with rotation), and an API at
 * /api/* that accepts only access tokens it issued and has not revoked.
 */
export interface OAuthServer {
  readonly origin: string;
  readonly server: TestServer;
  /** Token requests received, by grant type. */
  readonly grants: string[];
  /** Access tokens the API accepts. */
  readonly validAccess: Set<string>;
  /** Lifetime (s) of the next access tokens; undefined omits expires_in. */
  expiresIn: number | undefined;
  /** Delay before answering /token (ms), to make concurrent callers overlap. */
  tokenDelayMs: number;
  /** Answer the next token requests with this status and error code instead. */
  refuseWith: { status: number; error: string } | undefined;
  /** token_type to answer with. */
  tokenType: string;
  /** Parameters of the last /token request. */
  lastForm: URLSearchParams | undefined;
  lastAuthorization: string | undefined;
  close(): Promise<void>;
}

export interface OAuthServerOptions {
  readonly clients: Readonly<Record<string, string | null>>;
}

const b64url = (bytes: Buffer) => bytes.toString("base64url");

function decodeBasic(header: string | undefined): [string, string] | undefined {
  if (header === undefined || !header.startsWith("Basic ")) return undefined;
  const decoded = Buffer.from(header.slice(6), "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  if (colon === -1) return undefined;
  const unform = (s: string) => decodeURIComponent(s.replaceAll("+", " "));
  return [unform(decoded.slice(0, colon)), unform(decoded.slice(colon + 1))];
}

export async function startOAuthServer(options: OAuthServerOptions): Promise<OAuthServer> {
  const codes = new Map<
    string,
    { clientId: string; redirectUri: string; challenge: string; scope: string }
  >();
  const refreshTokens = new Map<string, string>();
  const server = await startServer();
  const state: OAuthServer = {
    origin: server.origin,
    server,
    grants: [],
    validAccess: new Set(),
    expiresIn: 3600,
    tokenDelayMs: 0,
    refuseWith: undefined,
    tokenType: "Bearer",
    lastForm: undefined,
    lastAuthorization: undefined,
    close: () => server.close(),
  };

  const issue = (scope: string) => {
    const access = `at-${b64url(randomBytes(12))}`;
    const refresh = `rt-${b64url(randomBytes(12))}`;
    state.validAccess.add(access);
    refreshTokens.set(refresh, scope);
    return {
      access_token: access,
      token_type: state.tokenType,
      refresh_token: refresh,
      scope,
      ...(state.expiresIn === undefined ? {} : { expires_in: state.expiresIn }),
    };
  };

  server.setHandler(async (req, res) => {
    const url = new URL(req.target, server.origin);
    if (req.method === "GET" && url.pathname === "/authorize") {
      const p = url.searchParams;
      const clientId = p.get("client_id") ?? "";
      const redirectUri = p.get("redirect_uri") ?? "";
      if (
        p.get("response_type") !== "code" ||
        !Object.hasOwn(options.clients, clientId) ||
        p.get("code_challenge_method") !== "S256" ||
        !/^[A-Za-z0-9_-]{43}$/.test(p.get("code_challenge") ?? "")
      ) {
        return sendJson(res, 400, { error: "invalid_request" });
      }
      const code = b64url(randomBytes(16));
      codes.set(code, {
        clientId,
        redirectUri,
        challenge: p.get("code_challenge") ?? "",
        scope: p.get("scope") ?? "",
      });
      const back = new URL(redirectUri);
      back.searchParams.set("code", code);
      back.searchParams.set("state", p.get("state") ?? "");
      res.writeHead(302, { location: back.toString() });
      return void res.end();
    }
    if (req.method === "POST" && url.pathname === "/token") {
      if (state.tokenDelayMs > 0) await new Promise((r) => setTimeout(r, state.tokenDelayMs));
      const form = new URLSearchParams(req.body);
      state.lastForm = form;
      state.lastAuthorization = req.headers.authorization;
      const grant = form.get("grant_type") ?? "";
      state.grants.push(grant);
      if (state.refuseWith !== undefined) {
        return sendJson(res, state.refuseWith.status, {
          error: state.refuseWith.error,
          error_description: "upstream-internal-detail-xyz",
        });
      }
      const basic = decodeBasic(req.headers.authorization);
      const clientId = basic?.[0] ?? form.get("client_id") ?? "";
      const secret = basic?.[1] ?? form.get("client_secret");
      const expected = options.clients[clientId];
      if (expected === undefined || (expected !== null && secret !== expected)) {
        return sendJson(res, 401, { error: "invalid_client" });
      }
      if (grant === "client_credentials") return sendJson(res, 200, issue(form.get("scope") ?? ""));
      if (grant === "authorization_code") {
        const entry = codes.get(form.get("code") ?? "");
        codes.delete(form.get("code") ?? "");
        const verifier = form.get("code_verifier") ?? "";
        const challenge = b64url(createHash("sha256").update(verifier).digest());
        if (
          entry === undefined ||
          entry.clientId !== clientId ||
          entry.redirectUri !== form.get("redirect_uri") ||
          entry.challenge !== challenge
        ) {
          return sendJson(res, 400, { error: "invalid_grant" });
        }
        return sendJson(res, 200, issue(entry.scope));
      }
      if (grant === "refresh_token") {
        const presented = form.get("refresh_token") ?? "";
        const scope = refreshTokens.get(presented);
        if (scope === undefined) return sendJson(res, 400, { error: "invalid_grant" });
        // Rotation: a refresh token works once.
        refreshTokens.delete(presented);
        return sendJson(res, 200, issue(scope));
      }
      return sendJson(res, 400, { error: "unsupported_grant_type" });
    }
    if (url.pathname.startsWith("/api/deny/")) return sendJson(res, 401, { error: "invalid_token" });
    if (url.pathname.startsWith("/api/")) {
      const auth = req.headers.authorization ?? "";
      const token = auth.startsWith("Bearer ") ? auth.slice(7) : "";
      if (!state.validAccess.has(token)) return sendJson(res, 401, { error: "invalid_token" });
      return sendJson(res, 200, { ok: true, path: url.pathname });
    }
    return sendJson(res, 404, { error: "not_found" });
  });
  return state;
}
