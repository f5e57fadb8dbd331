/**
 * Tampering with what the system stores and hands around. Policies are protected by the
 * upstream crypto service (the production protector); the sidecar caches verified policies
 * in a real Redis. Flipped bytes anywhere in a stored artifact, unsigned record fields
 * changed, an artifact moved to another subject, replayed or altered authority envelopes
 * and tampered sealed cache entries are all refused — never an allow.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { Redis } from "ioredis";
import { policyEntryKey, policyHeadKey } from "../../src/policy/cache/index.ts";
import type { PolicyRecord } from "../../src/policy/record.ts";
import { readPolicyRecord } from "../../src/policy/record-store.ts";
import { collections, storeKeys } from "../../src/store/model.ts";
import type { HttpReply } from "../helpers/http-client.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";
import { assertNoLeaks, newCounts, report } from "../helpers/suite-report.ts";
import {
  AGENT,
  ALLOWED,
  BINDING,
  CAPABILITY,
  OTHER_BINDING,
  PARTNER,
  SECOND_AGENT,
  type System,
  startSystem,
} from "../helpers/system.ts";

const counts = newCounts();
const allowedOp = { capability_id: CAPABILITY, method: "GET", path: "/items/7" };
/** Random positions per property, on top of the fixed ones (kept modest: each costs a crypto call). */
const RANDOM_RUNS = 16;

/** `text` (base64) with the byte at `position` XOR-ed with `mask`, re-encoded. */
function flipBase64(text: string, position: number, mask: number): string {
  const bytes = Buffer.from(text, "base64");
  const index = position % bytes.length;
  bytes[index] = (bytes[index] ?? 0) ^ (mask & 0xff || 1);
  return bytes.toString("base64");
}

/** Positions spread over the whole byte string: the start, the end and evenly between. */
function spreadPositions(length: number, count: number): number[] {
  const fixed = [0, 1, 2, 3, 4, 5, 8, 16, 24, 32, length - 1, length - 2, length - 16, length - 17];
  const even = Array.from({ length: count }, (_, i) => Math.floor(((i + 0.5) * length) / count));
  return [...new Set([...fixed, ...even].filter((p) => p >= 0 && p < length))];
}

