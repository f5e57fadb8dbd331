/**
 * A real OpenID provider (oidc-provider v9) for the user-grant tests: authorization code +
 * PKCE with a scripted sign-in (the interaction endpoint signs in the account the test names
 * and grants consent), JWT access tokens for one resource, rotating refresh tokens, RFC 7009
 * revocation, and RFC 8693 token exchange registered as a grant type (subject tokens verified
 * against an issuer the test trusts, exchanged tokens signed with the provider's key). Plus
 * the upstream API those tokens are for: it verifies them against the provider's JWKS.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import {
  createRemoteJWKSet,
  exportJWK,
  generateKeyPair,
  type JWTVerifyGetKey,
  jwtVerify,
  SignJWT,
} from "jose";
import Provider, { errors } from "oidc-provider";

export const RESOURCE = "https://items.example.com/";
export const RESOURCE_SCOPE = "items.read";
export const REDIRECT_URI = "https://app.example.com/oauth/callback";
export const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
export const ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";
const KID = "oidc-peer-es256";

export const CLIENTS = {
  /** Confidential, client_secret_basic: code + refresh + token exchange. */
  web: { id: "authority-web", secret: "authority-web-secret-0123456789abcdef" },
  /** Public: PKCE alone. */
  spa: { id: "authority-spa" },
  /** Another partner's client at the same provider (a code for another profile). */
  other: { id: "other-app", secret: "other-app-secret-0123456789abcdef" },
} as const;

export interface ExchangeSeen {
  readonly sub: string;
  readonly client: string;
  readonly audience?: string;
  readonly resource?: string;
  readonly scope?: string;
  readonly subjectTokenType?: string;
}

export interface OidcPeer {
  readonly issuer: string;
  readonly origin: string;
  readonly authorizationUrl: string;
  readonly tokenUrl: string;
  readonly revocationUrl: string;
  readonly jwksUrl: string;
  /** Access-token lifetime (seconds) of the next tokens issued. */
  accessTtl: number;
  /** Exchanged-token lifetime (seconds). */
  exchangeTtl: number;
  /** Down: every connection is dropped before an answer. */
  down: boolean;
  /** Token endpoint requests answered, by grant_type (a refused one as `<grant_type>!`). */
  readonly grants: string[];
  readonly exchanges: ExchangeSeen[];
  /** Holds every token request until `release()` is called; `arrived` counts the held ones. */
  holdTokenRequests(): { release(): void; readonly arrived: number };
  /** Trusts subject tokens of this issuer (token exchange). */
  trustSubjectTokens(issuer: string, jwksUrl: string): void;
  /** The user agent: follows the authorization URL, signs in as `accountId`, returns the callback URL. */
  signIn(authorizationUrl: string, accountId: string): Promise<URL>;
  close(): Promise<void>;
}

/** Follows redirects by hand with a cookie jar until the redirect URI is reached. */
async function followToCallback(start: string, redirectUri: string): Promise<URL> {
  const jar = new Map<string, string>();
  let url = start;
  for (let hop = 0; hop < 12; hop++) {
    const cookie = [...jar].map(([name, value]) => `${name}=${value}`).join("; ");
    const response = await fetch(url, { redirect: "manual", headers: cookie === "" ? {} : { cookie } });
    for (const line of response.headers.getSetCookie()) {
      const pair = line.split(";")[0] ?? "";
      const at = pair.indexOf("=");
      if (at > 0) jar.set(pair.slice(0, at), pair.slice(at + 1));
    }
    await response.body?.cancel();
    const location = response.headers.get("location");
    if (location === null) throw new Error(`sign-in stopped at ${response.status}`);
    const next = new URL(location, url);
    if (`${next.origin}${next.pathname}` === redirectUri) return next;
    url = next.href;
  }
  throw new Error("sign-in did not reach the redirect URI");
}

