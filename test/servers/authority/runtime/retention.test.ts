import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { logs } from "../../../../src/store/model.ts";
import { eventually } from "../../../store/contract.ts";
import { type Harness, startHarness } from "./harness.ts";

describe("retention in the authority service", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ settings: { "audit-retention-count": "3", "retention-interval": "1" } });
  });
  after(() => h.close());

  test("trims the audit log in the background, counts what it removed", async () => {
    const { store } = h.service.context;
    const rows = Array.from({ length: 20 }, (_, i) => ({
      kind: "decision",
      partner_id: "p",
      decision: "allowed",
      time: new Date(Date.now() - 1000 + i).toISOString(),
    }));
    await store.appendMany(logs.audit, rows);
    await eventually(
      async () => (await store.readLog(logs.audit, { limit: 100 })).length <= 3,
      "audit trimmed",
    );
    const metrics = await (await fetch(`${h.url}/metrics`)).text();
    const line = metrics
      .split("\n")
      .find((l) => l.startsWith('authority_retention_removed_total{record="audit"}'));
    assert.ok(line !== undefined, "the removal counter is exposed");
    assert.ok(Number(line.split(" ").at(-1)) >= 17);
    // Decisions are still recorded (and the newest are what stays).
    const admin = await h.token("root", { roles: ["admin"] });
    const page = await h.get("/admin/audit", admin);
    assert.equal(page.status, 200);
    assert.ok((page.body.items as unknown[]).length <= 3);
  });
});
