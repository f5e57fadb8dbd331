import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { sha256Ref } from "../../../../src/bindings/derive.ts";
import {
  type EnvelopeCrypto,
  EnvelopeCryptoUnavailableError,
} from "../../../../src/bindings/envelope-crypto.ts";
import {
  bindingCollections,
  bindingKeys,
  type IdempotencyRecord,
} from "../../../../src/store/binding-model.ts";
import type { SqliteStore } from "../../../../src/store/sqlite/sqlite-store.ts";
import type { Store } from "../../../../src/store/store.ts";
import { BINDING, type BindingsHarness, PARTNER, startBindingsHarness, UPSTREAM_API_KEY } from "./harness.ts";

describe("binding invoke", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness();
  });
  after(async () => {
    await h.close();
  });

  it("executes end to end: auth injected, envelope verified upstream, response redacted, evidence written", async () => {
    const before = h.upstream.received.length;
    const reply = await h.invoke({
      capability_id: "customers",
      method: "GET",
      path: "/customers/cus_00000001",
    });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body.status, "allowed");
    assert.equal(reply.body.permissionId, "customers:get:/customers/{customerId}");
    assert.equal(reply.body.requestId, reply.headers.get("x-request-id"));
    assert.equal(reply.body.result.status, 200);
    const customer = reply.body.result.body;
    assert.equal(customer.id, "cus_00000001");
    assert.equal(customer.name, "Ada Lovelace");
    // The operation's rule masks tax_id to its last four characters.
    assert.notEqual(customer.tax_id, "GB123456789");
    assert.ok(String(customer.tax_id).endsWith("6789"));
    assert.ok(reply.body.result.redaction_events.some((e: { path: string }) => e.path === "/tax_id"));

    const seen = h.upstream.received.slice(before);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]?.apiKeyOk, true, "the auth profile's API key was injected");
    assert.equal(seen[0]?.hadEnvelope, true);
    assert.equal(seen[0]?.operationId, "getCustomer");
    assert.equal(seen[0]?.verifyStatus, 200, `verify said ${seen[0]?.verifyError}`);

    const evidence = await h.call("GET", `/v1/bindings/${BINDING}/evidence/${reply.body.evidenceId}`, {
      token: h.admin,
    });
    assert.equal(evidence.status, 200);
    assert.equal(evidence.body.decision, "allowed");
    assert.equal(evidence.body.transport, "invoke");
    assert.equal(evidence.body.subject_id, h.subjectId);
    assert.equal(evidence.body.client_id, h.agent.client_id);
    assert.equal(evidence.body.permission_id, "customers:get:/customers/{customerId}");
    assert.equal(evidence.body.upstream_status, 200);
    for (const field of [
      "request_hash",
      "upstream_request_hash",
      "response_hash",
      "policy_hash",
      "document_hash",
    ]) {
      assert.match(evidence.body[field], /^sha256:[0-9a-f]{64}$/, field);
    }
    assert.ok(evidence.body.redaction_events.length > 0);
    assert.equal(typeof evidence.body.timings.total_ms, "number");
    assert.ok(!JSON.stringify(evidence.body).includes("GB123456789"), "evidence holds no response data");
    const listed = await h.call("GET", `/v1/bindings/${BINDING}/invocations`, { token: h.admin });
    assert.ok(
      listed.body.items.some((item: { evidence_id: string }) => item.evidence_id === reply.body.evidenceId),
    );
  });

  it("has the upstream refuse calls that bypass the authority or carry a forged envelope", async () => {
    const url = `${h.upstream.url}/customers/cus_00000001`;
    const bypass = await fetch(url, { headers: { "x-api-key": UPSTREAM_API_KEY } });
    assert.equal(bypass.status, 403);
    const forged = await fetch(url, {
      headers: { "x-api-key": UPSTREAM_API_KEY, "x-authority-envelope": "bm90LWFuLWVudmVsb3Bl" },
    });
    assert.equal(forged.status, 403);
    const last = h.upstream.received.at(-1);
    assert.deepEqual([last?.verifyStatus, last?.verifyError], [403, "invalid_signature"]);
  });

  it("accepts permission_id with arguments, applies list redactions and passes a JSON body", async () => {
    const list = await h.invoke({
      capability_id: "customers",
      permission_id: "customers:get:/customers",
      arguments: { query: { limit: 5 } },
    });
    assert.equal(list.status, 200, JSON.stringify(list.body));
    const items = list.body.result.body.items as Array<Record<string, unknown>>;
    assert.ok(items.length > 0);
    for (const item of items) {
      assert.equal(item.tax_id, undefined, "tax_id removed");
      assert.ok(String(item.phone).startsWith("*"), "phone masked");
    }
    const created = await h.invoke({
      capability_id: "customers",
      method: "POST",
      path: "/customers",
      arguments: { body: { name: "Grace Hopper", email: "grace@example.com", tax_id: "US1234567" } },
    });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.equal(created.body.result.status, 201);
    assert.equal(created.body.result.body.name, "Grace Hopper");
    assert.ok(String(created.body.result.body.tax_id).endsWith("4567"));
    assert.notEqual(created.body.result.body.tax_id, "US1234567");
  });

  it("refuses what the sidecar refuses, with the same reason and status: the one enforcement step", async () => {
    const before = h.upstream.received.length;
    const cases: Array<[Record<string, unknown>, number, string]> = [
      [{ query: { limit: 80 } }, 403, "constraint_violation"],
      [{ query: { limit: "ten" } }, 400, "invalid_input"],
      [{ query: { limit: 5, debug: "1" } }, 400, "invalid_input"],
      [{ query: { limit: 5, _method: "DELETE" } }, 400, "invalid_input"],
      [{ query: { limit: 5 }, headers: { "X-HTTP-Method-Override": "DELETE" } }, 400, "invalid_input"],
    ];
    for (const [args, status, reason] of cases) {
      const reply = await h.invoke({
        capability_id: "customers",
        permission_id: "customers:get:/customers",
        arguments: args,
      });
      assert.equal(reply.status, status, JSON.stringify(args));
      // The deny shape names it `reason`; the error shape `error`.
      assert.equal(reply.body.reason ?? reply.body.error, reason, JSON.stringify(reply.body));
    }
    assert.equal(h.upstream.received.length, before);
  });

  it("denies an operation outside the policy with the deny shape, without calling the upstream", async () => {
    const before = h.upstream.received.length;
    const reply = await h.invoke({
      capability_id: "customers",
      method: "DELETE",
      path: "/customers/cus_00000001",
    });
    assert.equal(reply.status, 403);
    assert.deepEqual(reply.body, {
      status: "denied",
      reason: "operation_not_allowed",
      requestId: reply.body.requestId,
      rule: "decide/allowlist",
      remedy: { action: "request_permission", permission_id: "customers:delete:/customers/{customerId}" },
    });
    const unknown = await h.invoke({ capability_id: "customers", method: "GET", path: "/nowhere" });
    assert.deepEqual([unknown.status, unknown.body.reason], [403, "unknown_operation"]);
    const capability = await h.invoke({ capability_id: "billing", method: "GET", path: "/customers" });
    assert.deepEqual([capability.status, capability.body.reason], [403, "unknown_capability"]);
    assert.equal(h.upstream.received.length, before);
    const listed = await h.call("GET", `/v1/bindings/${BINDING}/invocations?limit=1000`, { token: h.admin });
    const denied = listed.body.items.filter((e: { decision: string }) => e.decision === "denied");
    assert.ok(denied.some((e: { reason: string }) => e.reason === "operation_not_allowed"));
  });

  it("never takes the subject from the caller", async () => {
    const reply = await h.invoke({
      capability_id: "customers",
      method: "GET",
      path: "/customers",
      subject_id: "someone-else",
    });
    assert.equal(reply.status, 400);
    assert.equal(reply.body.error, "invalid_request");
  });

  it("denies an external user without a mapping (missing_subject), before any policy is opened", async () => {
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { assertion: await h.userAssertion("unmapped-user") },
    );
    assert.deepEqual(
      [reply.status, reply.body.status, reply.body.reason],
      [401, "denied", "missing_subject"],
    );
  });

  it("requires an Idempotency-Key", async () => {
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { key: null },
    );
    assert.equal(reply.status, 400);
    assert.equal(reply.body.error, "idempotency_key_required");
  });

  it("rejects a revoked workload client before the route's binding is looked at", async () => {
    const created = await h.call("POST", `/v1/bindings/${BINDING}/workload-clients`, {
      token: h.admin,
      body: { name: "short-lived", scopes: ["authority/bindings.invoke"] },
    });
    const client = { client_id: created.body.client.client_id, client_secret: created.body.client_secret };
    const token = await h.workloadToken(client);
    const ok = await h.invoke({ capability_id: "customers", method: "GET", path: "/customers" }, { token });
    assert.equal(ok.status, 200);
    const revoked = await h.call("DELETE", `/v1/bindings/${BINDING}/workload-clients/${client.client_id}`, {
      token: h.admin,
    });
    assert.equal(revoked.body.status, "revoked");
    const again = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { token },
    );
    assert.equal(again.status, 401);
    assert.equal(again.body.error, "invalid_token");
    // On another binding's route the answer is the same 401: revocation is checked first.
    const elsewhere = await h.call("POST", "/v1/bindings/other-binding/invoke", {
      token,
      body: { capability_id: "customers", method: "GET", path: "/customers" },
      headers: { "x-authority-user-assertion": await h.userAssertion(), "idempotency-key": "k-other" },
    });
    assert.equal(elsewhere.status, 401);
    // Its secret no longer gets tokens either.
    const refused = await h.call("POST", `/v1/bindings/${BINDING}/token`, {
      body: { grant_type: "client_credentials", ...client },
    });
    assert.equal(refused.status, 401);
  });

  it("refuses a token of another binding on this binding's route", async () => {
    const other = await h.call("POST", "/partners/acme/bindings", {
      token: h.admin,
      body: {
        binding_id: "acme-other",
        issuer: h.partnerIdp.issuer,
        jwks_url: h.partnerIdp.jwksUri,
        audience: "acme-api",
        tenant_value: "acme-tenant",
      },
    });
    assert.equal(other.status, 201);
    const created = await h.call("POST", "/v1/bindings/acme-other/workload-clients", {
      token: h.admin,
      body: { name: "other-runtime" },
    });
    const token = await h.workloadToken(
      { client_id: created.body.client.client_id, client_secret: created.body.client_secret },
      undefined,
      "acme-other",
    );
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { token },
    );
    assert.equal(reply.status, 403);
    assert.equal(reply.body.error, "insufficient_role");
    // A token request at another binding's token endpoint fails too.
    const wrongEndpoint = await h.call("POST", `/v1/bindings/${BINDING}/token`, {
      body: {
        grant_type: "client_credentials",
        client_id: created.body.client.client_id,
        client_secret: created.body.client_secret,
      },
    });
    assert.equal(wrongEndpoint.status, 401);
  });

  it("needs the invoke scope", async () => {
    const token = await h.workloadToken(h.upstreamClient);
    const reply = await h.invoke(
      { capability_id: "customers", method: "GET", path: "/customers" },
      { token },
    );
    assert.equal(reply.status, 403);
  });

  it("injects a rotated auth-profile secret at once, never the opened one kept from an earlier call", async () => {
    const profile = `/partners/${PARTNER}/caab/auth-profiles/customers-key`;
    const putSecret = async (secret: string) => {
      const reply = await h.call("PUT", profile, {
        token: h.admin,
        body: { type: "static", kind: "api_key", in: "header", name: "x-api-key", secret },
      });
      assert.ok(reply.status === 200 || reply.status === 201, JSON.stringify(reply.body));
    };
    const keyOkOfOneCall = async (): Promise<boolean | undefined> => {
      const before = h.upstream.received.length;
      await h.invoke({ capability_id: "customers", method: "GET", path: "/customers/cus_00000001" });
      const seen = h.upstream.received.slice(before);
      assert.equal(seen.length, 1);
      return seen[0]?.apiKeyOk;
    };
    try {
      assert.equal(await keyOkOfOneCall(), true, "the secret is opened (and may be kept)");
      await putSecret("rotated-key-9876543210");
      assert.equal(await keyOkOfOneCall(), false, "the rotated secret is injected, not the kept one");
    } finally {
      await putSecret(UPSTREAM_API_KEY);
    }
    assert.equal(await keyOkOfOneCall(), true);
  });
});

