/**
 * User-delegated credentials against a real OpenID provider (oidc-provider v9): authorization
 * code + PKCE with rotating refresh tokens and revocation, and RFC 8693 token exchange, each
 * calling an upstream that verifies the provider's tokens. Token sets are sealed as the
 * authority keeps them (src/admin/user-token-sets.ts).
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, beforeEach, describe, it } from "node:test";
import { createSealedTokenSetStore } from "../../src/admin/user-token-sets.ts";
import type { OAuthUserProfile, TokenExchangeProfile } from "../../src/execute/auth-profiles.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import type { Executor } from "../../src/execute/executor.ts";
import { requestToken } from "../../src/execute/oauth-token-endpoint.ts";
import type { UserGrantEvent } from "../../src/execute/oauth-user.ts";
import { createTokenExchangeTokens, type TokenExchangeTokens } from "../../src/execute/token-exchange.ts";
import { userGrantKey } from "../../src/execute/token-set-store.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import { collections } from "../../src/store/model.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { executeOnce, testExecutor } from "../helpers/execute-once.ts";
import { containsJwt } from "../helpers/jwt-shape.ts";
import {
  CLIENTS,
  type ItemsApi,
  type OidcPeer,
  REDIRECT_URI,
  RESOURCE,
  RESOURCE_SCOPE,
  startItemsApi,
  startOidcPeer,
} from "../helpers/oidc-peer.ts";
import { itemSnapshot, openTokenStore, secretTable, startServer, type TokenStoreFixture } from "./helpers.ts";

const PARTNER = "acme";
let peer: OidcPeer;
let api: ItemsApi;
let idp: IdpServer;
let idpIssuer: string;
let tokens: TokenStoreFixture;
let executor: Executor;
let exchanged: TokenExchangeTokens;
const secrets = secretTable({ "ref:web": CLIENTS.web.secret });

before(async () => {
  peer = await startOidcPeer();
  api = await startItemsApi(peer);
  idp = await createIdpServer({ audience: "authority" });
  idpIssuer = await idp.listen();
  peer.trustSubjectTokens(idpIssuer, `${idpIssuer}/.well-known/jwks.json`);
  tokens = await openTokenStore();
});
after(async () => {
  await api.close();
  await peer.close();
  await idp.close();
  await tokens.close();
});

function build(options: { now?: () => number } = {}): Executor {
  const egress = egressAllowing([peer.origin, api.url]);
  exchanged = createTokenExchangeTokens({ fetch: egress.fetch, secretResolver: secrets.resolve, ...options });
  return testExecutor({
    secretResolver: secrets.resolve,
    tokenSetStore: createSealedTokenSetStore({
      store: tokens.store,
      secretKeyRings: createProcessKeyRingsOnce(),
      now: () => new Date(),
    }),
    constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
    egress,
    tokenExchange: exchanged,
  });
}

let rings: ReturnType<typeof createProcessKeyRings> | undefined;
function createProcessKeyRingsOnce() {
  rings ??= createProcessKeyRings();
  return rings;
}

beforeEach(() => {
  peer.accessTtl = 300;
  peer.exchangeTtl = 300;
  peer.down = false;
  peer.grants.length = 0;
  peer.exchanges.length = 0;
  api.requests.length = 0;
  api.delayMs = 0;
  executor = build();
});

const userProfile: OAuthUserProfile = {
  type: "oauth_user",
  id: "items-user",
  authorizationUrl: "",
  tokenUrl: "",
  clientId: CLIENTS.web.id,
  clientSecretRef: "ref:web",
  scopes: ["openid", "offline_access", RESOURCE_SCOPE],
};
const profileOf = (): OAuthUserProfile => ({
  ...userProfile,
  authorizationUrl: peer.authorizationUrl,
  tokenUrl: peer.tokenUrl,
  revocationUrl: peer.revocationUrl,
});
const exchangeProfile = (overrides: Partial<TokenExchangeProfile> = {}): TokenExchangeProfile => ({
  type: "oauth_token_exchange",
  id: "items-obo",
  tokenUrl: peer.tokenUrl,
  clientId: CLIENTS.web.id,
  clientSecretRef: "ref:web",
  scopes: [RESOURCE_SCOPE],
  resource: RESOURCE,
  subjectTokenType: "jwt",
  ...overrides,
});
const keyOf = (subject: string, profileId = "items-user") => userGrantKey(PARTNER, profileId, subject);

async function connect(subject: string, profile = profileOf()): Promise<void> {
  const state = randomBytes(32).toString("base64url");
  const started = executor.oauthUser.startAuthorization({ profile, redirectUri: REDIRECT_URI, state });
  const callback = await peer.signIn(started.authorizationUrl, subject);
  assert.equal(callback.searchParams.get("state"), state);
  await executor.oauthUser.exchangeCode({
    profile,
    code: callback.searchParams.get("code") ?? "",
    codeVerifier: started.codeVerifier,
    redirectUri: REDIRECT_URI,
    tokenSetKey: keyOf(subject, profile.id),
  });
}

function callApi(
  profile: OAuthUserProfile | TokenExchangeProfile,
  subject: string,
  token?: { value: string; expiresAt?: number },
) {
  return executeOnce(executor, {
    snapshot: itemSnapshot(api.url, { upstream_url_template: `${api.url}/items/{id}` }),
    args: { path: { id: "a" } },
    authProfile: profile,
    partnerId: PARTNER,
    endUser: { partnerId: PARTNER, subjectId: subject, ...(token === undefined ? {} : { token }) },
  });
}

async function rejection(promise: Promise<unknown>): Promise<ExecutionError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ExecutionError, String(error));
    return error;
  }
  assert.fail("expected an ExecutionError");
}

/** Whether the provider still honours this refresh token. */
async function refreshWorks(refreshToken: string): Promise<boolean> {
  try {
    await requestToken({
      fetch,
      tokenUrl: peer.tokenUrl,
      clientId: CLIENTS.web.id,
      clientSecret: CLIENTS.web.secret,
      params: { grant_type: "refresh_token", refresh_token: refreshToken },
      timeoutMs: 5000,
    });
    return true;
  } catch {
    return false;
  }
}

