import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  createAuthProfileSecretResolver,
  loadExecutionAuthProfile,
  resolveAuthProfileSecret,
} from "../../../../src/admin/auth-profiles.ts";
import { parseAuthProfile } from "../../../../src/execute/auth-profiles.ts";
import { type AuthProfileRecord, collections, storeKeys } from "../../../../src/store/model.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

const API_KEY_SECRET = "sk_live_0123456789abcdef";
const CLIENT_SECRET = "client-secret-value-42";

describe("admin API: auth profiles", () => {
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;
  const base = "/partners/acme/caab/auth-profiles";
  const raw = (id: string) =>
    h.store.get<AuthProfileRecord>(collections.authProfiles, storeKeys.authProfile("acme", id));

  before(async () => {
    h = await startHarness();
    t = await cast(h);
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "acme", name: "Acme" } });
    await h.call("POST", "/partners", { token: t.admin, body: { partner_id: "globex", name: "Globex" } });
  });
  after(() => h.close());

  it("stores a static API key profile sealed and never returns the secret", async () => {
    const r = await h.call("PUT", `${base}/orders-key`, {
      token: t.acmeAdmin,
      body: { type: "static", kind: "api_key", in: "header", name: "X-Api-Key", secret: API_KEY_SECRET },
    });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.secret_present, true);
    assert.equal(r.body.profile_id, "orders-key");
    assert.equal(r.body.sealed_secret, undefined);
    assert.ok(!r.text.includes(API_KEY_SECRET));

    const record = await raw("orders-key");
    assert.ok(record);
    assert.ok(record.sealed_secret.length > 0);
    assert.ok(!JSON.stringify(record).includes(API_KEY_SECRET), "the secret is not stored in plaintext");
    assert.ok(!Buffer.from(record.sealed_secret, "base64").toString("latin1").includes(API_KEY_SECRET));

    const read = await h.call("GET", `${base}/orders-key`, { token: t.auditor });
    assert.equal(read.status, 200);
    assert.deepEqual(
      {
        type: read.body.type,
        kind: read.body.kind,
        in: read.body.in,
        name: read.body.name,
        secret_present: read.body.secret_present,
      },
      { type: "static", kind: "api_key", in: "header", name: "X-Api-Key", secret_present: true },
    );
    assert.ok(!read.text.includes(API_KEY_SECRET));
    assert.ok(!read.text.includes(record.sealed_secret.slice(0, 32)));

    assert.equal(await resolveAuthProfileSecret(h.context, "acme", "orders-key"), API_KEY_SECRET);
  });

  it("stores an OAuth client-credentials profile and hands the execution layer a usable profile", async () => {
    const r = await h.call("PUT", `${base}/billing-oauth`, {
      token: t.acmeAdmin,
      body: {
        type: "oauth_client_credentials",
        token_url: "https://login.example.com/oauth2/token",
        client_id: "billing-client",
        client_secret: CLIENT_SECRET,
        scopes: ["billing.read", "billing.write"],
        audience: "https://billing.example.com",
      },
    });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.client_auth, "client_secret_basic");
    assert.ok(!r.text.includes(CLIENT_SECRET));

    const profile = await loadExecutionAuthProfile(h.context, "acme", "billing-oauth");
    assert.deepEqual(parseAuthProfile(profile), profile);
    assert.equal(profile.type, "oauth_client_credentials");
    const resolver = createAuthProfileSecretResolver(h.context);
    if (profile.type === "oauth_client_credentials") {
      assert.equal(await resolver(profile.clientSecretRef), CLIENT_SECRET);
    }
    await assert.rejects(resolver("vault:other"));
  });

  it("keeps the stored secret on an update without one, and requires one for a new type", async () => {
    const before = await raw("orders-key");
    const r = await h.call("PUT", `${base}/orders-key`, {
      token: t.acmeAdmin,
      body: { type: "static", kind: "api_key", in: "query", name: "api_key" },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.in, "query");
    const after = await raw("orders-key");
    assert.equal(after?.sealed_secret, before?.sealed_secret);
    assert.equal(after?.secret_updated_at, before?.secret_updated_at);
    assert.equal(await resolveAuthProfileSecret(h.context, "acme", "orders-key"), API_KEY_SECRET);

    const typeChange = await h.call("PUT", `${base}/orders-key`, {
      token: t.acmeAdmin,
      body: { type: "static", kind: "bearer" },
    });
    assert.equal(typeChange.status, 400);
    assert.equal(typeChange.body.details.field, "secret");

    const rotated = await h.call("PUT", `${base}/orders-key`, {
      token: t.acmeAdmin,
      body: { type: "static", kind: "bearer", secret: "new-bearer-token" },
    });
    assert.equal(rotated.status, 200);
    assert.equal(await resolveAuthProfileSecret(h.context, "acme", "orders-key"), "new-bearer-token");
  });

  it("answers 400 for profiles the execution layer could not use", async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ type: "static", kind: "api_key", in: "header", name: "Authorization-Extra\n", secret: "s" }, /name/],
      [{ type: "static", kind: "api_key", in: "header", name: "Cookie", secret: "s" }, /name/],
      [{ type: "static", kind: "api_key", in: "body", name: "k", secret: "s" }, /in/],
      [{ type: "static", kind: "basic", secret: "s" }, /kind/],
      [{ type: "oauth_user", client_id: "x" }, /authorization_url/],
      [{ type: "oauth_magic", client_id: "x" }, /type/],
      [{ type: "static", kind: "bearer", secret: "line\nbreak" }, /secret/],
      [
        {
          type: "oauth_client_credentials",
          token_url: "http://login.example.com/token",
          client_id: "c",
          client_secret: "s",
        },
        /token_url/,
      ],
      [
        { type: "oauth_client_credentials", token_url: "https://x.example.com/t", client_id: "c" },
        /client_secret/,
      ],
    ];
    for (const [body, pattern] of cases) {
      const r = await h.call("PUT", `${base}/bad-profile`, { token: t.acmeAdmin, body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(JSON.stringify(r.body), pattern, JSON.stringify(body));
    }
    assert.equal(await raw("bad-profile"), undefined);
  });

  it("refuses to store a profile called none: that id means no upstream credential", async () => {
    const r = await h.call("PUT", `${base}/none`, {
      token: t.acmeAdmin,
      body: { type: "static", kind: "bearer", secret: "would-be-injected-1" },
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.body.message, /reserved/);
    assert.equal(await raw("none"), undefined);
  });

  it("lists profiles without secrets", async () => {
    const r = await h.call("GET", base, { token: t.acmeAdmin });
    assert.equal(r.status, 200);
    assert.deepEqual(
      r.body.items.map((p: { profile_id: string }) => p.profile_id),
      ["billing-oauth", "orders-key"],
    );
    assert.ok(r.body.items.every((p: { secret_present: boolean }) => p.secret_present));
    assert.ok(
      !r.text.includes(CLIENT_SECRET) && !r.text.includes("new-bearer-token") && !r.text.includes("sealed"),
    );
  });

  it("checks roles and partners", async () => {
    const body = { type: "static", kind: "bearer", secret: "x" };
    assert.equal((await h.call("PUT", `${base}/p`, { body })).status, 401);
    for (const token of [t.globexAdmin, t.auditor, t.agent]) {
      assert.equal((await h.call("PUT", `${base}/p`, { token, body })).status, 403);
    }
    assert.equal((await h.call("GET", base, { token: t.globexAdmin })).status, 403);
    assert.equal((await h.call("GET", `${base}/unknown`, { token: t.acmeAdmin })).status, 404);
    assert.equal(
      (await h.call("PUT", "/partners/ghost/caab/auth-profiles/p", { token: t.admin, body })).status,
      404,
    );
  });

  it("refuses to delete a profile a capability uses, then deletes it", async () => {
    await h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: t.acmeAdmin,
      body: { capability_id: "orders", name: "Orders", document: smallApi(), auth_profile_ref: "orders-key" },
    });
    const refused = await h.call("DELETE", `${base}/orders-key`, { token: t.acmeAdmin });
    assert.equal(refused.status, 409);
    assert.deepEqual(refused.body.details.capabilities, ["orders"]);
    assert.equal((await h.call("DELETE", `${base}/billing-oauth`, { token: t.auditor })).status, 403);
    assert.equal((await h.call("DELETE", `${base}/billing-oauth`, { token: t.acmeAdmin })).status, 204);
    assert.equal((await h.call("GET", `${base}/billing-oauth`, { token: t.acmeAdmin })).status, 404);
    await assert.rejects(resolveAuthProfileSecret(h.context, "acme", "billing-oauth"), { code: "not_found" });
  });

  it("does not open a sealed secret moved onto another profile", async () => {
    const source = await raw("orders-key");
    assert.ok(source);
    await h.store.put(collections.authProfiles, storeKeys.authProfile("acme", "copied"), {
      ...source,
      profile_id: "copied",
    });
    await assert.rejects(resolveAuthProfileSecret(h.context, "acme", "copied"), {
      code: "secret_unreadable",
    });
  });
});

describe("admin API: auth profiles without secret storage", () => {
  let h: Harness;

  before(async () => {
    h = await startHarness({ secretKeyRings: false });
  });
  after(() => h.close());

  it("answers 503 instead of storing a secret it cannot seal", async () => {
    const admin = await h.token(["admin"]);
    await h.call("POST", "/partners", { token: admin, body: { partner_id: "acme", name: "Acme" } });
    const r = await h.call("PUT", "/partners/acme/caab/auth-profiles/k", {
      token: admin,
      body: { type: "static", kind: "bearer", secret: "cannot-be-sealed" },
    });
    assert.equal(r.status, 503);
    assert.equal(r.body.error, "upstream_unavailable");
    assert.ok(!r.text.includes("cannot-be-sealed"));
    assert.equal((await h.call("GET", "/partners/acme/caab/auth-profiles/k", { token: admin })).status, 404);
  });
});
