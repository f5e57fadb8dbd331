import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, beforeEach, describe, it } from "node:test";
import type { OAuthUserProfile } from "../../src/execute/auth-profiles.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import type { Executor } from "../../src/execute/executor.ts";
import { codeChallengeS256, createCodeVerifier } from "../../src/execute/oauth-user.ts";
import { DEFAULT_TOKEN_SET_COLLECTION, userGrantKey } from "../../src/execute/token-set-store.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { executeOnce, testExecutor } from "../helpers/execute-once.ts";
import { itemSnapshot, openTokenStore, secretTable, type TokenStoreFixture } from "./helpers.ts";
import { type OAuthServer, startOAuthServer } from "./oauth-server.ts";

const PUBLIC_CLIENT = "spa-client";
const CONFIDENTIAL_CLIENT = "web-client";
const CONFIDENTIAL_SECRET = "web-secret-value";
const REDIRECT_URI = "https://app.example.com/oauth/callback";

let oauth: OAuthServer;
let tokens: TokenStoreFixture;
let secrets: ReturnType<typeof secretTable>;
let executor: Executor;

before(async () => {
  oauth = await startOAuthServer({
    clients: { [PUBLIC_CLIENT]: null, [CONFIDENTIAL_CLIENT]: CONFIDENTIAL_SECRET },
  });
  tokens = await openTokenStore();
});
after(async () => {
  await oauth.close();
  await tokens.close();
});
beforeEach(() => {
  oauth.grants.length = 0;
  oauth.server.requests.length = 0;
  oauth.expiresIn = 3600;
  oauth.tokenDelayMs = 0;
  oauth.refuseWith = undefined;
  secrets = secretTable({ "ref:web-secret": CONFIDENTIAL_SECRET });
  executor = testExecutor({
    secretResolver: secrets.resolve,
    tokenSetStore: tokens.tokenSetStore,
    constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
    egress: egressAllowing([oauth.origin]),
  });
});

const profile = (overrides: Partial<OAuthUserProfile> = {}): OAuthUserProfile => ({
  type: "oauth_user",
  id: "user-oauth-1",
  authorizationUrl: `${oauth.origin}/authorize`,
  tokenUrl: `${oauth.origin}/token`,
  clientId: PUBLIC_CLIENT,
  scopes: ["openid", "items.read"],
  ...overrides,
});

const newSubject = () => `user-${randomBytes(6).toString("hex")}`;
const keyOf = (subjectId: string, p: OAuthUserProfile = profile()) => userGrantKey("p", p.id, subjectId);
const newState = () => randomBytes(16).toString("base64url");

/** Runs the browser's part: follows the authorization URL to the redirect and reads code and state. */
async function authorize(p: OAuthUserProfile, state = newState()) {
  const started = executor.oauthUser.startAuthorization({ profile: p, redirectUri: REDIRECT_URI, state });
  const answer = await fetch(started.authorizationUrl, { redirect: "manual" });
  assert.equal(answer.status, 302);
  const back = new URL(answer.headers.get("location") ?? "");
  assert.equal(`${back.origin}${back.pathname}`, REDIRECT_URI);
  assert.equal(back.searchParams.get("state"), state);
  return { code: back.searchParams.get("code") ?? "", codeVerifier: started.codeVerifier, started };
}

async function connect(p: OAuthUserProfile = profile()): Promise<string> {
  const subject = newSubject();
  const key = keyOf(subject, p);
  const { code, codeVerifier } = await authorize(p);
  await executor.oauthUser.exchangeCode({
    profile: p,
    code,
    codeVerifier,
    redirectUri: REDIRECT_URI,
    tokenSetKey: key,
  });
  return subject;
}

