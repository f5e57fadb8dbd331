import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  argumentsDigest,
  buildEnvelopeClaims,
  PARTNER_PROFILE_V2,
} from "../../../../src/bindings/envelope.ts";
import { createKeyRingEnvelopeCrypto } from "../../../../src/bindings/envelope-crypto.ts";
import type { IssueTokenRequest } from "../../../../src/servers/idp/token-issuer.ts";
import { BROKER_EXECUTE_SCOPE } from "../../../../src/store/binding-model.ts";
import {
  BINDING,
  type BindingsHarness,
  PARTNER,
  type Reply,
  SERVICE_IDENTITY,
  startBindingsHarness,
} from "./harness.ts";

/**
 * POST /v1/authority/verify with a bearer token of the configured identity provider (the
 * dev IdP over HTTP, its JWKS fetched by the authority): scope authority/authority.broker.execute
 * and the client's registered partner connection (binding_id, partner_id claims). Rule 1 —
 * the request's bindingId must be the caller's binding — holds exactly as for workload tokens.
 */
describe("authority verify: identity-provider tokens", () => {
  let h: BindingsHarness;
  let protectedEnvelope: string;
  const args = { path: { customerId: "cus_00000001" }, query: {}, body: null };

  before(async () => {
    h = await startBindingsHarness();
    const crypto = createKeyRingEnvelopeCrypto({
      keyRings: h.keyRings,
      serviceIdentity: SERVICE_IDENTITY,
      partnerExists: async (id) => id === PARTNER || id === "globex",
    });
    protectedEnvelope = await crypto.seal(
      buildEnvelopeClaims({
        profile: PARTNER_PROFILE_V2,
        issuer: "http://authority.test",
        partnerId: PARTNER,
        bindingId: BINDING,
        operationId: "getCustomer",
        permissionId: "customers:get:/customers/{customerId}",
        argsDigest: argumentsDigest(args),
        now: new Date(),
      }),
      PARTNER,
      PARTNER_PROFILE_V2,
    );
  });
  after(() => h.close());

  const idpToken = async (overrides: Partial<IssueTokenRequest> = {}, issuer = h.adminIdp) =>
    (
      await issuer.issueToken({
        subject: "acme-broker",
        clientId: "acme-broker",
        scopes: [BROKER_EXECUTE_SCOPE],
        claims: { binding_id: BINDING, partner_id: PARTNER },
        ...overrides,
      })
    ).accessToken;

  const verify = (token: string, bindingId = BINDING): Promise<Reply> =>
    h.call("POST", "/v1/authority/verify", {
      token,
      body: {
        profile: "partner-profile-v2",
        bindingId,
        operationId: "getCustomer",
        arguments: args,
        protectedEnvelope,
      },
    });

  it("accepts the IdP's token with the broker scope and the client's partner connection", async () => {
    const reply = await verify(await idpToken());
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.deepEqual(reply.body, {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getCustomer",
      decision: "allow",
      verified: true,
    });
  });

  it("the authority's own workload tokens still work", async () => {
    const reply = await verify(await h.workloadToken(h.upstreamClient));
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
  });

  it("rule 1 unchanged: a bindingId other than the token's binding is binding_mismatch", async () => {
    const reply = await verify(await idpToken(), "acme-other");
    assert.equal(reply.status, 403);
    assert.equal(reply.body.error, "binding_mismatch");
  });

  it("no broker scope, no partner connection, or a connection of another partner: 403", async () => {
    const cases: Array<[string, Partial<IssueTokenRequest>]> = [
      ["no scope", { scopes: [] }],
      ["another scope", { scopes: ["authority/bindings.invoke"] }],
      ["no binding claim", { claims: { partner_id: PARTNER } }],
      ["no partner claim", { claims: { binding_id: BINDING } }],
      ["binding of another partner", { claims: { binding_id: BINDING, partner_id: "globex" } }],
      ["unknown binding", { claims: { binding_id: "nope", partner_id: PARTNER } }],
    ];
    for (const [what, overrides] of cases) {
      const reply = await verify(await idpToken(overrides));
      assert.equal(reply.status, 403, what);
      assert.equal(reply.body.error, "insufficient_role", what);
    }
  });

  it("a token of another issuer, a non-access token or a tampered one: 401", async () => {
    const good = await idpToken();
    const [head, payload, signature] = good.split(".");
    const claims = JSON.parse(Buffer.from(payload ?? "", "base64url").toString("utf8"));
    const tampered = `${head}.${Buffer.from(JSON.stringify({ ...claims, binding_id: "acme-app", partner_id: "globex" })).toString("base64url")}.${signature}`;
    const tokens: Array<[string, string]> = [
      ["partner issuer", await idpToken({}, h.partnerIdp)],
      ["id token", await idpToken({ tokenUse: "id" })],
      ["tampered claims", tampered],
    ];
    for (const [what, token] of tokens) {
      const reply = await verify(token);
      assert.equal(reply.status, 401, `${what}: ${JSON.stringify(reply.body)}`);
    }
  });
});
