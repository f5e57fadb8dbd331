/**
 * Binding invoke acting for the end user (oidc-provider as the OAuth provider): the derived
 * subject's own grant (oauth_user), and a token exchanged for the partner's verified user
 * assertion (RFC 8693). The user assertion itself never reaches the upstream.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
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
import { BINDING, type BindingsHarness, startBindingsHarness } from "./harness.ts";

describe("binding invoke with user-delegated auth profiles", () => {
  let h: BindingsHarness;
  let peer: OidcPeer;
  let api: ItemsApi;
  let other: string;

  async function importItems(capability: string, profile: string, subjects: readonly string[]) {
    // Assignments take the binding's profile (later ones): this binding's users call with `profile`.
    const bound = await h.call("PUT", `/v1/bindings/${BINDING}/auth-profiles`, {
      token: h.admin,
      body: { auth_profile_ref: profile },
    });
    assert.equal(bound.status, 200, JSON.stringify(bound.body));
    const imported = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: h.admin,
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
    assert.equal(imported.status, 201, JSON.stringify(imported.body));
    for (const subject of subjects) {
      const assigned = await h.call("POST", `/v1/bindings/${BINDING}/apis`, {
        token: h.admin,
        body: {
          subject_id: subject,
          capability_id: capability,
          allowed_permission_ids: [`${capability}:get:/items/{id}`],
          ttl_seconds: 3600,
        },
      });
      assert.equal(assigned.status, 200, JSON.stringify(assigned.body));
    }
  }

  before(async () => {
    peer = await startOidcPeer();
    api = await startItemsApi(peer);
    h = await startBindingsHarness({ egressAllow: [peer.origin, api.url] });
    other = await h.mapUser("user-456");
    const put = await h.call("PUT", "/partners/acme/caab/auth-profiles/items-user", {
      token: h.admin,
      body: {
        type: "oauth_user",
        authorization_url: peer.authorizationUrl,
        token_url: peer.tokenUrl,
        revocation_url: peer.revocationUrl,
        client_id: CLIENTS.web.id,
        client_secret: CLIENTS.web.secret,
        scopes: ["openid", "offline_access", RESOURCE_SCOPE],
        redirect_uri: REDIRECT_URI,
      },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    await importItems("items", "items-user", [h.subjectId, other]);
  });
  after(async () => {
    await h.close();
    await api.close();
    await peer.close();
  });

  it("uses the derived subject's own grant; a user who never connected is told to connect first", async () => {
    const grant = `/partners/acme/caab/auth-profiles/items-user/grants/${h.subjectId}`;
    const started = await h.call("POST", `${grant}/start`, { token: h.admin, body: {} });
    assert.equal(started.status, 201, JSON.stringify(started.body));
    const callback = await peer.signIn(started.body.authorization_url, "user-123");
    const done = await h.call("POST", `${grant}/complete`, {
      token: h.admin,
      body: { state: callback.searchParams.get("state"), code: callback.searchParams.get("code") },
    });
    assert.equal(done.status, 200, JSON.stringify(done.body));

    const assertion = await h.userAssertion("user-123");
    const reply = await h.invoke({ capability_id: "items", method: "GET", path: "/items/a" }, { assertion });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body.result.body.sub, "user-123", JSON.stringify(api.requests.map((r) => r.refused)));
    const sent = api.requests.at(-1);
    assert.ok(!JSON.stringify(sent?.headers).includes(assertion), "the user assertion is not forwarded");

    const stranger = await h.invoke(
      { capability_id: "items", method: "GET", path: "/items/a" },
      { assertion: await h.userAssertion("user-456") },
    );
    assert.equal(stranger.status, 403, JSON.stringify(stranger.body));
    assert.equal(stranger.body.error, "user_grant_required");
    assert.match(stranger.body.message, /connect first/);
    assert.equal(stranger.body.details.issue, "user_grant_missing");
  });

  it("token exchange: the upstream gets a token the provider issued for the user assertion, never the assertion", async () => {
    peer.trustSubjectTokens(h.partnerIdp.issuer, h.partnerIdp.jwksUri);
    const put = await h.call("PUT", "/partners/acme/caab/auth-profiles/items-obo", {
      token: h.admin,
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
    assert.equal(put.status, 201, JSON.stringify(put.body));
    await importItems("items-obo", "items-obo", [other]);
    const assertion = await h.userAssertion("user-456");
    const reply = await h.invoke(
      { capability_id: "items-obo", method: "GET", path: "/items/b" },
      { assertion },
    );
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body.result.body.sub, "user-456");
    assert.equal(peer.exchanges.at(-1)?.sub, "user-456");
    const sent = api.requests.at(-1);
    assert.ok(sent?.authorization?.startsWith("Bearer "));
    assert.ok(!JSON.stringify(sent?.headers).includes(assertion), "the user assertion is not forwarded");
  });
});
