import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  argumentsDigest,
  buildEnvelopeClaims,
  type EnvelopeClaims,
  PARTNER_PROFILE_V2,
} from "../../../../src/bindings/envelope.ts";
import {
  createKeyRingEnvelopeCrypto,
  type EnvelopeCrypto,
} from "../../../../src/bindings/envelope-crypto.ts";
import {
  BINDING,
  type BindingsHarness,
  PARTNER,
  type Reply,
  SERVICE_IDENTITY,
  startBindingsHarness,
} from "./harness.ts";

/**
 * POST /v1/authority/verify: one test per status cause. Envelopes are made with the same
 * sealing code and the same key rings the service uses, so only the cause under test is
 * wrong in each.
 */
describe("authority verify", () => {
  let h: BindingsHarness;
  let crypto: EnvelopeCrypto;
  let token: string;
  const args = { path: { customerId: "cus_00000001" }, query: {}, body: null };

  before(async () => {
    h = await startBindingsHarness();
    crypto = createKeyRingEnvelopeCrypto({
      keyRings: h.keyRings,
      serviceIdentity: SERVICE_IDENTITY,
      partnerExists: async (id) => id === PARTNER || id === "globex",
    });
    const globex = await h.call("POST", "/partners", {
      token: h.admin,
      body: { partner_id: "globex", name: "Globex" },
    });
    assert.equal(globex.status, 201);
    token = await h.workloadToken(h.upstreamClient);
  });
  after(async () => {
    await h.close();
  });

  function claims(overrides: Partial<EnvelopeClaims> | Record<string, unknown> = {}): EnvelopeClaims {
    return {
      ...buildEnvelopeClaims({
        profile: PARTNER_PROFILE_V2,
        issuer: "http://authority.test",
        partnerId: PARTNER,
        bindingId: BINDING,
        operationId: "getCustomer",
        permissionId: "customers:get:/customers/{customerId}",
        argsDigest: argumentsDigest(args),
        now: new Date(),
      }),
      ...overrides,
    } as EnvelopeClaims;
  }

  const envelope = (c: EnvelopeClaims = claims(), signer = PARTNER) =>
    crypto.seal(c, signer, PARTNER_PROFILE_V2);

  async function verify(body: unknown, options: { token?: string; base?: string } = {}): Promise<Reply> {
    return h.call("POST", "/v1/authority/verify", { token: options.token ?? token, body }, options.base);
  }

  async function request(overrides: Record<string, unknown> = {}) {
    return {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getCustomer",
      arguments: args,
      protectedEnvelope: await envelope(),
      ...overrides,
    };
  }

  function expectFailure(reply: Reply, status: number, code: string): void {
    assert.equal(reply.status, status, JSON.stringify(reply.body));
    assert.equal(reply.body.error, code);
    assert.equal(reply.body.requestId, reply.headers.get("x-request-id"));
    // Never the envelope's contents, plaintext or crypto internals.
    const text = JSON.stringify(reply.body);
    for (const secret of [
      "args_digest",
      "jti",
      "partner:",
      "crypto_bad",
      "crypto_decrypt",
      "crypto_malformed",
      "cus_00000001",
    ])
      assert.ok(!text.includes(secret), secret);
  }

  it("verifies an envelope the service issued for these arguments", async () => {
    const reply = await verify(await request());
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.deepEqual(reply.body, {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getCustomer",
      decision: "allow",
      verified: true,
    });
    // Arguments typed differently but identical on the wire verify too.
    const typed = await verify(await request({ arguments: { path: { customerId: "cus_00000001" } } }));
    assert.equal(typed.status, 200);
  });

  it("honours the partner allowlist (spec rule 2): a constrained operation outside the rollout is refused", async () => {
    const listArgs = { path: {}, query: { limit: 10 }, body: null };
    const listEnvelope = () =>
      envelope(
        claims({
          operation_id: "listCustomers",
          permission_id: "customers:get:/customers",
          args_digest: argumentsDigest(listArgs),
        }),
      );
    const listRequest = async () => ({
      ...(await request()),
      operationId: "listCustomers",
      arguments: listArgs,
      protectedEnvelope: await listEnvelope(),
    });
    assert.equal((await verify(await listRequest())).status, 200, "inside the rollout");
    for (const parameterScoping of [
      { enabled: true, partnerAllowlist: ["globex"] },
      { enabled: false, partnerAllowlist: [PARTNER] },
    ]) {
      const replica = await h.startReplica({ config: { parameterScoping } });
      expectFailure(await verify(await listRequest(), { base: replica.url }), 403, "operation_not_allowed");
      // An operation without constraints is not gated by the rollout.
      assert.equal((await verify(await request(), { base: replica.url })).status, 200);
    }
  });

  it("needs a workload token with the broker scope", async () => {
    const none = await h.call("POST", "/v1/authority/verify", { body: await request() });
    assert.equal(none.status, 401);
    const invokeOnly = await h.workloadToken(h.agent, "authority/bindings.invoke");
    const scoped = await verify(await request(), { token: invokeOnly });
    assert.equal(scoped.status, 403);
  });

  describe("400", () => {
    it("malformed body", async () => {
      const reply = await fetch(`${h.url}/v1/authority/verify`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: "{not json",
      });
      assert.equal(reply.status, 400);
      assert.equal(((await reply.json()) as { error: string }).error, "invalid_request");
      const array = await verify([await request()]);
      assert.equal(array.status, 400);
    });

    it("missing required fields", async () => {
      for (const field of ["profile", "bindingId", "operationId", "arguments", "protectedEnvelope"]) {
        const body: Record<string, unknown> = await request();
        delete body[field];
        const reply = await verify(body);
        assert.equal(reply.status, 400, field);
        assert.equal(reply.body.error, "invalid_request");
      }
    });

    it("unknown profile", async () => {
      expectFailure(await verify(await request({ profile: "partner-profile-v9" })), 400, "unknown_profile");
    });

    it("unsupported operation", async () => {
      expectFailure(
        await verify(await request({ operationId: "launchRockets" })),
        400,
        "unsupported_operation",
      );
    });

    it("invalid arguments", async () => {
      expectFailure(
        await verify(await request({ arguments: { path: { customerId: { nested: true } } } })),
        400,
        "invalid_arguments",
      );
      expectFailure(await verify(await request({ arguments: { cookies: {} } })), 400, "invalid_arguments");
    });
  });

  describe("403", () => {
    it("binding mismatch (bindingId is not the workload client's binding)", async () => {
      expectFailure(await verify(await request({ bindingId: "acme-other" })), 403, "binding_mismatch");
    });

    it("binding mismatch inside the envelope", async () => {
      expectFailure(
        await verify(
          await request({ protectedEnvelope: await envelope(claims({ binding_id: "acme-other" })) }),
        ),
        403,
        "binding_mismatch",
      );
    });

    it("invalid signature", async () => {
      const good = Buffer.from(await envelope(), "base64");
      good[good.length - 10] = (good[good.length - 10] ?? 0) ^ 0xff;
      expectFailure(
        await verify(await request({ protectedEnvelope: good.toString("base64") })),
        403,
        "invalid_signature",
      );
      expectFailure(
        await verify(await request({ protectedEnvelope: "bm90LWFuLWVudmVsb3Bl" })),
        403,
        "invalid_signature",
      );
    });

    it("signer mismatch (validly signed by another partner)", async () => {
      expectFailure(
        await verify(await request({ protectedEnvelope: await envelope(claims(), "globex") })),
        403,
        "signer_mismatch",
      );
    });

    it("digest mismatch (the upstream received other arguments)", async () => {
      expectFailure(
        await verify(
          await request({ arguments: { path: { customerId: "cus_00000002" }, query: {}, body: null } }),
        ),
        403,
        "digest_mismatch",
      );
    });

    it("expired envelope", async () => {
      const now = Math.floor(Date.now() / 1000);
      expectFailure(
        await verify(
          await request({ protectedEnvelope: await envelope(claims({ iat: now - 120, exp: now - 60 })) }),
        ),
        403,
        "envelope_expired",
      );
    });

    it("lifetime beyond the profile maximum", async () => {
      const now = Math.floor(Date.now() / 1000);
      expectFailure(
        await verify(
          await request({ protectedEnvelope: await envelope(claims({ iat: now, exp: now + 3600 })) }),
        ),
        403,
        "lifetime_exceeded",
      );
    });

    it("denied decision", async () => {
      expectFailure(
        await verify(await request({ protectedEnvelope: await envelope(claims({ decision: "deny" })) })),
        403,
        "decision_denied",
      );
    });

    it("issuer mismatch", async () => {
      expectFailure(
        await verify(
          await request({
            protectedEnvelope: await envelope(claims({ iss: "https://other-authority.example" })),
          }),
        ),
        403,
        "issuer_mismatch",
      );
    });

    it("audience mismatch", async () => {
      expectFailure(
        await verify(await request({ protectedEnvelope: await envelope(claims({ aud: "partner:globex" })) })),
        403,
        "audience_mismatch",
      );
    });

    it("permission mismatch", async () => {
      expectFailure(
        await verify(
          await request({
            protectedEnvelope: await envelope(
              claims({ permission_id: "customers:delete:/customers/{customerId}" }),
            ),
          }),
        ),
        403,
        "permission_mismatch",
      );
    });

    it("operation mismatch", async () => {
      expectFailure(
        await verify(await request({ operationId: "listPaymentMethods" })),
        403,
        "operation_mismatch",
      );
    });

    it("profile mismatch and malformed claims", async () => {
      expectFailure(
        await verify(
          await request({ protectedEnvelope: await envelope(claims({ profile: "partner-profile-v1" })) }),
        ),
        403,
        "profile_mismatch",
      );
      expectFailure(
        await verify(await request({ protectedEnvelope: await envelope(claims({ extra: "field" })) })),
        403,
        "invalid_envelope",
      );
    });

    it("inactive binding", async () => {
      const off = await h.call("PATCH", `/v1/bindings/${BINDING}`, {
        token: h.admin,
        body: { active: false },
      });
      assert.equal(off.status, 200);
      try {
        expectFailure(await verify(await request()), 403, "binding_inactive");
      } finally {
        await h.call("PATCH", `/v1/bindings/${BINDING}`, { token: h.admin, body: { active: true } });
      }
      assert.equal((await verify(await request())).status, 200);
    });
  });

  describe("503", () => {
    it("crypto configuration unavailable", async () => {
      // Another replica with no envelope key rings configured (workload-token keys only).
      const replica = await h.startReplica({
        secretKeyRings: null,
        bindings: { tokenKeyRings: h.keyRings },
      });
      const reply = await verify(await request(), { base: replica.url });
      expectFailure(reply, 503, "crypto_unavailable");
      assert.equal(reply.headers.get("retry-after"), "1");
      // Invoke on that replica fails closed the same way: nothing is sent without an envelope.
      const before = h.upstream.received.length;
      const invoked = await h.invoke(
        { capability_id: "customers", method: "GET", path: "/customers" },
        { base: replica.url, token: await h.workloadToken(h.agent, "authority/bindings.invoke") },
      );
      assert.equal(invoked.status, 503);
      assert.equal(h.upstream.received.length, before);
    });
  });
});