export async function startOidcPeer(): Promise<OidcPeer> {
  const { privateKey } = await generateKeyPair("ES256", { extractable: true });
  const signingKey = { ...(await exportJWK(privateKey)), kid: KID, alg: "ES256", use: "sig" };
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const issuer = origin;
  const grants: string[] = [];
  const exchanges: ExchangeSeen[] = [];
  let trusted: { issuer: string; keys: JWTVerifyGetKey } | undefined;
  const nextLogin = new Map<string, string>();
  let held: { gate: Promise<void>; count: number } | undefined;

  const peer = {
    accessTtl: 300,
    exchangeTtl: 300,
    down: false,
  };

  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENTS.web.id,
        client_secret: CLIENTS.web.secret,
        grant_types: ["authorization_code", "refresh_token", TOKEN_EXCHANGE],
        redirect_uris: [REDIRECT_URI],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
        id_token_signed_response_alg: "ES256",
      },
      {
        client_id: CLIENTS.spa.id,
        grant_types: ["authorization_code", "refresh_token"],
        redirect_uris: [REDIRECT_URI],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
        id_token_signed_response_alg: "ES256",
      },
      {
        client_id: CLIENTS.other.id,
        client_secret: CLIENTS.other.secret,
        grant_types: ["authorization_code", "refresh_token"],
        redirect_uris: [REDIRECT_URI],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
        id_token_signed_response_alg: "ES256",
      },
    ],
    jwks: { keys: [signingKey] },
    scopes: ["openid", "offline_access", RESOURCE_SCOPE],
    findAccount: (_ctx: unknown, accountId: string) => ({
      accountId,
      claims: () => ({ sub: accountId }),
    }),
    interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed(type: string): boolean }) =>
      client.grantTypeAllowed("refresh_token"),
    rotateRefreshToken: () => true,
    ttl: {
      AccessToken: () => peer.accessTtl,
      AuthorizationCode: 60,
      RefreshToken: 3600,
      Grant: 3600,
      Session: 3600,
      Interaction: 600,
    },
    features: {
      devInteractions: { enabled: false },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => RESOURCE,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: RESOURCE_SCOPE,
          audience: RESOURCE,
          accessTokenFormat: "jwt",
          accessTokenTTL: peer.accessTtl,
          jwt: { sign: { alg: "ES256" } },
        }),
      },
    },
  });

  provider.registerGrantType(
    TOKEN_EXCHANGE,
    async (ctx) => {
      const params = ctx.oidc.params;
      if (trusted === undefined || params.subject_token === undefined)
        throw new errors.InvalidGrant("no subject token");
      let sub: string;
      try {
        const { payload } = await jwtVerify(params.subject_token, trusted.keys, { issuer: trusted.issuer });
        sub = String(payload.sub);
      } catch {
        throw new errors.InvalidGrant("subject token rejected");
      }
      exchanges.push({
        sub,
        client: ctx.oidc.client.clientId,
        ...(params.audience === undefined ? {} : { audience: params.audience }),
        ...(params.resource === undefined ? {} : { resource: params.resource }),
        ...(params.scope === undefined ? {} : { scope: params.scope }),
        ...(params.subject_token_type === undefined ? {} : { subjectTokenType: params.subject_token_type }),
      });
      const token = await new SignJWT({
        scope: params.scope ?? RESOURCE_SCOPE,
        client_id: ctx.oidc.client.clientId,
        act: { sub: ctx.oidc.client.clientId },
      })
        .setProtectedHeader({ alg: "ES256", kid: KID, typ: "at+jwt" })
        .setIssuer(issuer)
        .setSubject(sub)
        .setAudience(params.resource ?? params.audience ?? RESOURCE)
        .setIssuedAt()
        .setJti(randomBytes(12).toString("hex"))
        .setExpirationTime(`${peer.exchangeTtl}s`)
        .sign(privateKey);
      ctx.body = {
        access_token: token,
        issued_token_type: ACCESS_TOKEN_TYPE,
        token_type: "Bearer",
        expires_in: peer.exchangeTtl,
        scope: params.scope ?? RESOURCE_SCOPE,
      };
    },
    ["subject_token", "subject_token_type", "audience", "resource", "scope", "requested_token_type"],
    ["audience", "resource"],
  );

  // Every token request the provider answered, by grant type (refused ones as `<type>!`).
  provider.on("grant.success", (ctx) => grants.push(ctx.oidc.params.grant_type ?? ""));
  provider.on("grant.error", (ctx) => grants.push(`${ctx.oidc.params.grant_type ?? ""}!`));
  const handle = provider.callback();
  server.on("request", (req, res) => {
    if (peer.down) {
      req.socket.destroy();
      return;
    }
    const url = req.url ?? "/";
    if (held !== undefined && req.method === "POST" && url === "/token") {
      const hold = held;
      hold.count++;
      void hold.gate.then(() => handle(req, res));
      return;
    }
    if (url.startsWith("/interaction/")) {
      void (async () => {
        const details = await provider.interactionDetails(req, res);
        const clientId = String(details.params.client_id);
        const accountId = nextLogin.get(String(details.params.state)) ?? "nobody";
        const grant = new provider.Grant({ accountId, clientId });
        grant.addOIDCScope(`openid offline_access ${RESOURCE_SCOPE}`);
        grant.addResourceScope(RESOURCE, RESOURCE_SCOPE);
        const grantId = await grant.save();
        await provider.interactionFinished(
          req,
          res,
          { login: { accountId }, consent: { grantId } },
          { mergeWithLastSubmission: false },
        );
      })().catch(() => {
        res.statusCode = 500;
        res.end();
      });
      return;
    }
    handle(req, res);
  });

  return {
    issuer,
    origin,
    authorizationUrl: `${origin}/auth`,
    tokenUrl: `${origin}/token`,
    revocationUrl: `${origin}/token/revocation`,
    jwksUrl: `${origin}/jwks`,
    get accessTtl() {
      return peer.accessTtl;
    },
    set accessTtl(value: number) {
      peer.accessTtl = value;
    },
    get exchangeTtl() {
      return peer.exchangeTtl;
    },
    set exchangeTtl(value: number) {
      peer.exchangeTtl = value;
    },
    get down() {
      return peer.down;
    },
    set down(value: boolean) {
      peer.down = value;
    },
    grants,
    exchanges,
    holdTokenRequests() {
      let release = () => {};
      const hold = { gate: new Promise<void>((resolve) => (release = resolve)), count: 0 };
      held = hold;
      return {
        release() {
          held = undefined;
          release();
        },
        get arrived() {
          return hold.count;
        },
      };
    },
    trustSubjectTokens(subjectIssuer, jwksUrl) {
      trusted = { issuer: subjectIssuer, keys: createRemoteJWKSet(new URL(jwksUrl)) };
    },
    async signIn(authorizationUrl, accountId) {
      const state = new URL(authorizationUrl).searchParams.get("state") ?? "";
      nextLogin.set(state, accountId);
      return followToCallback(authorizationUrl, REDIRECT_URI);
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export interface ItemsRequest {
  readonly authorization: string | undefined;
  readonly headers: IncomingHttpHeaders;
  /** Why the token was refused, when it was. */
  refused?: string;
}

export interface ItemsApi {
  readonly url: string;
  readonly requests: ItemsRequest[];
  /** Holds each answer this long (a call in flight). */
  delayMs: number;
  close(): Promise<void>;
}

/**
 * The upstream the tokens are for: answers `{ sub, scope, client_id }` of a bearer JWT the
 * provider signed for RESOURCE, 401 for anything else.
 */
export async function startItemsApi(peer: Pick<OidcPeer, "issuer" | "jwksUrl">): Promise<ItemsApi> {
  const keys = createRemoteJWKSet(new URL(peer.jwksUrl));
  const requests: ItemsRequest[] = [];
  const state = { delayMs: 0 };
  const server = createServer((req, res) => {
    const seen: ItemsRequest = { authorization: req.headers.authorization, headers: req.headers };
    requests.push(seen);
    void (async () => {
      if (state.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, state.delayMs));
      const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
      try {
        if (token === undefined) throw new Error("no token");
        const { payload } = await jwtVerify(token, keys, { issuer: peer.issuer, audience: RESOURCE });
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ sub: payload.sub, scope: payload.scope, client_id: payload.client_id }));
      } catch (error) {
        seen.refused = error instanceof Error ? error.message : String(error);
        res.writeHead(401, { "content-type": "application/json", "www-authenticate": "Bearer" });
        res.end(JSON.stringify({ error: "invalid_token" }));
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(value: number) {
      state.delayMs = value;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
