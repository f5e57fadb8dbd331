import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import type { ClientCredentialsProfile } from "../../src/execute/auth-profiles.ts";
import { createClientCredentialsTokens } from "../../src/execute/client-credentials.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { executeOnce, testExecutor } from "../helpers/execute-once.ts";
import {
  itemSnapshot,
  openTokenStore,
  secretTable,
  sendJson,
  startServer,
  type TokenStoreFixture,
} from "./helpers.ts";
import { type OAuthServer, startOAuthServer } from "./oauth-server.ts";

const CLIENT_ID = "svc client:1";
const CLIENT_SECRET = "p@ss word/+=";

let oauth: OAuthServer;
let tokens: TokenStoreFixture;
let secrets: ReturnType<typeof secretTable>;

before(async () => {
  oauth = await startOAuthServer({ clients: { [CLIENT_ID]: CLIENT_SECRET } });
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
  oauth.tokenType = "Bearer";
  secrets = secretTable({ "ref:client-secret": CLIENT_SECRET });
});

const profile = (overrides: Partial<ClientCredentialsProfile> = {}): ClientCredentialsProfile => ({
  type: "oauth_client_credentials",
  id: "cc-1",
  tokenUrl: `${oauth.origin}/token`,
  clientId: CLIENT_ID,
  clientSecretRef: "ref:client-secret",
  scopes: ["items.read", "items.write"],
  audience: "https://api.example.com",
  ...overrides,
});

function executor() {
  return testExecutor({
    secretResolver: secrets.resolve,
    tokenSetStore: tokens.tokenSetStore,
    constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
    egress: egressAllowing([oauth.origin]),
  });
}

const apiSnapshot = () =>
  itemSnapshot(oauth.origin, { upstream_url_template: `${oauth.origin}/api/items/{id}` });

function execute(ex: ReturnType<typeof executor>, p: ClientCredentialsProfile = profile()) {
  return executeOnce(ex, {
    snapshot: apiSnapshot(),
    args: { path: { id: "a" } },
    authProfile: p,
    partnerId: "p",
  });
}

const apiRequests = () => oauth.server.requests.filter((r) => r.target.startsWith("/api/"));

async function reasonOf(promise: Promise<unknown>): Promise<ExecutionError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ExecutionError, String(error));
    return error;
  }
  assert.fail("expected an ExecutionError");
}

