import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { DecisionAuditRecord } from "../../../../src/audit/records.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";
import { CAPABILITY, seedAll } from "./seed.ts";

describe("issuer keys unreachable", () => {
  let h: Harness;

  before(async () => {
    h = await startHarness();
    await seedAll(h.service.context.store, h.service.context.protector);
  });
  after(() => h.close());

  test("a token that cannot be checked is a 503 deny (not an allow, not a 401), and is recorded", async () => {
    const token = await h.token("agent-7");
    // Nothing has fetched the JWKS yet; now the issuer goes away.
    await h.idp.app.close();
    const res = await h.authorize({ capability_id: CAPABILITY, method: "GET", path: "/users/1" }, token);
    assert.equal(res.status, 503);
    assert.deepEqual(res.body, {
      status: "denied",
      reason: "upstream_unavailable",
      requestId: res.body.requestId,
      rule: "service/unavailable",
      remedy: { action: "retry_later" },
    });
    assert.equal(await h.service.recorder.flush(5000), true);
    const [entry] = await h.service.context.store.readLog<DecisionAuditRecord>(logs.audit);
    assert.equal(entry?.value.requestId, res.body.requestId);
    assert.equal(entry?.value.actor, null);
    assert.equal(entry?.value.reason, "upstream_unavailable");
  });
});