describe("oauth_user against oidc-provider", () => {
  it("connects a user (code + PKCE) and calls the upstream with that user's token; sealed at rest", async () => {
    await connect("alice");
    const result = await callApi(profileOf(), "alice");
    assert.equal(result.status, 200);
    assert.equal((result.body as { sub: string }).sub, "alice");
    const raw = JSON.stringify(await tokens.store.get(collections.userTokenSets, keyOf("alice")));
    const set = await tokens.tokenSetStore.get(keyOf("alice"));
    assert.equal(set, undefined, "the plain store reads no token set: it is sealed");
    const unsealed = await createSealedTokenSetStore({
      store: tokens.store,
      secretKeyRings: createProcessKeyRingsOnce(),
      now: () => new Date(),
    }).get(keyOf("alice"));
    assert.ok(unsealed?.refreshToken !== undefined);
    for (const secret of [unsealed.accessToken, unsealed.refreshToken])
      assert.ok(!raw.includes(secret), "no token in the clear at rest");
    assert.ok(!containsJwt(raw), "no JWT in the clear at rest");
  });

  it("refresh-token rotation: the rotated token is kept, the old one is dead at the provider", async () => {
    peer.accessTtl = 5;
    await connect("rotating");
    const sealed = createSealedTokenSetStore({
      store: tokens.store,
      secretKeyRings: createProcessKeyRingsOnce(),
      now: () => new Date(),
    });
    const before = await sealed.get(keyOf("rotating"));
    peer.accessTtl = 300;
    peer.grants.length = 0;
    assert.equal((await callApi(profileOf(), "rotating")).status, 200);
    assert.deepEqual(peer.grants, ["refresh_token"], "the token due for renewal was refreshed once");
    const after = await sealed.get(keyOf("rotating"));
    assert.ok(before?.refreshToken !== undefined && after?.refreshToken !== undefined);
    assert.notEqual(after.refreshToken, before.refreshToken, "rotated");
    assert.equal((await callApi(profileOf(), "rotating")).status, 200);
    assert.deepEqual(peer.grants, ["refresh_token"], "a fresh token is reused");
    assert.equal(await refreshWorks(before.refreshToken), false, "the rotated-out token is refused");
  });

  it("invalid_grant: a grant revoked at the provider is forgotten, the user must connect again", async () => {
    const events: UserGrantEvent[] = [];
    const egress = egressAllowing([peer.origin, api.url]);
    const store = createSealedTokenSetStore({
      store: tokens.store,
      secretKeyRings: createProcessKeyRingsOnce(),
      now: () => new Date(),
    });
    const { createOAuthUserClient } = await import("../../src/execute/oauth-user.ts");
    const client = createOAuthUserClient({
      fetch: egress.fetch,
      secretResolver: secrets.resolve,
      tokenSetStore: store,
      onEvent: (event) => events.push(event),
    });
    executor = testExecutor({
      secretResolver: secrets.resolve,
      tokenSetStore: store,
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      egress,
      oauthUser: client,
    });
    await connect("revoked-user");
    const set = await store.get(keyOf("revoked-user"));
    assert.ok(set?.refreshToken !== undefined);
    // Revoked at the provider behind the authority's back (the user removed the app there).
    const revoked = await fetch(peer.revocationUrl, {
      method: "POST",
      headers: {
        authorization: `Basic ${Buffer.from(`${CLIENTS.web.id}:${CLIENTS.web.secret}`).toString("base64")}`,
        "content-type": "application/x-www-form-urlencoded",
      },
      body: new URLSearchParams({ token: set.refreshToken, token_type_hint: "refresh_token" }),
    });
    assert.equal(revoked.status, 200);
    const error = await rejection(
      client.refresh({ profile: profileOf(), tokenSetKey: keyOf("revoked-user") }),
    );
    assert.equal(error.code, "user_grant_required");
    assert.equal(error.status, 403);
    assert.equal(error.details?.oauth_error, "invalid_grant");
    assert.equal(await store.get(keyOf("revoked-user")), undefined);
    assert.deepEqual(events, [
      {
        action: "refresh_failed",
        tokenSetKey: keyOf("revoked-user"),
        issue: "token_endpoint_refused",
        oauthError: "invalid_grant",
      },
    ]);
    const again = await rejection(callApi(profileOf(), "revoked-user"));
    assert.equal(again.code, "user_grant_required");
    assert.equal(again.details?.issue, "user_grant_missing");
  });

  it("a provider that is down: 503, the grant is kept, and it works once the provider is back", async () => {
    peer.accessTtl = 5;
    await connect("patient");
    peer.down = true;
    const error = await rejection(callApi(profileOf(), "patient"));
    assert.equal(error.code, "upstream_unavailable");
    assert.equal(error.details?.issue, "token_endpoint_unreachable");
    assert.equal(api.requests.length, 0, "nothing was sent upstream");
    peer.down = false;
    peer.accessTtl = 300;
    assert.equal((await callApi(profileOf(), "patient")).status, 200);
  });

  it("a user who disconnects mid-call: the call in flight ends, the next one is refused, the grant is revoked", async () => {
    await connect("leaving");
    const store = createSealedTokenSetStore({
      store: tokens.store,
      secretKeyRings: createProcessKeyRingsOnce(),
      now: () => new Date(),
    });
    const set = await store.get(keyOf("leaving"));
    assert.ok(set?.refreshToken !== undefined);
    api.delayMs = 300;
    const inFlight = callApi(profileOf(), "leaving");
    while (api.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    const revocation = await executor.oauthUser.disconnect({
      profile: profileOf(),
      tokenSetKey: keyOf("leaving"),
    });
    assert.equal(revocation, "revoked");
    assert.equal((await inFlight).status, 200, "the call already on its way completes");
    api.delayMs = 0;
    const next = await rejection(callApi(profileOf(), "leaving"));
    assert.equal(next.code, "user_grant_required");
    assert.equal(await refreshWorks(set.refreshToken), false, "revoked at the provider");
    assert.equal(
      await executor.oauthUser.disconnect({ profile: profileOf(), tokenSetKey: keyOf("leaving") }),
      "no_grant",
    );
  });

  it("a disconnect while a refresh is in flight is not undone by the refresh", async () => {
    // No revocation endpoint: the provider keeps honouring the old refresh token, so only the
    // client's own check stands between the late refresh and a resurrected grant.
    const { revocationUrl: _none, ...profile } = profileOf();
    peer.accessTtl = 5;
    await connect("racing", profile);
    peer.accessTtl = 300;
    const hold = peer.holdTokenRequests();
    const inFlight = callApi(profile, "racing");
    while (hold.arrived === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(
      await executor.oauthUser.disconnect({ profile, tokenSetKey: keyOf("racing") }),
      "not_supported",
    );
    hold.release();
    const error = await rejection(inFlight);
    assert.equal(error.code, "user_grant_required");
    assert.equal(
      await tokens.store.get(collections.userTokenSets, keyOf("racing")),
      undefined,
      "not resurrected",
    );
    assert.equal(api.requests.length, 0, "the refreshed token was never used");
  });

  it("users' grants never mix: concurrent calls each carry their own user's token", async () => {
    await connect("ann");
    await connect("ben");
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => callApi(profileOf(), i % 2 === 0 ? "ann" : "ben")),
    );
    assert.deepEqual(
      results.map((r) => (r.body as { sub: string }).sub),
      ["ann", "ben", "ann", "ben", "ann", "ben"],
    );
    const error = await rejection(callApi(profileOf(), "carl"));
    assert.equal(error.code, "user_grant_required");
  });
});

