import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { loadExecutionAuthProfile, putAuthProfile } from "../../../src/admin/auth-profiles.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import {
  clientCredentialsTokenSource,
  staticTokenSource,
} from "../../../src/servers/sidecar/service-token.ts";
import {
  AGENT,
  CAPABILITY,
  NO_POLICY_AGENT,
  PARTNER,
  PROFILE,
  startWorld,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

/** The authority service's /v1/sidecar/* routes, over real HTTP. */
describe("authority service: sidecar routes", () => {
  let world: World;

  before(async () => {
    world = await startWorld();
  });
  after(() => world.close());

  const get = async (path: string, token: string | undefined, headers: Record<string, string> = {}) => {
    const response = await fetch(`${world.authorityUrl}${path}`, {
      headers: { ...headers, ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    });
    const text = await response.text();
    return {
      status: response.status,
      headers: response.headers,
      body: text === "" ? undefined : JSON.parse(text),
    };
  };

  test("the policy record without its artifact, the signed policy and the subject's partner; ETag is the head; If-None-Match → 304", async () => {
    const reply = await get(`/v1/sidecar/policies/${AGENT}`, world.tokens.sidecar);
    assert.equal(reply.status, 200);
    assert.equal(reply.headers.get("cache-control"), "no-store");
    assert.deepEqual(reply.body.subject, {
      subject_id: AGENT,
      partner_id: PARTNER,
      identity: "platform_vouched",
    });
    assert.equal(reply.body.policy.subject_id, AGENT);
    // The encrypted artifact never reaches a sidecar; the signed blob does.
    assert.equal(reply.body.policy.artifact, undefined);
    assert.equal(typeof reply.body.signed_policy, "string");
    assert.ok(reply.body.signed_policy.length > 4000);
    const etag = reply.headers.get("etag");
    assert.equal(etag, `"${reply.body.policy.head}"`);
    const again = await get(`/v1/sidecar/policies/${AGENT}`, world.tokens.sidecar, {
      "if-none-match": etag ?? "",
    });
    assert.equal(again.status, 304);
    assert.equal(again.body, undefined);
  });

  test("404 for an unknown subject and for a subject without a policy", async () => {
    assert.equal((await get("/v1/sidecar/policies/nobody", world.tokens.sidecar)).status, 404);
    const none = await get(`/v1/sidecar/policies/${NO_POLICY_AGENT}`, world.tokens.sidecar);
    assert.equal(none.status, 404);
    assert.equal(none.body.error, "not_found");
  });

  test("the current catalog of a partner's capability", async () => {
    const reply = await get(`/v1/sidecar/capabilities/${PARTNER}/${CAPABILITY}`, world.tokens.sidecar);
    assert.equal(reply.status, 200);
    assert.equal(reply.body.capability.capability_id, CAPABILITY);
    assert.equal(reply.body.capability.partner_id, PARTNER);
    assert.ok(reply.body.capability.operations.length >= 5);
    assert.equal((await get(`/v1/sidecar/capabilities/${PARTNER}/nope`, world.tokens.sidecar)).status, 404);
  });

  test("auth-profile material: the credentials to inject, and how long they may be kept", async () => {
    const reply = await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, world.tokens.sidecar);
    assert.equal(reply.status, 200);
    assert.deepEqual(reply.body.headers, { "x-api-key": UPSTREAM_SECRET });
    assert.deepEqual(reply.body.query, {});
    assert.equal(reply.body.expires_in, 300);
    assert.equal(reply.headers.get("cache-control"), "no-store");
  });

  test("client-credentials profiles hand out an access token from the profile's token endpoint", async () => {
    await world.idp.directory.addClient({
      clientId: "orders-upstream",
      clientSecret: "upstream-client-secret",
      scopes: ["orders.read"],
    });
    await putAuthProfile(world.context, PARTNER, "orders-oauth", {
      type: "oauth_client_credentials",
      token_url: world.idp.tokenEndpoint,
      client_id: "orders-upstream",
      client_secret: "upstream-client-secret",
      scopes: ["orders.read"],
    });
    const reply = await get(`/v1/sidecar/auth-profiles/${PARTNER}/orders-oauth`, world.tokens.sidecar);
    assert.equal(reply.status, 200);
    assert.match(reply.body.headers.authorization, /^Bearer [A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    assert.equal(reply.body.expires_in, 30);
    // One token cache per process: the binding executor gets the token this route fetched,
    // without asking the token endpoint again.
    const requests = world.context.clientCredentials.requestCount;
    const profile = await loadExecutionAuthProfile(world.context, PARTNER, "orders-oauth");
    assert.equal(profile.type, "oauth_client_credentials");
    if (profile.type !== "oauth_client_credentials") return;
    const token = await world.context.bindings.executor.clientCredentials.getToken(profile);
    assert.equal(`Bearer ${token}`, reply.body.headers.authorization);
    assert.equal(world.context.clientCredentials.requestCount, requests);
  });

  test("only sidecar principals: 401 without a token, 403 for admins and agents, scope authority/sidecar works", async () => {
    const path = `/v1/sidecar/policies/${AGENT}`;
    assert.equal((await get(path, undefined)).status, 401);
    for (const token of [world.tokens.admin, world.tokens.agent]) {
      const reply = await get(path, token);
      assert.equal(reply.status, 403);
      assert.equal(reply.body.error, "insufficient_role");
    }
    const scoped = (
      await world.idp.issueToken({
        subject: "sidecar-2",
        scopes: ["authority/sidecar", "authority/sidecar.platform"],
      })
    ).accessToken;
    assert.equal((await get(path, scoped)).status, 200);
  });

  test("a sidecar token bound to a partner (claim partner_id) cannot read another partner's records", async () => {
    const globex = (
      await world.idp.issueToken({
        subject: "sidecar-g",
        roles: ["sidecar"],
        claims: { partner_id: "globex" },
      })
    ).accessToken;
    const acme = (
      await world.idp.issueToken({
        subject: "sidecar-a",
        roles: ["sidecar"],
        claims: { partner_id: PARTNER },
      })
    ).accessToken;
    assert.equal((await get(`/v1/sidecar/policies/${AGENT}`, globex)).status, 403);
    assert.equal((await get(`/v1/sidecar/capabilities/${PARTNER}/${CAPABILITY}`, globex)).status, 403);
    assert.equal((await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, globex)).status, 403);
    assert.equal((await get(`/v1/sidecar/policies/${AGENT}`, acme)).status, 200);
  });

  test("malformed path parameters are 400 before anything is read", async () => {
    const reply = await get("/v1/sidecar/capabilities/acme/bad%20id", world.tokens.sidecar);
    assert.equal(reply.status, 400);
  });

  test("the sidecar's client: conditional fetch, not found, and a fresh token after a 401", async () => {
    const client = createAuthorityClient({
      baseUrl: world.authorityUrl,
      token: staticTokenSource(world.tokens.sidecar),
    });
    const found = await client.fetchPolicy(AGENT, {});
    assert.equal(found.status, "found");
    if (found.status !== "found") return;
    assert.equal(found.partnerId, PARTNER);
    assert.deepEqual(await client.fetchPolicy(AGENT, { knownHead: found.record.head }), {
      status: "not_modified",
    });
    assert.deepEqual(await client.fetchPolicy("nobody", {}), { status: "not_found" });
    assert.equal(await client.fetchCapability(PARTNER, "nope"), undefined);

    await world.idp.directory.addClient({
      clientId: "sidecar-client",
      clientSecret: "sidecar-client-secret",
      scopes: ["authority/sidecar", "authority/sidecar.platform"],
      roles: ["sidecar"],
    });
    const source = clientCredentialsTokenSource({
      tokenUrl: world.idp.tokenEndpoint,
      clientId: "sidecar-client",
      clientSecret: "sidecar-client-secret",
    });
    const viaGrant = createAuthorityClient({ baseUrl: world.authorityUrl, token: source });
    assert.equal((await viaGrant.fetchPolicy(AGENT, {})).status, "found");
    const refused = createAuthorityClient({
      baseUrl: world.authorityUrl,
      token: staticTokenSource(world.tokens.agent),
    });
    await assert.rejects(refused.fetchPolicy(AGENT, {}), { code: "authority_unavailable", status: 403 });
  });
});
