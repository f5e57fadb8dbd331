/**
 * Token attacks through the public endpoints. Every forged, replayed or misused token is
 * refused with the endpoint's documented answer — authorize-invocation: 401 deny
 * `invalid_token`; admin routes, /mcp and /v1/authority/verify: 401 `invalid_token`;
 * the sidecar's ext_authz: 401; binding invoke: 401 `invalid_token` for the workload
 * token, 401 `invalid_user_assertion` for the user assertion — and a correctly signed
 * control token with the same claims is accepted, so each refusal is for the attack.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  claimsOf,
  hmacCopy,
  resignedCopy,
  type TokenForge,
  tamperedCopy,
  tokenForge,
  unsignedCopy,
} from "../helpers/forge-token.ts";
import type { HttpReply } from "../helpers/http-client.ts";
import { assertNoLeaks, newCounts, report } from "../helpers/suite-report.ts";
import {
  AGENT,
  BINDING,
  CAPABILITY,
  OTHER_BINDING,
  type System,
  startSystem,
  TENANT,
  USER,
  USER_AUDIENCE,
} from "../helpers/system.ts";

const counts = newCounts();
const allowedOp = { capability_id: CAPABILITY, method: "GET", path: "/items/7" };
const nowSec = () => Math.floor(Date.now() / 1000);

type Attack = readonly [name: string, make: () => Promise<string> | string];

async function publicJwk(url: string): Promise<Record<string, unknown>> {
  const response = await fetch(url);
  const jwks = (await response.json()) as { keys: Array<Record<string, unknown>> };
  const key = jwks.keys[0];
  assert.ok(key, `a key at ${url}`);
  return key;
}

/** Attacks on a token of `forge`'s issuer whose valid form is `control()`. */
function attacksOn(
  forge: TokenForge,
  subject: string,
  control: () => Promise<string>,
  jwk: () => Promise<Record<string, unknown>>,
): Attack[] {
  const signed =
    (claims: Record<string, unknown>, header: Record<string, unknown> = {}) =>
    async () =>
      forge.signed(subject, { ...claimsOf(await control()), ...claims }, header);
  return [
    ["alg none", async () => unsignedCopy(await control())],
    [
      "HS256 signed with the issuer's public key (PEM)",
      async () => hmacCopy(await control(), await jwk(), "pem"),
    ],
    [
      "HS256 signed with the issuer's public key (JWK JSON)",
      async () => hmacCopy(await control(), await jwk(), "jwk"),
    ],
    ["signed by another key under the real kid", async () => resignedCopy(await control())],
    [
      "signed by another key under an unknown kid",
      async () => resignedCopy(await control(), { kid: "kid-nobody-published" }),
    ],
    ["kid with path characters", signed({}, { kid: "../../../../etc/passwd" })],
    ["kid with SQL characters", signed({}, { kid: "' OR '1'='1' --" })],
    ["kid of 300 characters", signed({}, { kid: "k".repeat(300) })],
    ["jku/x5u header pointing at an attacker's keys", () => forge.withAttackerKeyHeader(subject, "jku")],
    ["embedded jwk header with the attacker's key", () => forge.withAttackerKeyHeader(subject, "jwk")],
    ["unknown critical header", signed({}, { crit: ["x-must-understand"], "x-must-understand": true })],
    ["expired", signed({ exp: nowSec() - 300, iat: nowSec() - 1200, nbf: nowSec() - 1200 })],
    ["nbf in the future", signed({ nbf: nowSec() + 600 })],
    ["iat in the future", signed({ iat: nowSec() + 600 })],
    ["wrong issuer", signed({ iss: "https://evil.example" })],
    ["wrong audience", signed({ aud: "someone-else" })],
    ["an ID token (audience is a client)", signed({ aud: "some-client-app", token_use: "id" })],
    ["no exp", signed({ exp: undefined })],
    ["no sub", signed({ sub: undefined })],
    ["empty sub", signed({ sub: "  " })],
    ["payload changed after signing", async () => tamperedCopy(await control(), { sub: "someone-else" })],
    ["oversized (9 KB)", signed({ padding: "p".repeat(9000) })],
  ];
}