function callApi(p: OAuthUserProfile, subject: string | undefined) {
  return executeOnce(executor, {
    snapshot: itemSnapshot(oauth.origin, { upstream_url_template: `${oauth.origin}/api/items/{id}` }),
    args: { path: { id: "a" } },
    authProfile: p,
    partnerId: "p",
    ...(subject === undefined ? {} : { endUser: { partnerId: "p", subjectId: subject } }),
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

describe("PKCE (RFC 7636)", () => {
  it("derives the S256 challenge of the RFC's test vector", () => {
    assert.equal(
      codeChallengeS256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
      "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    );
    const verifier = createCodeVerifier();
    assert.match(verifier, /^[A-Za-z0-9_-]{43}$/);
    assert.notEqual(createCodeVerifier(), verifier);
  });

  it("builds the authorization URL with S256, state, scope and redirect", () => {
    const state = newState();
    const { authorizationUrl, codeVerifier } = executor.oauthUser.startAuthorization({
      profile: profile(),
      redirectUri: REDIRECT_URI,
      state,
    });
    const url = new URL(authorizationUrl);
    assert.equal(`${url.origin}${url.pathname}`, `${oauth.origin}/authorize`);
    assert.equal(url.searchParams.get("response_type"), "code");
    assert.equal(url.searchParams.get("client_id"), PUBLIC_CLIENT);
    assert.equal(url.searchParams.get("redirect_uri"), REDIRECT_URI);
    assert.equal(url.searchParams.get("scope"), "openid items.read");
    assert.equal(url.searchParams.get("state"), state);
    assert.equal(url.searchParams.get("code_challenge_method"), "S256");
    assert.equal(url.searchParams.get("code_challenge"), codeChallengeS256(codeVerifier));
    assert.ok(!authorizationUrl.includes(codeVerifier));
    assert.throws(() =>
      executor.oauthUser.startAuthorization({
        profile: profile(),
        redirectUri: REDIRECT_URI,
        state: "short",
      }),
    );
  });
});

describe("oauth_user", () => {
  it("public client: code + verifier exchange stores the token set in the Store, and execute uses it", async () => {
    const subject = newSubject();
    const key = keyOf(subject);
    const { code, codeVerifier } = await authorize(profile());
    const info = await executor.oauthUser.exchangeCode({
      profile: profile(),
      code,
      codeVerifier,
      redirectUri: REDIRECT_URI,
      tokenSetKey: key,
    });
    assert.equal(info.hasRefreshToken, true);
    assert.equal(info.scope, "openid items.read");
    assert.ok(!JSON.stringify(info).includes("at-"), "no token in what is returned");
    assert.equal(oauth.lastForm?.get("client_id"), PUBLIC_CLIENT);
    assert.equal(oauth.lastForm?.get("code_verifier"), codeVerifier);
    const stored = await tokens.store.get<{ accessToken: string }>(DEFAULT_TOKEN_SET_COLLECTION, key);
    assert.ok(stored !== undefined && oauth.validAccess.has(stored.accessToken));

    const result = await callApi(profile(), subject);
    assert.equal(result.status, 200);
    const apiCall = oauth.server.requests.find((r) => r.target === "/api/items/a");
    assert.equal(apiCall?.headers.authorization, `Bearer ${stored.accessToken}`);
  });

  it("confidential client: the secret is sent with client_secret_basic", async () => {
    const p = profile({ clientId: CONFIDENTIAL_CLIENT, clientSecretRef: "ref:web-secret" });
    const key = await connect(p);
    assert.match(oauth.lastAuthorization ?? "", /^Basic /);
    assert.equal((await callApi(p, key)).status, 200);
  });

  it("a wrong verifier is refused by the server and nothing is stored", async () => {
    const key = keyOf(newSubject());
    const { code } = await authorize(profile());
    const error = await rejection(
      executor.oauthUser.exchangeCode({
        profile: profile(),
        code,
        codeVerifier: createCodeVerifier(),
        redirectUri: REDIRECT_URI,
        tokenSetKey: key,
      }),
    );
    assert.equal(error.reason, "auth_profile_unavailable");
    assert.equal(error.details?.oauth_error, "invalid_grant");
    assert.equal(await tokens.tokenSetStore.get(key), undefined);
  });

  it("refreshes an access token that is about to expire, keeping the rotated refresh token", async () => {
    oauth.expiresIn = 10;
    const key = await connect();
    const before = await tokens.tokenSetStore.get(keyOf(key));
    oauth.expiresIn = 3600;
    oauth.grants.length = 0;
    assert.equal((await callApi(profile(), key)).status, 200);
    assert.deepEqual(oauth.grants, ["refresh_token"]);
    const after = await tokens.tokenSetStore.get(keyOf(key));
    assert.notEqual(after?.accessToken, before?.accessToken);
    assert.notEqual(after?.refreshToken, before?.refreshToken);
    assert.equal((await callApi(profile(), key)).status, 200);
    assert.deepEqual(oauth.grants, ["refresh_token"], "fresh token is reused");
  });

  it("concurrent executions share one refresh (rotating refresh tokens work once)", async () => {
    oauth.expiresIn = 10;
    const key = await connect();
    oauth.expiresIn = 3600;
    oauth.tokenDelayMs = 50;
    oauth.grants.length = 0;
    const results = await Promise.all(Array.from({ length: 8 }, () => callApi(profile(), key)));
    assert.ok(results.every((r) => r.status === 200));
    assert.deepEqual(oauth.grants, ["refresh_token"]);
  });

  it("a 401 from the upstream triggers one refresh and one retry", async () => {
    const key = await connect();
    oauth.validAccess.clear();
    oauth.grants.length = 0;
    assert.equal((await callApi(profile(), key)).status, 200);
    assert.deepEqual(oauth.grants, ["refresh_token"]);
  });

  it("a refused refresh forgets the grant; the user must connect again", async () => {
    oauth.expiresIn = 10;
    const key = await connect();
    oauth.refuseWith = { status: 400, error: "invalid_grant" };
    const error = await rejection(callApi(profile(), key));
    assert.equal(error.reason, "user_grant_required");
    assert.equal(error.code, "user_grant_required");
    assert.equal(error.details?.oauth_error, "invalid_grant");
    assert.equal(await tokens.tokenSetStore.get(keyOf(key)), undefined);
    oauth.refuseWith = undefined;
    const again = await rejection(callApi(profile(), key));
    assert.equal(again.details?.issue, "user_grant_missing");
  });

  it("without an end user, or with one who never connected, execution fails before any request", async () => {
    assert.equal((await rejection(callApi(profile(), undefined))).details?.issue, "end_user_unknown");
    assert.equal((await rejection(callApi(profile(), "user-unknown"))).details?.issue, "user_grant_missing");
    assert.equal(oauth.server.requests.length, 0);
  });

  it("disconnect forgets the grant", async () => {
    const key = await connect();
    assert.equal(
      await executor.oauthUser.disconnect({ profile: profile(), tokenSetKey: keyOf(key) }),
      "not_supported",
    );
    assert.equal(await tokens.tokenSetStore.get(keyOf(key)), undefined);
  });
});