describe("binding invoke idempotency", () => {
  let h: BindingsHarness;
  before(async () => {
    h = await startBindingsHarness({ upstreamDelayMs: 150 });
  });
  after(async () => {
    await h.close();
  });

  const body = {
    capability_id: "customers",
    method: "POST",
    path: "/customers",
    arguments: { body: { name: "Idem", email: "i@example.com" } },
  };

  it("replays the stored result for the same key and request, without a second upstream call", async () => {
    const handled = h.upstream.handled();
    const first = await h.invoke(body, { key: "create-1" });
    const second = await h.invoke(body, { key: "create-1" });
    assert.equal(first.status, 200);
    assert.deepEqual(second.body, first.body);
    assert.equal(second.headers.get("idempotent-replayed"), "true");
    assert.equal(h.upstream.handled(), handled + 1);
  });

  it("stores a kept result only together with its evidence: when the evidence cannot be written, neither is", async () => {
    const raw = new DatabaseSync((h.store as SqliteStore).path);
    raw.exec(`CREATE TRIGGER refuse_evidence BEFORE INSERT ON documents
      WHEN NEW.collection = '${bindingCollections.invocations}'
      BEGIN SELECT RAISE(ABORT, 'evidence refused'); END`);
    let reply: Awaited<ReturnType<typeof h.invoke>>;
    try {
      reply = await h.invoke(body, { key: "create-no-evidence" });
    } finally {
      raw.exec("DROP TRIGGER refuse_evidence");
      raw.close();
    }
    assert.ok(reply.status >= 500, JSON.stringify(reply.body));
    const kept = await h.store.list<{ state: string }>(bindingCollections.idempotency, { limit: 1000 });
    const evidence = await h.store.list<{ idempotency_key_hash: string | null }>(
      bindingCollections.invocations,
      {
        limit: 1000,
      },
    );
    const withEvidence = new Set(evidence.items.map((item) => item.value.idempotency_key_hash));
    const keyHash = sha256Ref("create-no-evidence");
    assert.equal(withEvidence.has(keyHash), false);
    assert.ok(
      kept.items.every((item) => item.value.state !== "completed" || !item.id.endsWith(keyHash.slice(7))),
      "no replayable result without its evidence",
    );
  });

  it("refuses the same key with a different request (422)", async () => {
    await h.invoke(body, { key: "create-2" });
    const other = await h.invoke(
      { ...body, arguments: { body: { name: "Other", email: "o@example.com" } } },
      { key: "create-2" },
    );
    assert.equal(other.status, 422);
    assert.equal(other.body.error, "idempotency_conflict");
    // The same body for another user is another request too.
    const anotherUser = await h.mapUser("user-456");
    assert.ok(anotherUser.startsWith("ext_"));
    const asOther = await h.invoke(body, { key: "create-2", assertion: await h.userAssertion("user-456") });
    assert.equal(asOther.status, 422);
  });

  it("lets concurrent duplicates cause exactly one upstream call", async () => {
    const handled = h.upstream.handled();
    const replies = await Promise.all([1, 2, 3, 4].map(() => h.invoke(body, { key: "create-concurrent" })));
    for (const reply of replies) {
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      assert.deepEqual(reply.body, replies[0]?.body);
    }
    assert.equal(h.upstream.handled(), handled + 1);
    assert.equal(replies.filter((r) => r.headers.get("idempotent-replayed") === "true").length, 3);
  });

  /** The key's stored record (claim, `sending` or result), as every replica reads it. */
  const keyRecord = (key: string) =>
    h.store.get<IdempotencyRecord>(
      bindingCollections.idempotency,
      bindingKeys.idempotency(BINDING, sha256Ref(key).slice("sha256:".length)),
    );

  /** A replica whose envelope seal is `seal`; the verify route's `open` stays the real one. */
  const sealing = (seal: EnvelopeCrypto["seal"], leaseMs?: number) => {
    const real = h.context.bindings.envelopes;
    if (real === undefined) throw new Error("the harness has envelope keys");
    return h.startReplica({
      bindings: {
        envelopes: { seal, open: real.open },
        ...(leaseMs === undefined ? {} : { idempotency: { leaseMs } }),
      },
    });
  };

  // The `sending` write runs while the envelope is signed and the credentials are made ready
  // (decision 2941): the upstream is still contacted only once it is stored.
  it("never contacts the upstream when the key's `sending` write fails, and releases the key", async () => {
    const failingSendingWrites = new Proxy(h.store, {
      get(target, name) {
        if (name === "putIfMatch") {
          return async (...args: Parameters<Store["putIfMatch"]>) => {
            const [collection, , value] = args;
            if (
              collection === bindingCollections.idempotency &&
              (value as IdempotencyRecord).state === "sending"
            ) {
              await sleep(100); // slower than the envelope and the credentials
              throw new Error("store unavailable");
            }
            return target.putIfMatch(...args);
          };
        }
        const member = Reflect.get(target, name, target);
        return typeof member === "function" ? member.bind(target) : member;
      },
    });
    const replica = await h.startReplica({ store: failingSendingWrites });
    const received = h.upstream.received.length;
    const refused = await h.invoke(body, { key: "create-sending-fails", base: replica.url });
    assert.ok(refused.status >= 500, JSON.stringify(refused.body));
    assert.equal(h.upstream.received.length, received, "nothing reached the upstream");
    assert.equal(await keyRecord("create-sending-fails"), undefined, "the key is released");
    const retried = await h.invoke(body, { key: "create-sending-fails" });
    assert.equal(retried.status, 200, JSON.stringify(retried.body));
    assert.equal(h.upstream.received.length, received + 1);
  });

  it("releases the key when the envelope fails after `sending` was stored meanwhile: a retry runs once", async () => {
    const replica = await sealing(async () => {
      await sleep(100); // the `sending` write is done by now
      throw new EnvelopeCryptoUnavailableError("envelope keys are unavailable");
    });
    const received = h.upstream.received.length;
    const refused = await h.invoke(body, { key: "create-seal-fails", base: replica.url });
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(h.upstream.received.length, received);
    assert.equal(await keyRecord("create-seal-fails"), undefined, "nothing was sent: the key is released");
    const retried = await h.invoke(body, { key: "create-seal-fails" });
    assert.equal(retried.status, 200, JSON.stringify(retried.body));
    assert.equal(h.upstream.received.length, received + 1);
  });

  it("never runs a key twice whose replica stalled after storing `sending`, before the upstream call", async () => {
    let release!: (error: Error) => void;
    const stalled = new Promise<string>((_, reject) => {
      release = reject;
    });
    const replica = await sealing(() => stalled, 200);
    const received = h.upstream.received.length;
    const hanging = h.invoke(body, { key: "create-stalled", base: replica.url });
    try {
      // The replica stands for one that died while signing: its `sending` record is stored.
      for (let i = 0; i < 200 && (await keyRecord("create-stalled"))?.state !== "sending"; i++)
        await sleep(10);
      assert.equal((await keyRecord("create-stalled"))?.state, "sending");
      await sleep(300); // past the claimant's lease
      const retried = await h.invoke(body, { key: "create-stalled" });
      assert.equal(retried.status, 409, JSON.stringify(retried.body));
      assert.equal(retried.body.error, "idempotency_outcome_unknown");
      assert.equal(h.upstream.received.length, received, "never executed");
    } finally {
      release(new EnvelopeCryptoUnavailableError("stopped"));
      await hanging;
    }
  });

  // Decision 2991: a replica that stalls between its claim and its `sending` write (a GC
  // pause, SIGSTOP) longer than the claim's lease, while another replica runs the key.
  it("never runs a key twice whose replica stalled past its lease before storing `sending`", async () => {
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
    });
    let stalledAtSending!: () => void;
    const atSending = new Promise<void>((resolve) => {
      stalledAtSending = resolve;
    });
    const stallBeforeSending = new Proxy(h.store, {
      get(target, name) {
        const member = Reflect.get(target, name, target);
        if (name !== "put" && name !== "putIfMatch") {
          return typeof member === "function" ? member.bind(target) : member;
        }
        return async (...args: [string, string, IdempotencyRecord]) => {
          const [collection, , value] = args;
          if (collection === bindingCollections.idempotency && value.state === "sending") {
            stalledAtSending();
            await woken;
          }
          return (member as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        };
      },
    });
    const replica = await h.startReplica({
      store: stallBeforeSending,
      bindings: { idempotency: { leaseMs: 200 } },
    });
    const received = h.upstream.received.length;
    const stalled = h.invoke(body, { key: "create-stalled-claim", base: replica.url });
    await atSending;
    // The claim lapses; the retry on another replica takes the key over and runs it once.
    const retried = await h.invoke(body, { key: "create-stalled-claim" });
    assert.equal(retried.status, 200, JSON.stringify(retried.body));
    assert.equal(h.upstream.received.length, received + 1);
    wake();
    const woke = await stalled;
    assert.equal(woke.status, 409, JSON.stringify(woke.body));
    assert.equal(woke.body.error, "conflict");
    assert.equal(h.upstream.received.length, received + 1, "the stalled replica never called the upstream");
    assert.equal((await keyRecord("create-stalled-claim"))?.state, "completed");
    const replayed = await h.invoke(body, { key: "create-stalled-claim" });
    assert.deepEqual(replayed.body, retried.body);
    assert.equal(h.upstream.received.length, received + 1);
  });

  it("lets concurrent duplicates on two replicas cause exactly one upstream call", async () => {
    const replica = await h.startReplica();
    const handled = h.upstream.handled();
    const replies = await Promise.all([
      h.invoke(body, { key: "create-replicas" }),
      h.invoke(body, { key: "create-replicas", base: replica.url }),
      h.invoke(body, { key: "create-replicas", base: replica.url }),
    ]);
    for (const reply of replies) {
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      assert.deepEqual(reply.body, replies[0]?.body);
    }
    assert.equal(h.upstream.handled(), handled + 1);
  });
});