describe("tampering", () => {
  let cacheRedis: RedisServerHandle;
  let redis: Redis;
  let system: System;
  let agent: string;

  before(async () => {
    cacheRedis = await startRedisServer();
    redis = new Redis(cacheRedis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
    system = await startSystem({ protection: "upstream", sidecar: { redisUrl: cacheRedis.url } });
    agent = await system.agentToken();
  });
  after(async () => {
    await system?.close();
    redis?.disconnect();
    await cacheRedis?.stop();
  });

  const policyOf = async (subjectId: string): Promise<PolicyRecord> => {
    const record = await readPolicyRecord(system.store, subjectId);
    assert.ok(record, `policy of ${subjectId}`);
    return record;
  };
  const putPolicy = (subjectId: string, record: PolicyRecord) =>
    system.store.put(collections.policies, storeKeys.policy(subjectId), record);

  const assertDenied = (reply: HttpReply, reason: string, what: string) => {
    assert.notEqual(reply.status, 200, `${what}: never an allow`);
    assert.equal(reply.json?.status, "denied", `${what}: ${reply.text}`);
    assert.equal(reply.json.reason, reason, what);
  };

  test("flipped bytes anywhere in a stored v1 artifact: policy_verification_failed on every path", async () => {
    const genuine = await policyOf(AGENT);
    assert.equal((await system.authorize(allowedOp, agent)).status, 200);
    const length = Buffer.from(genuine.artifact, "base64").length;
    let tried = 0;
    const tryFlip = async (position: number, mask: number) => {
      const artifact = flipBase64(genuine.artifact, position, mask);
      // Same head and document hash: a cache keyed on them must still notice.
      await putPolicy(AGENT, { ...genuine, artifact });
      const reply = await system.authorize(allowedOp, agent);
      assertDenied(reply, "policy_verification_failed", `byte ${position} ^ ${mask}`);
      assert.equal(reply.status, 403);
      tried++;
      if (tried % 8 === 1) {
        const listed = await system.mcp("tools/list", {}, agent);
        const apiTools = (listed.json.result?.tools ?? []).filter((t: { name: string }) =>
          /_[0-9a-f]{8}$/.test(t.name),
        );
        assert.deepEqual(apiTools, [], "no API tool from a tampered policy");
        // A sidecar that must load the policy afresh decrypt-verifies it and refuses it too.
        await redis.del(policyEntryKey(AGENT));
        system.sidecar?.sidecar.policies.evict(AGENT);
        const check = await system.check({ token: agent });
        assert.equal(check.allowed, false);
        assert.equal(JSON.parse(check.response.denied_response.body).reason, "policy_verification_failed");
      }
    };
    for (const position of spreadPositions(length, 24)) await tryFlip(position, 0x01);
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: length - 1 }), fc.integer({ min: 1, max: 255 }), tryFlip),
      { numRuns: RANDOM_RUNS },
    );
    // Truncated, extended and emptied artifacts.
    for (const artifact of [
      genuine.artifact.slice(0, -8),
      `${genuine.artifact}AAAA`,
      genuine.artifact.slice(4),
      "",
    ]) {
      await putPolicy(AGENT, { ...genuine, artifact });
      assertDenied(
        await system.authorize(allowedOp, agent),
        "policy_verification_failed",
        "truncated/extended",
      );
      tried++;
    }
    counts.attacksTried += tried;
    await putPolicy(AGENT, genuine);
    assert.equal((await system.authorize(allowedOp, agent)).status, 200, "the genuine artifact still works");
    // The sidecar remembered the refusal under this head (fail closed until the head moves
    // or the max age passes); a fresh load verifies the genuine artifact again.
    await redis.del(policyEntryKey(AGENT));
    system.sidecar?.sidecar.policies.evict(AGENT);
    const check = await system.check({ token: agent });
    assert.equal(check.allowed, true, JSON.stringify(check.response.denied_response?.body));
  });

  test("flipped bytes in a v2 (headless) artifact: binding invoke denies, nothing reaches the upstream", async () => {
    const binding = system.binding;
    assert.ok(binding);
    const genuine = await policyOf(binding.subjectId);
    assert.equal((await system.invoke(allowedOp)).status, 200);
    const hits = system.upstream.hits.length;
    const length = Buffer.from(genuine.artifact, "base64").length;
    for (const position of spreadPositions(length, 10)) {
      await putPolicy(binding.subjectId, {
        ...genuine,
        artifact: flipBase64(genuine.artifact, position, 0x80),
      });
      const reply = await system.invoke(allowedOp);
      assertDenied(reply, "policy_verification_failed", `v2 byte ${position}`);
      counts.attacksTried++;
    }
    assert.equal(system.upstream.hits.length, hits, "no tampered policy reached the upstream");
    await putPolicy(binding.subjectId, genuine);
    assert.equal((await system.invoke(allowedOp)).status, 200);
  });

  test("record fields outside the signature are not trusted: a revoked policy stays revoked", async () => {
    const second = await system.agentToken(SECOND_AGENT);
    const revoked = await system.call(
      "POST",
      `${system.url}/partners/${PARTNER}/caab/subjects/${SECOND_AGENT}/policy/revoke`,
      {
        token: await system.adminToken(),
      },
    );
    assert.equal(revoked.status, 200, revoked.text);
    const record = await policyOf(SECOND_AGENT);
    const forged: Array<[string, PolicyRecord]> = [
      ["revoked_at cleared", { ...record, revoked_at: null }],
      ["expiry extended", { ...record, revoked_at: null, expires_at: "2099-01-01T00:00:00.000Z" }],
      [
        "allowlist widened",
        {
          ...record,
          revoked_at: null,
          capabilities: [
            {
              capability_id: CAPABILITY,
              catalog_version: "1",
              allowed_permission_ids: [...ALLOWED, `${CAPABILITY}:get:/items`],
              auth_profile_ref: "items-key",
            },
          ],
        },
      ],
      ["head raised", { ...record, revoked_at: null, head: record.head + 100 }],
    ];
    for (const [what, value] of forged) {
      await putPolicy(SECOND_AGENT, value);
      const reply = await system.authorize(allowedOp, second);
      assertDenied(reply, "policy_revoked", what);
      counts.attacksTried++;
    }
    await putPolicy(SECOND_AGENT, { ...record, document_hash: `sha256:${"0".repeat(64)}` });
    assertDenied(
      await system.authorize(allowedOp, second),
      "policy_verification_failed",
      "document_hash changed",
    );
    counts.attacksTried++;
    await putPolicy(SECOND_AGENT, record);
  });

  test("an artifact moved to another subject is refused (v1 and v2)", async () => {
    const admin = await system.adminToken();
    // A fresh v1 subject with its own, narrower policy.
    const subject = "agent-3";
    assert.equal(
      (
        await system.call("POST", `${system.url}/partners/${PARTNER}/users`, {
          token: admin,
          json: { subject_id: subject, subject_type: "agent", display_name: "Agent 3" },
        })
      ).status,
      201,
    );
    const assigned = await system.call(
      "PUT",
      `${system.url}/partners/${PARTNER}/caab/subjects/${subject}/policies/${CAPABILITY}`,
      {
        token: admin,
        json: { allowed_permission_ids: [`${CAPABILITY}:post:/items`], ttl_seconds: 600 },
      },
    );
    assert.equal(assigned.status, 200, assigned.text);
    const token = await system.agentToken(subject);
    assertDenied(await system.authorize(allowedOp, token), "operation_not_allowed", "its own policy");
    const own = await policyOf(subject);
    const donor = await policyOf(AGENT);
    for (const [what, value] of [
      ["artifact alone", { ...own, artifact: donor.artifact }],
      [
        "artifact and document hash",
        { ...own, artifact: donor.artifact, document_hash: donor.document_hash },
      ],
      ["the whole record", donor],
    ] as Array<[string, PolicyRecord]>) {
      await putPolicy(subject, value);
      assertDenied(await system.authorize(allowedOp, token), "policy_verification_failed", `v1: ${what}`);
      counts.attacksTried++;
    }
    await putPolicy(subject, own);

    // v2: a second mapped user of the binding, granted only POST /items.
    const mapped = await system.call("POST", `${system.url}/v1/bindings/${BINDING}/subjects`, {
      token: admin,
      json: { external_subject: "user-456", display_name: "User 456" },
    });
    assert.equal(mapped.status, 201, mapped.text);
    const otherSubject: string = mapped.json.mapping.subject_id;
    const granted = await system.call("POST", `${system.url}/v1/bindings/${BINDING}/apis`, {
      token: admin,
      json: {
        subject_id: otherSubject,
        capability_id: CAPABILITY,
        allowed_permission_ids: [`${CAPABILITY}:post:/items`],
        ttl_seconds: 600,
      },
    });
    assert.equal(granted.status, 200, granted.text);
    const assertion = await system.userAssertion("user-456");
    assertDenied(
      await system.invoke(allowedOp, { assertion }),
      "operation_not_allowed",
      "v2: its own policy",
    );
    const binding = system.binding;
    assert.ok(binding);
    const v2Donor = await policyOf(binding.subjectId);
    const v2Own = await policyOf(otherSubject);
    for (const [what, value, reason] of [
      ["the whole record", v2Donor, "policy_verification_failed"],
      [
        "the record, re-filed under this subject",
        { ...v2Donor, subject_id: otherSubject },
        "subject_mismatch",
      ],
    ] as Array<[string, PolicyRecord, string]>) {
      await putPolicy(otherSubject, value);
      assertDenied(await system.invoke(allowedOp, { assertion }), reason, `v2: ${what}`);
      counts.attacksTried++;
    }
    await putPolicy(otherSubject, v2Own);
  });

  test("an older, validly signed record of the same subject replayed into the store is refused", async () => {
    // The loader remembers the newest signed policy_version it verified per subject; an older
    // one put back by a store writer (e.g. from before a revocation) never allows again.
    const token = await system.agentToken(AGENT);
    const before = await policyOf(AGENT);
    const revoked = await system.call(
      "POST",
      `${system.url}/partners/${PARTNER}/caab/subjects/${AGENT}/policy/revoke`,
      {
        token: await system.adminToken(),
      },
    );
    assert.equal(revoked.status, 200);
    assertDenied(await system.authorize(allowedOp, token), "policy_revoked", "after revocation");
    await putPolicy(AGENT, before);
    assertDenied(await system.authorize(allowedOp, token), "policy_verification_failed", "replayed record");
    counts.attacksTried++;
    // Restore a live grant for the tests below.
    const assigned = await system.call(
      "PUT",
      `${system.url}/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${CAPABILITY}`,
      {
        token: await system.adminToken(),
        json: { allowed_permission_ids: [...ALLOWED], ttl_seconds: 3600 },
      },
    );
    assert.equal(assigned.status, 200);
  });

  test("authority envelopes: replays with other arguments, operations or bindings, expired or altered, are refused", async () => {
    const binding = system.binding;
    assert.ok(binding);
    const before = system.upstream.hits.length;
    assert.equal((await system.invoke(allowedOp)).status, 200);
    const envelope = system.upstream.hits.slice(before).find((hit) => hit.path === "/items/7")?.headers[
      "x-authority-envelope"
    ];
    assert.ok(typeof envelope === "string" && envelope.length > 100, "the upstream received an envelope");
    system.leaks.secret(envelope);
    const upstreamToken = await system.workloadToken(
      binding.upstreamClient,
      "authority/authority.broker.execute",
    );
    const request = {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getItem",
      arguments: { path: { itemId: "7" }, query: {}, body: null },
      protectedEnvelope: envelope,
    };
    const verify = (body: unknown, token = upstreamToken) =>
      system.call("POST", `${system.url}/v1/authority/verify`, { token, json: body });
    const genuine = await verify(request);
    assert.equal(genuine.status, 200, genuine.text);
    assert.deepEqual(genuine.json, {
      profile: "partner-profile-v2",
      bindingId: BINDING,
      operationId: "getItem",
      decision: "allow",
      verified: true,
    });
    assert.equal((await verify(request)).status, 200, "an upstream retry within the lifetime verifies again");

    const refused = async (what: string, body: unknown, status: number, codes: string[], token?: string) => {
      const reply = await verify(body, token);
      assert.equal(reply.status, status, `${what}: ${reply.text}`);
      assert.ok(codes.includes(reply.json.error), `${what}: ${reply.json.error}`);
      assert.equal(reply.text.includes(envelope.slice(0, 40)), false, "the envelope is not echoed");
      counts.attacksTried++;
    };
    await refused(
      "other arguments",
      { ...request, arguments: { path: { itemId: "8" }, query: {}, body: null } },
      403,
      ["digest_mismatch"],
    );
    await refused(
      "extra query",
      { ...request, arguments: { path: { itemId: "7" }, query: { limit: "5" }, body: null } },
      403,
      ["digest_mismatch"],
    );
    await refused(
      "another operation",
      { ...request, operationId: "createItem", arguments: { path: {}, query: {}, body: { name: "x" } } },
      403,
      ["operation_mismatch", "permission_mismatch"],
    );
    const otherToken = await system.workloadToken(
      binding.other,
      "authority/authority.broker.execute",
      OTHER_BINDING,
    );
    await refused(
      "presented by another binding",
      { ...request, bindingId: OTHER_BINDING },
      403,
      ["binding_mismatch"],
      otherToken,
    );
    await refused("another binding named in the request", { ...request, bindingId: OTHER_BINDING }, 403, [
      "binding_mismatch",
    ]);
    await refused("unknown profile", { ...request, profile: "partner-profile-v9" }, 400, ["unknown_profile"]);
    const length = Buffer.from(envelope, "base64").length;
    for (const position of spreadPositions(length, 10)) {
      await refused(
        `byte ${position} flipped`,
        { ...request, protectedEnvelope: flipBase64(envelope, position, 0x04) },
        403,
        ["invalid_signature", "invalid_envelope"],
      );
    }
    await refused(
      "truncated",
      { ...request, protectedEnvelope: envelope.slice(0, envelope.length / 2) },
      403,
      ["invalid_signature"],
    );
    system.clock.offsetMs = 70_000;
    try {
      await refused("expired (replayed after its lifetime)", request, 403, ["envelope_expired"]);
    } finally {
      system.clock.offsetMs = 0;
    }
  });

  test("tampered sealed sidecar cache entries are discarded and re-verified, never believed", async () => {
    const sidecar = system.sidecar;
    assert.ok(sidecar);
    const subject = SECOND_AGENT;
    const token = await system.agentToken(subject);
    const admin = await system.adminToken();
    const reassigned = await system.call(
      "PUT",
      `${system.url}/partners/${PARTNER}/caab/subjects/${subject}/policies/${CAPABILITY}`,
      {
        token: admin,
        json: { allowed_permission_ids: [...ALLOWED], ttl_seconds: 3600 },
      },
    );
    assert.equal(reassigned.status, 200, reassigned.text);
    assert.equal((await system.check({ token })).allowed, true);
    // The sidecar writes the sealed entry after the Check is answered.
    for (let tries = 0; tries < 400 && (await redis.get(policyEntryKey(subject))) === null; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    const sealed = await redis.get(policyEntryKey(subject));
    const head = await redis.get(policyHeadKey(subject));
    assert.ok(sealed !== null && head !== null, "the sidecar sealed the verified policy into Redis");
    const victim = await redis.get(policyEntryKey(AGENT));
    // The grant is revoked; the attacker puts the old head back with altered entries.
    const revoked = await system.call(
      "POST",
      `${system.url}/partners/${PARTNER}/caab/subjects/${subject}/policy/revoke`,
      { token: admin },
    );
    assert.equal(revoked.status, 200);
    const metric = async () => {
      const text = await (await fetch(`http://127.0.0.1:${sidecar.metricsPort}/metrics`)).text();
      const match = /authority_sidecar_policy_verification_failures_total\{layer="redis"\} (\d+)/.exec(text);
      return Number(match?.[1] ?? 0);
    };
    // v1.<iv>.<ciphertext>.<mac>: the version changed, then bytes flipped in each base64url part
    // (decoded and re-encoded, so the bytes really differ).
    const parts = sealed.split(".");
    const forgeries: string[] = [["v2", ...parts.slice(1)].join(".")];
    for (let index = 1; index < parts.length; index++) {
      const bytes = Buffer.from(parts[index] ?? "", "base64url");
      for (const at of [0, Math.floor(bytes.length / 2), bytes.length - 1]) {
        const copy = Buffer.from(bytes);
        copy[at] = (copy[at] ?? 0) ^ 0x01;
        forgeries.push(parts.map((p, i) => (i === index ? copy.toString("base64url") : p)).join("."));
      }
    }
    forgeries.push(sealed.slice(0, -10), `${sealed}x`, "v1....", "");
    if (victim !== null) forgeries.push(victim);
    for (const forged of forgeries) {
      const failures = await metric();
      await redis.set(policyHeadKey(subject), head);
      await redis.set(policyEntryKey(subject), forged);
      sidecar.sidecar.policies.evict(subject);
      const answer = await system.check({ token });
      assert.equal(answer.allowed, false, `a tampered entry (${forged.slice(0, 12)}…) must not allow`);
      const reason = JSON.parse(answer.response.denied_response.body).reason;
      assert.equal(reason, "policy_revoked", forged.slice(0, 12));
      if (forged !== "") assert.ok((await metric()) > failures, "the refusal is counted");
      counts.attacksTried++;
    }
  });

  test("no canary, secret or token in any log line or response; summary", (t) => {
    const scanned = assertNoLeaks(system);
    report(
      t,
      "tampering",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}`,
    );
  });
});
