import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  argumentsDigest,
  buildEnvelopeClaims,
  checkEnvelopeClaims,
  type EnvelopeClaims,
  type EnvelopeExpectation,
  PARTNER_PROFILE_V2,
  ProfileArgumentsError,
  parseEnvelopeClaims,
  profileArguments,
} from "../../src/bindings/envelope.ts";

const now = new Date("2026-08-02T10:00:00Z");

function claims(overrides: Partial<EnvelopeClaims> = {}): EnvelopeClaims {
  return {
    ...buildEnvelopeClaims({
      profile: PARTNER_PROFILE_V2,
      issuer: "https://authority.example",
      partnerId: "acme",
      bindingId: "b1",
      operationId: "getCustomer",
      permissionId: "customers:get:/customers/{customerId}",
      argsDigest: argumentsDigest({ path: { customerId: "cus_1" } }),
      now,
    }),
    ...overrides,
  };
}

const expected: EnvelopeExpectation = {
  profile: PARTNER_PROFILE_V2,
  issuer: "https://authority.example",
  partnerId: "acme",
  bindingId: "b1",
  operationId: "getCustomer",
  permissionIds: new Set(["customers:get:/customers/{customerId}"]),
  argsDigest: argumentsDigest({ path: { customerId: "cus_1" } }),
  now,
};

describe("profile arguments", () => {
  it("turns values into their wire strings and ignores headers", () => {
    assert.deepEqual(
      profileArguments({
        path: { id: 10, flag: true },
        query: { limit: 5, tags: ["a", 2, false], skip: undefined },
        headers: { "x-request-id": "r1" },
        body: { n: 1 },
      }),
      { path: { id: "10", flag: "true" }, query: { limit: "5", tags: ["a", "2", "false"] }, body: { n: 1 } },
    );
    assert.deepEqual(profileArguments(undefined), { path: {}, query: {}, body: null });
  });

  it("digests what the upstream observes, however the caller typed it", () => {
    assert.equal(
      argumentsDigest({ path: { id: 10 }, query: { limit: 5 } }),
      argumentsDigest({ path: { id: "10" }, query: { limit: "5" }, headers: { a: "b" }, body: null }),
    );
    assert.notEqual(argumentsDigest({ path: { id: "10" } }), argumentsDigest({ path: { id: "11" } }));
    assert.notEqual(argumentsDigest({ body: { a: 1 } }), argumentsDigest({ body: { a: "1" } }));
  });

  it("refuses what has no wire form", () => {
    for (const bad of [
      [],
      "x",
      { other: 1 },
      { path: { id: { nested: 1 } } },
      { query: { q: [{ a: 1 }] } },
      { query: "a=b" },
      { headers: "h" },
    ]) {
      assert.throws(() => profileArguments(bad), ProfileArgumentsError, JSON.stringify(bad));
    }
  });
});

describe("envelope claims", () => {
  it("lives for the profile's authority lifetime", () => {
    const c = claims();
    assert.equal(c.exp - c.iat, PARTNER_PROFILE_V2.lifetimeSec);
    assert.equal(c.decision, "allow");
    assert.equal(c.aud, "partner:acme");
    assert.match(c.jti, /^[A-Za-z0-9_-]{22}$/);
  });

  it("parses exactly an envelope claim set", () => {
    const c = claims();
    assert.deepEqual(parseEnvelopeClaims(JSON.stringify(c)), c);
    assert.equal(parseEnvelopeClaims("not json"), undefined);
    assert.equal(parseEnvelopeClaims(JSON.stringify({ ...c, extra: 1 })), undefined);
    assert.equal(parseEnvelopeClaims(JSON.stringify({ ...c, iat: "1" })), undefined);
    const { jti: _jti, ...missing } = c;
    assert.equal(parseEnvelopeClaims(JSON.stringify(missing)), undefined);
  });

  it("passes a matching envelope", () => {
    assert.equal(checkEnvelopeClaims(claims(), expected), undefined);
  });

  it("names the first failing check", () => {
    const cases: Array<[Partial<EnvelopeClaims> | { decision: string }, string]> = [
      [{ profile: "partner-profile-v1" }, "profile_mismatch"],
      [{ iss: "https://evil.example" }, "issuer_mismatch"],
      [{ aud: "partner:globex" }, "audience_mismatch"],
      [{ binding_id: "b2" }, "binding_mismatch"],
      [{ operation_id: "deleteCustomer" }, "operation_mismatch"],
      [{ permission_id: "customers:delete:/customers/{customerId}" }, "permission_mismatch"],
      [{ decision: "deny" }, "decision_denied"],
      [{ exp: claims().iat + PARTNER_PROFILE_V2.maxLifetimeSec + 1 }, "lifetime_exceeded"],
      [{ exp: claims().iat }, "lifetime_exceeded"],
      [{ iat: claims().iat - 200, exp: claims().iat - 100 }, "envelope_expired"],
      [{ iat: claims().iat + 60, exp: claims().iat + 120 }, "envelope_expired"],
      [{ args_digest: argumentsDigest({ path: { customerId: "cus_2" } }) }, "digest_mismatch"],
    ];
    for (const [change, failure] of cases) {
      assert.equal(checkEnvelopeClaims({ ...claims(), ...change }, expected), failure, failure);
    }
  });

  it("tolerates the profile's clock skew at expiry", () => {
    const c = claims();
    const at = (sec: number) => ({ ...expected, now: new Date((c.exp + sec) * 1000) });
    assert.equal(checkEnvelopeClaims(c, at(PARTNER_PROFILE_V2.clockSkewSec)), undefined);
    assert.equal(checkEnvelopeClaims(c, at(PARTNER_PROFILE_V2.clockSkewSec + 1)), "envelope_expired");
  });
});
