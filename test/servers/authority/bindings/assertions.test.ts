import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { SignJWT } from "jose";
import { type BindingsHarness, startBindingsHarness, TENANT, USER_AUDIENCE } from "./harness.ts";

/**
 * One test per reason a user assertion is refused. Every refusal is the spec's assertion
 * rejection `{ message, error: "invalid_user_assertion", requestId }` with 401, and the
 * upstream is never called.
 */
describe("user assertion rejections", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(async () => {
    await h.close();
  });

  const nowSec = () => Math.floor(Date.now() / 1000);

  /** Claims a valid assertion has; tests remove or change one. */
  const validClaims = () => ({
    iss: h.partnerIdp.issuer,
    sub: "user-123",
    aud: USER_AUDIENCE,
    iat: nowSec(),
    nbf: nowSec(),
    exp: nowSec() + 300,
    token_use: "access",
    tenant: TENANT,
  });

  /** Signs with the partner IdP's real current key (kid from its JWKS). */
  async function signed(claims: Record<string, unknown>): Promise<string> {
    const key = h.partnerIdp.keys.current();
    return new SignJWT(claims)
      .setProtectedHeader({ alg: "ES256", kid: key.kid, typ: "at+jwt" })
      .sign(key.privateKey);
  }

  async function expectRejected(assertion: string): Promise<void> {
    const before = h.upstream.received.length;
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { assertion },
    );
    assert.equal(reply.status, 401, JSON.stringify(reply.body));
    assert.deepEqual(Object.keys(reply.body).sort(), ["error", "message", "requestId"]);
    assert.equal(reply.body.error, "invalid_user_assertion");
    assert.equal(typeof reply.body.message, "string");
    assert.equal(reply.body.requestId, reply.headers.get("x-request-id"));
    assert.equal(h.upstream.received.length, before, "the upstream was not called");
  }

  it("accepts the valid baseline (so each case below fails for its one reason)", async () => {
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { assertion: await signed(validClaims()) },
    );
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
  });

  it("rejects alg none", async () => {
    const header = Buffer.from(JSON.stringify({ alg: "none", typ: "at+jwt" })).toString("base64url");
    const payload = Buffer.from(JSON.stringify(validClaims())).toString("base64url");
    await expectRejected(`${header}.${payload}.`);
  });

  it("rejects HS256 signed with the issuer's public key", async () => {
    const jwks = (await (await fetch(h.partnerIdp.jwksUri)).json()) as { keys: Array<{ kid: string }> };
    const publicJwk = jwks.keys[0];
    assert.ok(publicJwk);
    const secret = new TextEncoder().encode(JSON.stringify(publicJwk));
    const token = await new SignJWT(validClaims())
      .setProtectedHeader({ alg: "HS256", kid: publicJwk.kid, typ: "at+jwt" })
      .sign(secret);
    await expectRejected(token);
  });

  it("rejects an expired assertion", async () => {
    await expectRejected(
      await signed({ ...validClaims(), iat: nowSec() - 3600, nbf: nowSec() - 3600, exp: nowSec() - 600 }),
    );
  });

  it("rejects an assertion that is not valid yet (nbf in the future)", async () => {
    await expectRejected(await signed({ ...validClaims(), nbf: nowSec() + 600 }));
  });

  it("rejects a wrong issuer", async () => {
    await expectRejected(await signed({ ...validClaims(), iss: "https://evil.example" }));
  });

  it("rejects a wrong audience", async () => {
    await expectRejected(await h.userAssertion("user-123", { audience: "another-api" }));
  });

  it("rejects token_use other than access", async () => {
    await expectRejected(await signed({ ...validClaims(), token_use: "id" }));
  });

  it("rejects a missing tenant", async () => {
    const { tenant: _tenant, ...claims } = validClaims();
    await expectRejected(await signed(claims));
  });

  it("rejects a wrong tenant", async () => {
    await expectRejected(await h.userAssertion("user-123", { tenant: "globex-tenant" }));
  });

  it("rejects an unknown kid", async () => {
    const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const token = await new SignJWT(validClaims())
      .setProtectedHeader({ alg: "ES256", kid: "not-in-the-jwks", typ: "at+jwt" })
      .sign(privateKey);
    await expectRejected(token);
  });

  it("rejects a missing subject", async () => {
    const { sub: _sub, ...claims } = validClaims();
    await expectRejected(await signed(claims));
  });

  it("rejects a missing assertion", async () => {
    const before = h.upstream.received.length;
    const reply = await h.call("POST", "/v1/bindings/acme-app/invoke", {
      token: await h.workloadToken(h.agent, "authority/bindings.invoke"),
      body: { capability_id: "customers", method: "GET", path: "/customers" },
      headers: { "idempotency-key": "no-assertion" },
    });
    assert.equal(reply.status, 401);
    assert.equal(reply.body.error, "invalid_user_assertion");
    assert.equal(h.upstream.received.length, before);
  });
});