async function userToken(subject: string): Promise<{ value: string; expiresAt: number }> {
  const issued = await idp.issueToken({ subject, roles: ["agent"] });
  return { value: issued.accessToken, expiresAt: Date.now() + 300_000 };
}

describe("token exchange (RFC 8693) against oidc-provider", () => {
  it("calls the upstream with the exchanged token, never the user's own; cached per user", async () => {
    const alice = await userToken("alice");
    const result = await callApi(exchangeProfile(), "alice", alice);
    assert.equal(result.status, 200);
    assert.deepEqual(result.body, { sub: "alice", scope: RESOURCE_SCOPE, client_id: CLIENTS.web.id });
    assert.deepEqual(peer.exchanges, [
      {
        sub: "alice",
        client: CLIENTS.web.id,
        resource: RESOURCE,
        scope: RESOURCE_SCOPE,
        subjectTokenType: "urn:ietf:params:oauth:token-type:jwt",
      },
    ]);
    const sent = api.requests.at(-1)?.authorization ?? "";
    assert.ok(sent.startsWith("Bearer ") && !sent.includes(alice.value), "the user's token is not forwarded");
    assert.ok(!JSON.stringify(api.requests.at(-1)?.headers).includes(alice.value));
    assert.equal((await callApi(exchangeProfile(), "alice", alice)).status, 200);
    assert.equal(peer.exchanges.length, 1, "the exchanged token is reused until it expires");
  });

  it("mixing users' caches: concurrent calls of two users each get their own exchanged token", async () => {
    const [ann, ben] = await Promise.all([userToken("ann"), userToken("ben")]);
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        i % 2 === 0 ? callApi(exchangeProfile(), "ann", ann) : callApi(exchangeProfile(), "ben", ben),
      ),
    );
    assert.deepEqual(
      results.map((r) => (r.body as { sub: string }).sub),
      ["ann", "ben", "ann", "ben", "ann", "ben", "ann", "ben"],
    );
    assert.equal(peer.exchanges.length, 2, "one exchange per user (single flight)");
    // A subject name of one user with another user's token is that user's own cache entry:
    // the key is the authenticated subject, never chosen by the caller.
    assert.equal(exchanged.size, 2);
  });

  it("dropped on revocation, and never kept past the user's own token", async () => {
    let now = Date.now();
    executor = build({ now: () => now });
    const dana = { ...(await userToken("dana")), expiresAt: now + 40_000 };
    assert.equal((await callApi(exchangeProfile(), "dana", dana)).status, 200);
    assert.equal(exchanged.drop(keyOf("dana", "items-obo")), 1);
    assert.equal((await callApi(exchangeProfile(), "dana", dana)).status, 200);
    assert.equal(peer.exchanges.length, 2, "exchanged again after the drop");
    now += 25_000; // within 30 s of the user's token expiry: renewed, not reused
    assert.equal((await callApi(exchangeProfile(), "dana", dana)).status, 200);
    assert.equal(peer.exchanges.length, 3);
    now += 20_000; // the user's token has expired
    const error = await rejection(callApi(exchangeProfile(), "dana", dana));
    assert.equal(error.details?.issue, "user_token_expired");
    assert.equal(peer.exchanges.length, 3);
  });

  it("a user token the provider does not accept, or none at all, is refused before the upstream", async () => {
    const forged = { value: `${(await userToken("eve")).value.slice(0, -4)}AAAA` };
    const error = await rejection(callApi(exchangeProfile(), "eve", forged));
    assert.equal(error.code, "upstream_unavailable");
    assert.equal(error.details?.oauth_error, "invalid_grant");
    const none = await rejection(callApi(exchangeProfile(), "eve"));
    assert.equal(none.details?.issue, "user_token_missing");
    assert.equal(api.requests.length, 0);
  });
});

