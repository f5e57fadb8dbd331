/**
 * Faults with real processes, part 2: the services the authority depends on. The upstream
 * post-quantum crypto service (policy protection through `createUpstreamPolicyProtector` +
 * `createCryptoClient`, and the managed crypto API) is stopped and restarted on its port,
 * and frozen behind a fault proxy; the identity providers (the authority's token issuer
 * and a partner's issuer of user assertions) are stopped, so their JWKS cannot be fetched,
 * and restarted with the same keys. During each fault: denied with the documented answer
 * within the bound, never allowed on anything that could not be verified; afterwards the
 * system recovers by itself within the bound of docs/security.md.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type TokenForge, tokenForge } from "../helpers/forge-token.ts";
import { assertNoLeaks, assertWithin, newCounts, report } from "../helpers/suite-report.ts";
import {
  ALLOWED,
  CAPABILITY,
  OTHER_BINDING,
  PARTNER,
  recoveryTime,
  SECOND_AGENT,
  type System,
  startSystem,
} from "../helpers/system.ts";

/** docs/security.md, "Recovery bounds". */
const CRYPTO_TIMEOUT_MS = 1500;
const DOWN_ANSWER_MS = 5_000;
const HUNG_ANSWER_MS = CRYPTO_TIMEOUT_MS + 5_000;
const RECOVERY_MS = 5_000;
const JWKS_MAX_AGE_MS = 4_000;
const JWKS_COOLDOWN_MS = 1_000;

const counts = newCounts();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const allowedOp = { capability_id: CAPABILITY, method: "GET", path: "/items/7" };

