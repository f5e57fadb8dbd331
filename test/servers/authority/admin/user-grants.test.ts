/**
 * User grants through the admin API against a real OpenID provider (oidc-provider): start,
 * sign-in, complete, status, refresh, disconnect; then an MCP call made with the user's own
 * grant, and one with an exchanged token (RFC 8693). The attack tests come first: state replay
 * and forgery, a state of user A completed for user B or by another principal, a code of
 * another profile, an open redirect.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { collections, logs } from "../../../../src/store/model.ts";
import { egressAllowing } from "../../../helpers/egress.ts";
import { containsJwt } from "../../../helpers/jwt-shape.ts";
import {
  CLIENTS,
  type ItemsApi,
  type OidcPeer,
  REDIRECT_URI,
  RESOURCE,
  RESOURCE_SCOPE,
  startItemsApi,
  startOidcPeer,
} from "../../../helpers/oidc-peer.ts";
import { cast, type Harness, startHarness } from "./harness.ts";

const base = "/partners/acme/caab/auth-profiles";
const grantPath = (profile: string, subject: string) => `${base}/${profile}/grants/${subject}`;

describe("admin API: user grants (oauth_user) against oidc-provider", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;
  let peer: OidcPeer;
  let api: ItemsApi;

  const userProfile = (overrides: Record<string, unknown> = {}) => ({
    type: "oauth_user",
    authorization_url: peer.authorizationUrl,
    token_url: peer.tokenUrl,
    revocation_url: peer.revocationUrl,
    client_id: CLIENTS.web.id,
    client_secret: CLIENTS.web.secret,
    scopes: ["openid", "offline_access", RESOURCE_SCOPE],
    redirect_uri: REDIRECT_URI,
    ...overrides,
  });

  const start = (profile: string, subject: string, token = t.acmeAdmin, body: unknown = {}) =>
    h.call("POST", `${grantPath(profile, subject)}/start`, { token, body });
  const complete = (profile: string, subject: string, body: unknown, token = t.acmeAdmin) =>
    h.call("POST", `${grantPath(profile, subject)}/complete`, { token, body });

  /** Start, sign in at the provider as `account`: the callback's code and state. */
  async function authorize(profile: string, subject: string, account = subject) {
    const started = await start(profile, subject);
    assert.equal(started.status, 201, started.text);
    const callback = await peer.signIn(started.body.authorization_url, account);
    return {
      state: String(callback.searchParams.get("state")),
      code: String(callback.searchParams.get("code")),
      started,
    };
  }

  async function userGrantAudit(): Promise<Array<Record<string, unknown>>> {
    const entries = await h.store.readLog<Record<string, unknown>>(logs.audit, { limit: 1000 });
    return entries.map((entry) => entry.value).filter((value) => value.kind === "user_grant");
  }

  /** Imports the items API as `capability` with this auth profile and assigns it to the subjects. */
  async function importItems(capability: string, profile: string, subjects: readonly string[]) {
    const imported = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: t.acmeAdmin,
      body: {
        capability_id: capability,
        name: "Items",
        auth_profile_ref: profile,
        document: {
          openapi: "3.1.0",
          info: { title: "Items", version: "1.0.0" },
          servers: [{ url: api.url }],
          paths: {
            "/items/{id}": {
              parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }],
              get: { operationId: "getItem", responses: { "200": { description: "ok" } } },
            },
          },
        },
      },
    });
    assert.equal(imported.status, 201, imported.text);
    for (const subject of subjects) {
      const assigned = await h.call("PUT", `/partners/acme/caab/subjects/${subject}/policies/${capability}`, {
        token: t.acmeAdmin,
        body: { allowed_permission_ids: [`${capability}:get:/items/{id}`], ttl_seconds: 3600 },
      });
      assert.ok(assigned.status === 200 || assigned.status === 201, assigned.text);
    }
  }

  /** The subject's one tool, called over MCP with its own bearer token. */
  async function callAs(subject: string) {
    const token = await h.token(["agent"], "acme", subject);
    const client = new Client({ name: "user-grants-test", version: "1.0.0" });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      }),
    );
    try {
      const tools = await client.listTools();
      const tool = tools.tools[0];
      assert.ok(tool !== undefined);
      return { token, result: await client.callTool({ name: tool.name, arguments: { path: { id: "a" } } }) };
    } finally {
      await client.close();
    }
  }

  before(async () => {
    peer = await startOidcPeer();
    api = await startItemsApi(peer);
    h = await startHarness({ egress: egressAllowing([peer.origin, api.url]) });
    t = await cast(h);
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "acme", name: "Acme" } });
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "globex", name: "Globex" } });
    for (const subject of ["alice", "bob", "carol", "dave", "erin"]) {
      const r = await h.call("POST", "/partners/acme/users", {
        token: t.acmeAdmin,
        body: { subject_id: subject, subject_type: "agent", display_name: subject },
      });
      assert.equal(r.status, 201, r.text);
    }
    const put = await h.call("PUT", `${base}/items-user`, { token: t.acmeAdmin, body: userProfile() });
    assert.equal(put.status, 201, put.text);
    assert.equal(put.body.secret_present, true);
    assert.equal(put.body.redirect_uri, REDIRECT_URI);
    assert.ok(!put.text.includes(CLIENTS.web.secret));
    const other = await h.call("PUT", `${base}/other-user`, {
      token: t.acmeAdmin,
      body: userProfile({ client_id: CLIENTS.other.id, client_secret: CLIENTS.other.secret }),
    });
    assert.equal(other.status, 201, other.text);
  });
  after(async () => {
    await h.close();
    await api.close();
    await peer.close();
  });

  describe("attacks", () => {
    it("state replay: a completed state is used up", async () => {
      const { state, code } = await authorize("items-user", "carol");
      assert.equal((await complete("items-user", "carol", { state, code })).status, 200);
      const replay = await complete("items-user", "carol", { state, code });
      assert.equal(replay.status, 400, replay.text);
      assert.equal(replay.body.error, "oauth_state_invalid");
      assert.equal(replay.body.details.issue, "state_unknown");
    });

    it("state forgery: an unknown or malformed state completes nothing", async () => {
      for (const state of [
        randomBytes(32).toString("base64url"),
        "short",
        "A".repeat(43).replace(/A$/, "="),
      ]) {
        const r = await complete("items-user", "dave", { state, code: "anything" });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.body.error, "oauth_state_invalid");
      }
      const status = await h.call("GET", grantPath("items-user", "dave"), { token: t.auditor });
      assert.equal(status.body.connected, false);
    });

    it("a state bound to user A, completed for user B, connects nobody and is used up", async () => {
      const { state, code } = await authorize("items-user", "alice");
      const stolen = await complete("items-user", "bob", { state, code });
      assert.equal(stolen.status, 400, stolen.text);
      assert.equal(stolen.body.error, "oauth_state_invalid");
      assert.equal(stolen.body.details.issue, "state_for_another_grant");
      for (const subject of ["alice", "bob"]) {
        const status = await h.call("GET", grantPath("items-user", subject), { token: t.auditor });
        assert.equal(status.body.connected, false, subject);
      }
      const late = await complete("items-user", "alice", { state, code });
      assert.equal(late.body.error, "oauth_state_invalid", "single use, even after a refused attempt");
    });

    it("a state started by one principal cannot be completed by another, nor by another partner", async () => {
      const first = await authorize("items-user", "erin");
      const byOther = await complete("items-user", "erin", { state: first.state, code: first.code }, t.admin);
      assert.equal(byOther.status, 400, byOther.text);
      assert.equal(byOther.body.details.issue, "state_for_another_principal");
      const second = await authorize("items-user", "erin");
      const foreign = await complete(
        "items-user",
        "erin",
        { state: second.state, code: second.code },
        t.globexAdmin,
      );
      assert.equal(foreign.status, 403);
      assert.equal((await start("items-user", "erin", t.globexAdmin)).status, 403);
      assert.equal((await start("items-user", "erin", t.auditor)).status, 403);
    });

    it("a code issued for another profile's client is refused by the provider; nothing is stored", async () => {
      const foreign = await authorize("other-user", "dave");
      const mine = await start("items-user", "dave");
      const r = await complete("items-user", "dave", { state: mine.body.state, code: foreign.code });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.body.error, "invalid_request");
      assert.equal(r.body.details.oauth_error, "invalid_grant");
      const status = await h.call("GET", grantPath("items-user", "dave"), { token: t.auditor });
      assert.equal(status.body.connected, false);
      const crossed = await complete("items-user", "dave", { state: foreign.state, code: foreign.code });
      assert.equal(crossed.body.error, "oauth_state_invalid", "a state of another profile");
    });

    it("open redirect: no request chooses where the provider sends the user", async () => {
      const asked = await start("items-user", "dave", t.acmeAdmin, {
        redirect_uri: "https://evil.example/cb",
      });
      assert.equal(asked.status, 400, asked.text);
      for (const redirect of [
        "https://evil.example/cb#frag",
        "http://evil.example/cb",
        "https://user:pw@app.example.com/cb",
        "javascript:alert(1)",
        "/relative/cb",
      ]) {
        const r = await h.call("PUT", `${base}/bad-redirect`, {
          token: t.acmeAdmin,
          body: userProfile({ redirect_uri: redirect }),
        });
        assert.equal(r.status, 400, redirect);
        assert.match(r.text, /redirect_uri/);
      }
      const complete2 = await h.call("POST", `${grantPath("items-user", "dave")}/complete`, {
        token: t.acmeAdmin,
        body: { state: "x".repeat(43), code: "c", redirect_uri: "https://evil.example/cb" },
      });
      assert.equal(complete2.status, 400);
      const started = await start("items-user", "dave");
      const url = new URL(started.body.authorization_url);
      assert.equal(url.searchParams.get("redirect_uri"), REDIRECT_URI);
    });

    it("an expired state completes nothing", async () => {
      const { state, code } = await authorize("items-user", "dave");
      h.clock.offsetMs = 11 * 60 * 1000;
      try {
        const r = await complete("items-user", "dave", { state, code });
        assert.equal(r.status, 400);
        assert.equal(r.body.details.issue, "state_expired");
      } finally {
        h.clock.offsetMs = 0;
      }
    });
  });

  it("connects a user: the answer holds the URL only, status never a token, the set is sealed, all audited", async () => {
    const started = await start("items-user", "alice");
    assert.equal(started.status, 201, started.text);
    assert.deepEqual(Object.keys(started.body).sort(), ["authorization_url", "expires_at", "state"]);
    const url = new URL(started.body.authorization_url);
    assert.equal(`${url.origin}${url.pathname}`, peer.authorizationUrl);
    assert.equal(url.searchParams.get("code_challenge_method"), "S256");
    assert.equal(url.searchParams.get("state"), started.body.state);
    const callback = await peer.signIn(started.body.authorization_url, "alice");
    const done = await complete("items-user", "alice", {
      state: started.body.state,
      code: callback.searchParams.get("code"),
    });
    assert.equal(done.status, 200, done.text);
    assert.equal(done.body.connected, true);
    assert.equal(done.body.has_refresh_token, true);
    assert.equal(done.body.subject_id, "alice");
    const status = await h.call("GET", grantPath("items-user", "alice"), { token: t.auditor });
    assert.equal(status.status, 200);
    assert.equal(status.body.connected, true);
    for (const text of [done.text, status.text, started.text])
      assert.ok(!containsJwt(text), "no token shown");
    const raw = JSON.stringify(await h.store.get(collections.userTokenSets, "acme/items-user/alice"));
    assert.ok(raw.includes("sealed") && !containsJwt(raw), "sealed at rest");

    const refreshed = await h.call("POST", `${grantPath("items-user", "alice")}/refresh`, {
      token: t.acmeAdmin,
      body: {},
    });
    assert.equal(refreshed.status, 200, refreshed.text);
    assert.ok(peer.grants.includes("refresh_token"));

    const actions = (await userGrantAudit())
      .filter((record) => record.subject_id === "alice")
      .map((record) => record.action);
    assert.deepEqual(actions.slice(-3), ["start", "complete", "refresh"]);
    assert.ok(!containsJwt(JSON.stringify(await userGrantAudit())), "no token in the audit log");
  });

  it("an MCP call runs with the authenticated user's grant; a user who never connected is told to connect", async () => {
    await importItems("items", "items-user", ["alice", "bob"]);
    const alice = await callAs("alice");
    const aliceText = JSON.stringify(alice.result);
    assert.equal(alice.result.isError ?? false, false, aliceText);
    assert.match(aliceText, /\\"sub\\":\\"alice\\"|"sub":"alice"/);
    const sent = api.requests.at(-1)?.authorization ?? "";
    assert.ok(!sent.includes(alice.token), "the caller's own token is never forwarded");

    const bob = await callAs("bob");
    const bobText = JSON.stringify(bob.result);
    assert.equal(bob.result.isError, true, bobText);
    assert.match(bobText, /user_grant_required/);
    assert.match(bobText, /connect first/);
  });

  it("a sidecar is never handed a user-delegated profile", async () => {
    const sidecar = await h.token(["sidecar", "sidecar_platform"], undefined, "pod-sidecar");
    const r = await h.call("GET", "/v1/sidecar/auth-profiles/acme/items-user", { token: sidecar });
    assert.equal(r.status, 409, r.text);
    assert.equal(r.body.details.issue, "user_delegated_profile");
    assert.ok(!containsJwt(r.text));
  });

  it("disconnect forgets the grant, revokes it at the provider, and is audited", async () => {
    const r = await h.call("DELETE", grantPath("items-user", "alice"), { token: t.acmeAdmin });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.revocation, "revoked");
    assert.equal(r.body.grant.connected, false);
    const status = await h.call("GET", grantPath("items-user", "alice"), { token: t.auditor });
    assert.equal(status.body.connected, false);
    const refresh = await h.call("POST", `${grantPath("items-user", "alice")}/refresh`, {
      token: t.acmeAdmin,
      body: {},
    });
    assert.equal(refresh.status, 403);
    assert.equal(refresh.body.error, "user_grant_required");
    const last = (await userGrantAudit()).at(-1);
    assert.equal(last?.action, "disconnect");
    assert.equal(last?.outcome, "revocation:revoked");
  });

  it("stores token-exchange and public-client profiles; grant actions need a user OAuth profile", async () => {
    const exchange = await h.call("PUT", `${base}/items-obo`, {
      token: t.acmeAdmin,
      body: {
        type: "oauth_token_exchange",
        token_url: peer.tokenUrl,
        client_id: CLIENTS.web.id,
        client_secret: CLIENTS.web.secret,
        scopes: [RESOURCE_SCOPE],
        resource: RESOURCE,
        subject_token_type: "jwt",
      },
    });
    assert.equal(exchange.status, 201, exchange.text);
    assert.equal(exchange.body.subject_token_type, "jwt");
    const spa = await h.call("PUT", `${base}/items-spa`, {
      token: t.acmeAdmin,
      body: userProfile({ client_id: CLIENTS.spa.id, client_secret: undefined }),
    });
    assert.equal(spa.status, 201, spa.text);
    assert.equal(spa.body.secret_present, false);
    const badResource = await h.call("PUT", `${base}/items-obo`, {
      token: t.acmeAdmin,
      body: { type: "oauth_token_exchange", token_url: peer.tokenUrl, client_id: "c", resource: "not a uri" },
    });
    assert.equal(badResource.status, 400);
    const startExchange = await start("items-obo", "alice");
    assert.equal(startExchange.status, 409);
    const dropped = await h.call("DELETE", grantPath("items-obo", "alice"), { token: t.acmeAdmin });
    assert.equal(dropped.status, 200, dropped.text);
    assert.equal(dropped.body.revocation, "not_supported");
  });

  it("token exchange: an MCP call carries the token the provider exchanged for the caller's, never the caller's own", async () => {
    const issuer = h.context.config.issuer;
    peer.trustSubjectTokens(issuer, `${issuer}/.well-known/jwks.json`);
    await importItems("items-obo-api", "items-obo", ["carol"]);
    const carol = await callAs("carol");
    const text = JSON.stringify(carol.result);
    assert.equal(carol.result.isError ?? false, false, text);
    assert.match(text, /\\"sub\\":\\"carol\\"/);
    assert.equal(peer.exchanges.at(-1)?.sub, "carol");
    assert.equal(peer.exchanges.at(-1)?.resource, RESOURCE);
    const sent = api.requests.at(-1)?.authorization ?? "";
    assert.ok(
      sent.startsWith("Bearer ") && !sent.includes(carol.token),
      "the caller's token is not forwarded",
    );
  });

  it("a profile moved to another client or provider voids its users' grants", async () => {
    const { state, code } = await authorize("items-user", "bob");
    assert.equal((await complete("items-user", "bob", { state, code })).status, 200);
    const kept = await h.call("PUT", `${base}/items-user`, {
      token: t.acmeAdmin,
      body: userProfile({ scopes: ["openid"] }),
    });
    assert.equal(kept.status, 200);
    assert.equal(
      (await h.call("GET", grantPath("items-user", "bob"), { token: t.auditor })).body.connected,
      true,
    );
    const moved = await h.call("PUT", `${base}/items-user`, {
      token: t.acmeAdmin,
      body: userProfile({ client_id: CLIENTS.other.id, client_secret: CLIENTS.other.secret }),
    });
    assert.equal(moved.status, 200);
    assert.equal(
      (await h.call("GET", grantPath("items-user", "bob"), { token: t.auditor })).body.connected,
      false,
    );
  });
});