describe("attack: a token endpoint answering deep JSON or huge bodies", () => {
  it("is refused with a clear reason, nothing is sent upstream, the process stays up", async () => {
    const answers = [
      "[".repeat(200_000) + "]".repeat(200_000),
      `{"access_token":"${"a".repeat(200)}","token_type":"Bearer","x":${"[".repeat(5000)}${"]".repeat(5000)}}`,
      `{"access_token":"${"b".repeat(2 * 1024 * 1024)}","token_type":"Bearer"}`,
    ];
    let answer = "";
    const hostile = await startServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(answer);
    });
    try {
      const egress = egressAllowing([hostile.origin, api.url]);
      const hostileExecutor = testExecutor({
        secretResolver: secrets.resolve,
        tokenSetStore: tokens.tokenSetStore,
        constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
        egress,
      });
      const token = await userToken("mallory");
      for (const body of answers) {
        answer = body;
        const error = await rejection(
          executeOnce(hostileExecutor, {
            snapshot: itemSnapshot(api.url, { upstream_url_template: `${api.url}/items/{id}` }),
            args: { path: { id: "a" } },
            authProfile: exchangeProfile({ tokenUrl: `${hostile.origin}/token` }),
            partnerId: PARTNER,
            endUser: { partnerId: PARTNER, subjectId: "mallory", ...{ token } },
          }),
        );
        assert.equal(error.code, "upstream_unavailable");
        assert.match(String(error.details?.issue), /^token_(response_invalid|endpoint_unreachable)$/);
        const code = await rejection(
          hostileExecutor.oauthUser.exchangeCode({
            profile: { ...profileOf(), tokenUrl: `${hostile.origin}/token` },
            code: "some-code",
            codeVerifier: "v".repeat(43),
            redirectUri: REDIRECT_URI,
            tokenSetKey: keyOf("mallory"),
          }),
        );
        assert.equal(code.code, "upstream_unavailable");
      }
      assert.equal(api.requests.length, 0);
      assert.equal(await tokens.tokenSetStore.get(keyOf("mallory")), undefined);
    } finally {
      await hostile.close();
    }
  });
});