describe("token attacks", () => {
  let system: System;
  let forge: TokenForge;
  let partnerForge: TokenForge;

  before(async () => {
    system = await startSystem({ sidecar: {} });
    forge = tokenForge(system.idp.server());
    partnerForge = tokenForge(system.partnerIdp.server(), { audience: USER_AUDIENCE, tenant: TENANT });
  });
  after(() => system?.close());

  test("bearer tokens: refused by authorize-invocation, admin routes, /mcp and ext_authz", async () => {
    const control = () => forge.signed(AGENT, { roles: ["admin"] });
    // The control token (same claims, the issuer's real key) is accepted everywhere.
    const valid = await control();
    assert.equal((await system.authorize(allowedOp, valid)).status, 200);
    assert.equal((await system.call("GET", `${system.url}/partners`, { token: valid })).status, 200);
    assert.equal((await system.mcp("tools/list", {}, valid)).status, 200);
    assert.equal((await system.check({ token: valid })).allowed, true);
    const hits = system.upstream.hits.length;

    for (const [name, make] of attacksOn(forge, AGENT, control, () => publicJwk(system.idp.jwksUri))) {
      const token = await make();
      const authorize = await system.authorize(allowedOp, token);
      assert.equal(authorize.status, 401, `${name}: ${authorize.text}`);
      assert.deepEqual(authorize.json, {
        status: "denied",
        reason: "invalid_token",
        requestId: authorize.json.requestId,
        rule: "auth/token",
      });
      assert.match(String(authorize.headers["www-authenticate"]), /error="invalid_token"/);
      const admin = await system.call("GET", `${system.url}/partners`, { token });
      assert.equal(admin.status, 401, `${name}: ${admin.text}`);
      assert.equal(admin.json.error, "invalid_token");
      const mcp = await system.mcp("tools/list", {}, token);
      assert.equal(mcp.status, 401, `${name}: ${mcp.text}`);
      assert.equal(mcp.json.error, "invalid_token");
      const check = await system.check({ token });
      assert.equal(check.allowed, false, name);
      assert.equal(check.status, 401, name);
      counts.attacksTried += 4;
    }
    assert.equal(system.upstream.hits.length, hits, "no attack reached the upstream");
  });

  test("user assertions: refused by binding invoke with invalid_user_assertion", async () => {
    const control = () => partnerForge.signed(USER);
    assert.equal((await system.invoke(allowedOp, { assertion: await control() })).status, 200);
    const hits = system.upstream.hits.length;
    const attacks: Attack[] = [
      ...attacksOn(partnerForge, USER, control, () => publicJwk(system.partnerIdp.jwksUri)),
      ["token_use refresh", async () => partnerForge.signed(USER, { token_use: "refresh" })],
      ["no token_use", async () => partnerForge.signed(USER, { token_use: undefined })],
      ["no tenant", async () => partnerForge.signed(USER, { tenant: undefined })],
      ["another tenant", async () => partnerForge.signed(USER, { tenant: "globex-tenant" })],
      ["a token of the authority's own issuer", () => system.agentToken(USER)],
      ["empty", () => ""],
    ];
    for (const [name, make] of attacks) {
      const reply = await system.invoke(allowedOp, { assertion: await make() });
      assert.equal(reply.status, 401, `${name}: ${reply.text}`);
      assert.deepEqual(Object.keys(reply.json).sort(), ["error", "message", "requestId"], name);
      assert.equal(reply.json.error, "invalid_user_assertion", name);
      counts.attacksTried++;
    }
    assert.equal(system.upstream.hits.length, hits, "no attack reached the upstream");
  });

  test("workload tokens: refused by binding invoke and /v1/authority/verify", async () => {
    const binding = system.binding;
    assert.ok(binding);
    const invokeToken = await system.workloadToken(binding.agent, "authority/bindings.invoke");
    const brokerToken = await system.workloadToken(
      binding.upstreamClient,
      "authority/authority.broker.execute",
    );
    const jwk = await publicJwk(`${system.url}/.well-known/jwks.json`);
    const verifyBody = {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getItem",
      arguments: { path: { itemId: "7" }, query: {}, body: null },
      protectedEnvelope: "AAAA",
    };
    const verify = (token: string) =>
      system.call("POST", `${system.url}/v1/authority/verify`, { token, json: verifyBody });
    // Controls: accepted (verify then fails on the envelope, not on the token).
    assert.equal((await system.invoke(allowedOp, { token: invokeToken })).status, 200);
    assert.notEqual((await verify(brokerToken)).status, 401);

    const forgeries = (token: string): Attack[] => [
      ["alg none", () => unsignedCopy(token)],
      ["HS256 with the authority's public key (PEM)", () => hmacCopy(token, jwk, "pem")],
      ["HS256 with the authority's public key (JWK JSON)", () => hmacCopy(token, jwk, "jwk")],
      ["claims changed after signing", () => tamperedCopy(token, { binding_id: OTHER_BINDING })],
      ["signed by another key under the real kid", () => resignedCopy(token)],
      ["signed by another key under an unknown kid", () => resignedCopy(token, { kid: "nobody" })],
      ["a token of the admin issuer", () => system.agentToken(claimsOf(token).sub as string)],
    ];
    const hits = system.upstream.hits.length;
    for (const [name, make] of forgeries(invokeToken)) {
      const reply = await system.invoke(allowedOp, { token: await make() });
      assert.equal(reply.status, 401, `invoke, ${name}: ${reply.text}`);
      assert.equal(reply.json.error, "invalid_token", name);
      counts.attacksTried++;
    }
    for (const [name, make] of forgeries(brokerToken)) {
      const reply = await verify(await make());
      if (name === "a token of the admin issuer") {
        // verify also takes the identity provider's tokens (spec): a genuine one without the
        // broker scope and partner connection is authenticated but not allowed.
        assert.equal(reply.status, 403, `verify, ${name}: ${reply.text}`);
        assert.equal(reply.json.error, "insufficient_role", name);
      } else {
        assert.equal(reply.status, 401, `verify, ${name}: ${reply.text}`);
        assert.equal(reply.json.error, "invalid_token", name);
      }
      counts.attacksTried++;
    }
    // Expired: the service clock moves past the token's 300 s lifetime.
    system.clock.offsetMs = 400_000;
    try {
      const invoke = await system.invoke(allowedOp, { token: invokeToken });
      assert.equal(invoke.status, 401, invoke.text);
      assert.equal(invoke.json.error, "invalid_token");
      const verified = await verify(brokerToken);
      assert.equal(verified.status, 401, verified.text);
      counts.attacksTried += 2;
    } finally {
      system.clock.offsetMs = 0;
    }
    assert.equal(system.upstream.hits.length, hits, "no attack reached the upstream");
  });

  test("a workload token of another binding is refused on this binding's routes", async () => {
    const binding = system.binding;
    assert.ok(binding);
    const other = await system.workloadToken(binding.other, "authority/bindings.invoke", OTHER_BINDING);
    const reply = await system.invoke(allowedOp, { token: other });
    assert.equal(reply.status, 403, reply.text);
    assert.equal(reply.json.error, "insufficient_role");
    const otherBroker = await system.workloadToken(
      binding.other,
      "authority/authority.broker.execute",
      OTHER_BINDING,
    );
    const verify = await system.call("POST", `${system.url}/v1/authority/verify`, {
      token: otherBroker,
      json: {
        profile: "partner-profile-v2",
        bindingId: BINDING,
        operationId: "getItem",
        arguments: { path: { itemId: "7" }, query: {}, body: null },
        protectedEnvelope: "AAAA",
      },
    });
    assert.equal(verify.status, 403, verify.text);
    assert.equal(verify.json.error, "binding_mismatch");
    counts.attacksTried += 2;
  });

  test("a workload token replayed after its client was revoked is refused", async () => {
    const admin = await system.adminToken();
    const created = await system.call("POST", `${system.url}/v1/bindings/${BINDING}/workload-clients`, {
      token: admin,
      json: { name: "short-lived", scopes: ["authority/bindings.invoke"] },
      expectsSecrets: true,
    });
    assert.equal(created.status, 201, created.text);
    const client = { clientId: created.json.client.client_id, clientSecret: created.json.client_secret };
    system.leaks.secret(client.clientSecret);
    const token = await system.workloadToken(client, "authority/bindings.invoke");
    assert.equal((await system.invoke(allowedOp, { token })).status, 200);
    const revoked = await system.call(
      "DELETE",
      `${system.url}/v1/bindings/${BINDING}/workload-clients/${client.clientId}`,
      {
        token: admin,
      },
    );
    assert.ok(revoked.status < 300, revoked.text);
    const replay = await system.invoke(allowedOp, { token });
    assert.equal(replay.status, 401, replay.text);
    assert.equal(replay.json.error, "invalid_token");
    const fresh = await system.call("POST", `${system.url}/v1/bindings/${BINDING}/token`, {
      json: {
        grant_type: "client_credentials",
        client_id: client.clientId,
        client_secret: client.clientSecret,
      },
    });
    assert.equal(fresh.status, 401, "a revoked client gets no new token either");
    counts.attacksTried += 2;
  });

  test("bearer paths accept only access tokens (token_use other than access is refused)", async () => {
    for (const tokenUse of ["refresh", "id"]) {
      const other = await forge.signed(AGENT, { token_use: tokenUse });
      const reply: HttpReply = await system.authorize(allowedOp, other);
      assert.equal(reply.status, 401, reply.text);
      counts.attacksTried++;
    }
  });

  test("no canary, secret or token in any log line or response; summary", (t) => {
    const scanned = assertNoLeaks(system);
    report(
      t,
      "token-attacks",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}`,
    );
  });
});