describe("oauth_client_credentials", () => {
  it("fetches a token with client_secret_basic, scope and audience, and injects it", async () => {
    const ex = executor();
    const result = await execute(ex);
    assert.equal(result.status, 200);
    assert.deepEqual(oauth.grants, ["client_credentials"]);
    assert.equal(oauth.lastForm?.get("scope"), "items.read items.write");
    assert.equal(oauth.lastForm?.get("audience"), "https://api.example.com");
    assert.equal(oauth.lastForm?.get("client_secret"), null);
    assert.match(oauth.lastAuthorization ?? "", /^Basic /);
    const [call] = apiRequests();
    assert.match(call?.headers.authorization ?? "", /^Bearer at-/);
  });

  it("supports client_secret_post", async () => {
    await execute(executor(), profile({ clientAuth: "client_secret_post" }));
    assert.equal(oauth.lastAuthorization, undefined);
    assert.equal(oauth.lastForm?.get("client_id"), CLIENT_ID);
    assert.equal(oauth.lastForm?.get("client_secret"), CLIENT_SECRET);
  });

  it("caches the token: later calls neither request a token nor load the secret", async () => {
    const ex = executor();
    for (let i = 0; i < 5; i++) assert.equal((await execute(ex)).status, 200);
    assert.deepEqual(oauth.grants, ["client_credentials"]);
    assert.deepEqual(secrets.calls, ["ref:client-secret"]);
    assert.equal(ex.clientCredentials.requestCount, 1);
  });

  it("single-flight: N concurrent executions make one token request", async () => {
    oauth.tokenDelayMs = 50;
    const ex = executor();
    const results = await Promise.all(Array.from({ length: 12 }, () => execute(ex)));
    assert.ok(results.every((r) => r.status === 200));
    assert.deepEqual(oauth.grants, ["client_credentials"]);
    const presented = new Set(apiRequests().map((r) => r.headers.authorization));
    assert.equal(presented.size, 1);
  });

  it("a 401 from the upstream invalidates the cached token once and retries once", async () => {
    const ex = executor();
    await execute(ex);
    oauth.validAccess.clear();
    oauth.server.requests.length = 0;
    oauth.grants.length = 0;
    oauth.tokenDelayMs = 30;
    const results = await Promise.all(Array.from({ length: 6 }, () => execute(ex)));
    assert.ok(results.every((r) => r.status === 200));
    assert.deepEqual(oauth.grants, ["client_credentials"], "one renewal for all concurrent 401s");
    assert.equal(apiRequests().length, 12);
  });

  it("an upstream that keeps answering 401 gets one retry, then the 401 is the result", async () => {
    const ex = executor();
    await execute(ex);
    oauth.server.requests.length = 0;
    oauth.grants.length = 0;
    const denying = itemSnapshot(oauth.origin, { upstream_url_template: `${oauth.origin}/api/deny/{id}` });
    const result = await executeOnce(ex, {
      snapshot: denying,
      args: { path: { id: "a" } },
      authProfile: profile(),
      partnerId: "p",
    });
    assert.equal(result.status, 401);
    assert.deepEqual(result.upstreamError, { kind: "http_error", status: 401 });
    assert.equal(apiRequests().length, 2);
    assert.deepEqual(oauth.grants, ["client_credentials"]);
  });

  it("renews a token shortly before it expires", async () => {
    let clock = 1_000_000;
    const cc = createClientCredentialsTokens({
      fetch: globalThis.fetch,
      secretResolver: secrets.resolve,
      now: () => clock,
    });
    oauth.expiresIn = 120;
    const first = await cc.getToken(profile());
    clock += 80_000;
    assert.equal(await cc.getToken(profile()), first, "still fresh 40 s before expiry");
    clock += 11_000;
    const second = await cc.getToken(profile());
    assert.notEqual(second, first, "renewed within the 30 s skew");
    assert.equal(cc.requestCount, 2);
    assert.notEqual(
      await cc.getToken(profile({ scopes: ["other"] })),
      second,
      "other scopes are another token",
    );
  });

  it("token endpoint refusals and bad answers are auth_profile_unavailable without their text", async () => {
    oauth.refuseWith = { status: 400, error: "invalid_client" };
    const refused = await reasonOf(execute(executor()));
    assert.equal(refused.reason, "auth_profile_unavailable");
    assert.equal(refused.details?.oauth_error, "invalid_client");
    assert.ok(!JSON.stringify(refused.toJSON()).includes("upstream-internal-detail-xyz"));
    assert.equal(apiRequests().length, 0);

    oauth.refuseWith = undefined;
    oauth.tokenType = "DPoP";
    assert.equal((await reasonOf(execute(executor()))).details?.issue, "token_type_unsupported");

    oauth.tokenType = "Bearer";
    const wrongSecret = secretTable({ "ref:client-secret": "wrong" });
    const ex = testExecutor({
      secretResolver: wrongSecret.resolve,
      tokenSetStore: tokens.tokenSetStore,
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      egress: egressAllowing([oauth.origin]),
    });
    assert.equal((await reasonOf(execute(ex))).reason, "auth_profile_unavailable");
    assert.equal(apiRequests().length, 0);
  });

  it("a token endpoint that hangs is auth_profile_unavailable after the token deadline", async () => {
    oauth.tokenDelayMs = 1_000;
    const ex = testExecutor({
      secretResolver: secrets.resolve,
      tokenSetStore: tokens.tokenSetStore,
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      egress: egressAllowing([oauth.origin]),
      tokenTimeoutMs: 100,
    });
    const error = await reasonOf(execute(ex));
    assert.equal(error.reason, "auth_profile_unavailable");
    assert.equal(error.details?.issue, "token_endpoint_unreachable");
  });

  it("hostile token endpoints: an oversized answer, a redirect, a 200 without token_type are refused", async () => {
    const hostile = await startServer();
    let mode: "huge" | "redirect" | "untyped" = "huge";
    let followed = 0;
    hostile.setHandler((req, res) => {
      if (req.target === "/elsewhere") {
        followed++;
        return sendJson(res, 200, { access_token: "at-elsewhere", token_type: "Bearer" });
      }
      if (mode === "huge")
        return sendJson(res, 200, { access_token: "a".repeat(70 * 1024), token_type: "Bearer" });
      if (mode === "redirect") {
        res.writeHead(307, { location: `${hostile.origin}/elsewhere` });
        res.end();
        return;
      }
      return sendJson(res, 200, { access_token: "at-untyped", expires_in: 60 });
    });
    try {
      const cc = createClientCredentialsTokens({ fetch: globalThis.fetch, secretResolver: secrets.resolve });
      const hostileProfile = profile({ tokenUrl: `${hostile.origin}/token` });
      const huge = await reasonOf(cc.getToken(hostileProfile));
      assert.equal(
        huge.details?.issue,
        "token_endpoint_unreachable",
        "a 70 KiB answer is over the 64 KiB bound",
      );
      mode = "redirect";
      const redirected = await reasonOf(cc.getToken(hostileProfile));
      assert.equal(redirected.details?.issue, "token_endpoint_refused");
      assert.equal(followed, 0, "the redirect is not followed");
      mode = "untyped";
      assert.equal((await reasonOf(cc.getToken(hostileProfile))).details?.issue, "token_response_invalid");
    } finally {
      await hostile.close();
    }
  });
});