describe("faults: crypto service and identity providers", () => {
  let system: System;
  let forge: TokenForge;

  before(async () => {
    system = await startSystem({
      protection: "upstream",
      managed: true,
      cryptoTimeoutMs: CRYPTO_TIMEOUT_MS,
      jwks: { cacheMaxAgeMs: JWKS_MAX_AGE_MS, cooldownMs: JWKS_COOLDOWN_MS },
    });
    forge = tokenForge(system.idp.server());
  });
  after(() => system?.close());

  const reassign = async (subjectId: string, ttl: number) =>
    system.call(
      "PUT",
      `${system.url}/partners/${PARTNER}/caab/subjects/${subjectId}/policies/${CAPABILITY}`,
      {
        token: await system.adminToken(),
        json: { allowed_permission_ids: [...ALLOWED], ttl_seconds: ttl },
      },
    );

  test("crypto service stopped: unverifiable policies are 503 denies, writes and managed calls 503; recovery on restart", async (t) => {
    const crypto = system.crypto;
    assert.ok(crypto);
    const agent = await system.agentToken();
    const second = await system.agentToken(SECOND_AGENT);
    // agent-1's policy is opened (and cached, verified); agent-2's new version is not.
    assert.equal((await system.authorize(allowedOp, agent)).status, 200);
    assert.equal((await reassign(SECOND_AGENT, 3000)).status, 200);
    assert.equal((await system.managedCall("encrypt", { data: "warm" })).status, 200);

    await crypto.stop();
    counts.faultsInjected++;
    const [cached, unopened, invoke, assign, revoke, list, ...managed] = await Promise.all([
      system.authorize(allowedOp, agent),
      system.authorize(allowedOp, second),
      system.invoke(allowedOp),
      reassign(SECOND_AGENT, 2000),
      system.call("POST", `${system.url}/partners/${PARTNER}/caab/subjects/${SECOND_AGENT}/policy/revoke`, {
        token: await system.adminToken(),
      }),
      system.mcp("tools/list", {}, second),
      system.managedCall("encrypt", { data: "x" }),
      system.managedCall("decrypt", { encrypted_data: "QUJD" }),
      system.managedCall("sign-encrypt", { data: "x" }),
      system.managedCall("decrypt-verify", { encrypted_data: "QUJD" }),
    ]);
    for (const [name, reply] of Object.entries({ cached, unopened, invoke, assign, revoke, list })) {
      assertWithin(reply.elapsedMs, DOWN_ANSWER_MS, name);
    }
    // A verified document already in the loader's cache keeps deciding (the record is
    // still read every call); anything that must be opened now is a 503 deny.
    assert.equal(cached.status, 200);
    assert.equal(unopened.status, 503, unopened.text);
    assert.deepEqual(unopened.json, {
      status: "denied",
      reason: "upstream_unavailable",
      requestId: unopened.json.requestId,
      rule: "service/unavailable",
      remedy: { action: "retry_later" },
    });
    assert.equal(invoke.status, 503, invoke.text);
    assert.equal(invoke.json.status, "denied");
    assert.equal(invoke.json.reason, "upstream_unavailable");
    assert.equal(system.upstream.count("/items/7"), 0, "nothing reached the upstream");
    // Writes need the crypto service to sign: refused, the stored policy unchanged.
    assert.equal(assign.status, 503);
    assert.equal(assign.json.error, "upstream_unavailable");
    // A revocation does not wait for the crypto service: a deny-only marker on the record.
    assert.equal(revoke.status, 200, revoke.text);
    assert.equal(revoke.json.changed, true);
    assert.equal(revoke.json.policy.state, "revoked");
    // No API tool is listed for a policy that cannot be verified.
    const tools: Array<{ name: string }> = list.json?.result?.tools ?? [];
    assert.equal(tools.filter((tool) => !/^(list|get|revoke)_/.test(tool.name)).length, 0, list.text);
    for (const reply of managed) {
      assertWithin(reply.elapsedMs, DOWN_ANSWER_MS, "managed");
      assert.equal(reply.status, 503, reply.text);
      assert.equal(reply.json.error, "upstream_unavailable");
      assert.equal(reply.json.details.reason, "upstream_unavailable");
      assert.ok(Number(reply.headers["retry-after"]) >= 1);
    }

    await crypto.start();
    // Verifying again; the revocation made during the outage stands on the verified document.
    const took = await recoveryTime(
      async () => (await system.authorize(allowedOp, second)).json?.reason === "policy_revoked",
      RECOVERY_MS,
    );
    assert.ok(took !== undefined, `policies verify again within ${RECOVERY_MS} ms of the restart`);
    assert.equal((await system.invoke(allowedOp)).status, 200);
    assert.equal((await reassign(SECOND_AGENT, 2500)).status, 200);
    assert.equal((await system.authorize(allowedOp, second)).status, 200, "a new assignment is active");
    const sealed = await system.managedCall("sign-encrypt", { data: "after the outage" });
    assert.equal(sealed.status, 200, sealed.text);
    t.diagnostic(
      `crypto service restart → first verified decision after ${Math.round(took)} ms (bound ${RECOVERY_MS} ms)`,
    );
  });

  test("crypto service frozen (accepts, never answers): bounded by the client deadline, denied, recovery", async (t) => {
    const crypto = system.crypto;
    assert.ok(crypto);
    const second = await system.agentToken(SECOND_AGENT);
    // A new version of agent-2's policy that nobody has opened yet.
    assert.equal((await reassign(SECOND_AGENT, 3300)).status, 200);
    crypto.proxy.mode = "hang";
    crypto.proxy.dropAll();
    counts.faultsInjected++;
    try {
      const [unopened, assign] = await Promise.all([
        system.authorize(allowedOp, second, HUNG_ANSWER_MS + 5000),
        reassign(SECOND_AGENT, 3400),
      ]);
      assertWithin(unopened.elapsedMs, HUNG_ANSWER_MS, "authorize with the crypto service frozen");
      assertWithin(assign.elapsedMs, HUNG_ANSWER_MS, "assign with the crypto service frozen");
      assert.equal(unopened.status, 503, unopened.text);
      assert.equal(unopened.json.reason, "upstream_unavailable");
      assert.equal(assign.status, 503);
    } finally {
      crypto.proxy.mode = "pass";
      crypto.proxy.dropAll();
    }
    const took = await recoveryTime(
      async () => (await system.authorize(allowedOp, second)).status === 200,
      RECOVERY_MS,
    );
    assert.ok(took !== undefined, `allowed again within ${RECOVERY_MS} ms`);
    t.diagnostic(
      `crypto service unfrozen → first allow after ${Math.round(took)} ms (bound ${RECOVERY_MS} ms)`,
    );
  });

  test("issuer JWKS unreachable: cached keys until their max age, then 503; an unknown kid is never trusted", async (t) => {
    const idp = system.idp;
    // A fresh kid triggers a refetch (outside the cooldown) so the key set's age is known:
    // fetched between `fetchStart` and `fetchEnd`.
    await sleep(JWKS_COOLDOWN_MS + 100);
    const fetchStart = performance.now();
    const probe = await system.authorize(allowedOp, await forge.withUnknownKey("agent-1"));
    assert.equal(probe.status, 401, "a key the issuer never published is not trusted");
    const fetchEnd = performance.now();
    const verified = await system.agentToken();
    assert.equal((await system.authorize(allowedOp, verified)).status, 200);

    await idp.stop();
    counts.faultsInjected++;
    // 1. A token verified before: remembered (≤ 60 s, never past its exp).
    assert.equal((await system.authorize(allowedOp, verified)).status, 200);
    // 2. A new token under a known kid: allowed while the cached key set is younger than its max age.
    const fresh = await system.authorize(allowedOp, await forge.signed("agent-1"));
    if (performance.now() - fetchStart < JWKS_MAX_AGE_MS) assert.equal(fresh.status, 200, fresh.text);
    else assert.ok([200, 503].includes(fresh.status), fresh.text);
    // 3. An unknown kid outside the refetch cooldown: the refetch fails → 503, never an allow.
    await sleep(Math.max(0, fetchEnd + JWKS_COOLDOWN_MS + 100 - performance.now()));
    const unknownKid = await system.authorize(allowedOp, await forge.withUnknownKey("agent-1"));
    assert.equal(unknownKid.status, 503, unknownKid.text);
    assert.equal(unknownKid.json.reason, "upstream_unavailable");
    // 4. Past the key set's max age every new token is a 503 deny; admin routes 503 too.
    await sleep(Math.max(0, fetchEnd + JWKS_MAX_AGE_MS + 100 - performance.now()));
    const stale = await forge.signed("agent-1");
    const staleReply = await system.authorize(allowedOp, stale);
    assertWithin(staleReply.elapsedMs, DOWN_ANSWER_MS, "authorize with the JWKS unreachable");
    assert.equal(staleReply.status, 503, staleReply.text);
    assert.equal(staleReply.json.reason, "upstream_unavailable");
    const adminStale = await system.call("GET", `${system.url}/partners`, {
      token: await forge.signed("root-admin", { roles: ["admin"] }),
    });
    assert.equal(adminStale.status, 503, adminStale.text);
    const mcpStale = await system.mcp("tools/list", {}, stale);
    assert.equal(mcpStale.status, 503, mcpStale.text);

    await idp.start();
    const took = await recoveryTime(
      async () => (await system.authorize(allowedOp, stale)).status === 200,
      RECOVERY_MS,
    );
    assert.ok(
      took !== undefined,
      `the same token is accepted within ${RECOVERY_MS} ms of the issuer's return`,
    );
    assert.equal((await system.authorize(allowedOp, await forge.withUnknownKey("agent-1"))).status, 401);
    t.diagnostic(`issuer restart → first allow after ${Math.round(took)} ms (bound ${RECOVERY_MS} ms)`);
  });

  test("partner issuer JWKS unreachable: known keys keep verifying assertions; uncached ones 503; recovery", async (t) => {
    const partner = system.partnerIdp;
    const binding = system.binding;
    assert.ok(binding);
    // The main binding's verifier has fetched the partner's keys; the other binding's has not.
    assert.equal((await system.invoke(allowedOp)).status, 200);
    const otherToken = await system.workloadToken(binding.other, "authority/bindings.invoke", OTHER_BINDING);
    const assertion = await system.userAssertion();

    await partner.stop();
    counts.faultsInjected++;
    const known = await system.invoke(allowedOp, { assertion: await system.userAssertion() });
    assert.equal(known.status, 200, known.text);
    const uncached = await system.invoke(allowedOp, { token: otherToken, binding: OTHER_BINDING, assertion });
    assertWithin(uncached.elapsedMs, DOWN_ANSWER_MS, "invoke with the partner JWKS unreachable");
    assert.equal(uncached.status, 503, uncached.text);
    assert.equal(uncached.json.error, "upstream_unavailable");

    await partner.start();
    const took = await recoveryTime(async () => {
      const reply = await system.invoke(allowedOp, { token: otherToken, binding: OTHER_BINDING, assertion });
      return reply.status !== 503;
    }, RECOVERY_MS);
    assert.ok(took !== undefined, `assertions verify again within ${RECOVERY_MS} ms`);
    // Verified now, and denied for what it is: nobody mapped this user on the other binding.
    const after = await system.invoke(allowedOp, { token: otherToken, binding: OTHER_BINDING, assertion });
    assert.equal(after.json.status, "denied", after.text);
    assert.equal(after.json.reason, "missing_subject");
    t.diagnostic(
      `partner issuer restart → assertions verify after ${Math.round(took)} ms (bound ${RECOVERY_MS} ms)`,
    );
  });

  test("no canary, secret or token in any log line or response; summary", (t) => {
    const scanned = assertNoLeaks(system);
    report(
      t,
      "faults-dependencies",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}`,
    );
  });
});
