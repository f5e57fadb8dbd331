import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { requestToken } from "../../../src/identity/token-client.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/server.ts";

/** POST /admin/clients: development only, admin only, the secret returned once and usable. */
describe("dev IdP client registration", () => {
  let idp: IdpServer;
  let plain: IdpServer;
  before(async () => {
    idp = await createIdpServer({ audience: "authority", clientRegistration: true });
    await idp.listen();
    plain = await createIdpServer({ audience: "authority" });
    await plain.listen();
  });
  after(async () => {
    await idp.close();
    await plain.close();
  });

  const register = (server: IdpServer, token: string | undefined, body: unknown) =>
    fetch(`${server.issuer}/admin/clients`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      },
      body: JSON.stringify(body),
    });
  const tokenOf = async (server: IdpServer, roles: string[], tokenUse?: string) =>
    (await server.issueToken({ subject: "someone", roles, ...(tokenUse === undefined ? {} : { tokenUse }) }))
      .accessToken;

  test("refuses anonymous callers, forged or non-access tokens, and non-admins before reading the body", async () => {
    const anonymous = await register(idp, undefined, { client_id: "x" });
    assert.equal(anonymous.status, 401);
    assert.equal(((await anonymous.json()) as { error: string }).error, "invalid_token");
    // A token of another IdP (its own keys), even with the admin role.
    assert.equal((await register(idp, await tokenOf(plain, ["admin"]), { client_id: "x" })).status, 401);
    assert.equal((await register(idp, await tokenOf(idp, ["admin"], "id"), { client_id: "x" })).status, 401);
    const partnerAdmin = await register(idp, await tokenOf(idp, ["partner_admin"]), { client_id: "x" });
    assert.equal(partnerAdmin.status, 403);
    assert.equal(idp.directory.hasClient("x"), false);
  });

  test("is absent unless turned on (authority idp never serves it)", async () => {
    assert.equal((await register(plain, await tokenOf(plain, ["admin"]), { client_id: "x" })).status, 404);
  });

  test("an admin adds a client whose secret gets a token for that subject, with the partner claim", async () => {
    const admin = await tokenOf(idp, ["admin"]);
    const created = await register(idp, admin, { client_id: "my-agent", partner_id: "acme" });
    assert.equal(created.status, 201);
    const body = (await created.json()) as {
      client_id: string;
      client_secret: string;
      token_endpoint: string;
    };
    assert.equal(body.client_id, "my-agent");
    assert.ok(body.client_secret.length >= 40);
    const issued = await requestToken({
      tokenUrl: body.token_endpoint,
      grant: { type: "client_credentials", clientId: "my-agent", clientSecret: body.client_secret },
    });
    const verified = await createJwtVerifier({
      issuer: idp.issuer,
      audience: "authority",
      jwks: idp.jwksUri,
      requireTokenUse: "access",
    }).verify(issued.accessToken);
    assert.equal(verified.subject, "my-agent");
    assert.equal(verified.claims.partner_id, "acme");
    assert.deepEqual(verified.roles, []);
    // Once only: the same id again is a conflict, and bad input is refused.
    assert.equal((await register(idp, admin, { client_id: "my-agent" })).status, 409);
    for (const bad of [
      {},
      { client_id: "../x" },
      { client_id: "ok", roles: ["admin"] },
      { client_id: "ok", scopes: ["a b"] },
    ]) {
      assert.equal((await register(idp, admin, bad)).status, 400, JSON.stringify(bad));
    }
    assert.equal(idp.directory.hasClient("ok"), false);
  });
});
