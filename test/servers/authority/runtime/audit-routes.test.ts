import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { BILLING_SYNC_COLLECTION, periodOf } from "../../../../src/audit/usage.ts";
import { logs } from "../../../../src/store/model.ts";
import { type Harness, startHarness } from "./harness.ts";
import {
  CAPABILITY,
  PARTNER,
  seedAll,
  seedCapability,
  seedPartner,
  seedPolicy,
  seedSubject,
} from "./seed.ts";

describe("GET /admin/audit, /admin/usage, /admin/mcp-audit", () => {
  let h: Harness;
  let admin: string;
  let auditor: string;
  let partnerAdmin: string;
  let otherPartnerAdmin: string;

  before(async () => {
    h = await startHarness();
    const { store, protector } = h.service.context;
    await seedAll(store, protector);
    await seedPartner(store, "partner-2");
    await seedCapability(store, { partnerId: "partner-2" });
    const other = await seedSubject(store, { subjectId: "agent-p2", partnerId: "partner-2" });
    await seedPolicy(store, protector, { subject: other, allow: [["GET", "/users/{id}"]] });
    admin = await h.token("root", { roles: ["admin"] });
    auditor = await h.token("eve", { roles: ["auditor"] });
    partnerAdmin = await h.token("pa1", { roles: ["partner_admin"], partnerId: PARTNER });
    otherPartnerAdmin = await h.token("pa2", { roles: ["partner_admin"], partnerId: "partner-2" });

    const t7 = await h.token("agent-7");
    const tp2 = await h.token("agent-p2");
    const ask = (path: string, method = "GET") => ({ capability_id: CAPABILITY, method, path });
    // partner-1: 3 allowed (2 on one permission), 2 denied; partner-2: 1 allowed; anonymous: 1 denied.
    for (const [body, token] of [
      [ask("/users/1"), t7],
      [ask("/users/2"), t7],
      [ask("/invoices", "POST"), t7],
      [ask("/users/1", "DELETE"), t7],
      [ask("/nowhere"), t7],
      [ask("/users/9"), tp2],
      [ask("/users/9"), undefined],
    ] as const) {
      await h.authorize(body, token);
    }
    // A policy change as the admin API writes it, to show both kinds side by side.
    await store.append(logs.audit, {
      kind: "policy_change",
      action: "assign",
      actor: "root",
      partner_id: PARTNER,
      subject_id: "agent-7",
      capability_id: CAPABILITY,
      time: new Date().toISOString(),
      requestId: "req_policy_change_1",
    });
    assert.equal(await h.service.recorder.flush(5000), true);
  });
  after(() => h.close());

  test("admin sees every record; filters by kind, decision, reason, subject, capability", async () => {
    const all = await h.get("/admin/audit", admin);
    assert.equal(all.status, 200);
    assert.equal((all.body.items as unknown[]).length, 8);
    const denied = await h.get("/admin/audit?kind=decision&decision=denied", admin);
    assert.equal((denied.body.items as unknown[]).length, 3);
    const reason = await h.get("/admin/audit?reason=operation_not_allowed", admin);
    const items = reason.body.items as Array<Record<string, unknown>>;
    assert.equal(items.length, 1);
    assert.equal(items[0]?.subject_id, "agent-7");
    assert.equal(items[0]?.capability_id, CAPABILITY);
    assert.equal(typeof items[0]?.seq, "number");
    const changes = await h.get("/admin/audit?kind=policy_change&subject=agent-7", admin);
    assert.equal((changes.body.items as unknown[]).length, 1);
    const none = await h.get(`/admin/audit?until=${encodeURIComponent("2000-01-01T00:00:00Z")}`, admin);
    assert.equal((none.body.items as unknown[]).length, 0);
  });

  test("pages with an opaque cursor, oldest first", async () => {
    const seen: unknown[] = [];
    let cursor: string | undefined;
    for (let i = 0; i < 10; i++) {
      const page = await h.get(
        `/admin/audit?limit=3${cursor === undefined ? "" : `&cursor=${cursor}`}`,
        auditor,
      );
      assert.equal(page.status, 200);
      seen.push(...(page.body.items as Array<{ seq: number }>).map((item) => item.seq));
      cursor = page.body.next as string | undefined;
      if (cursor === undefined) break;
    }
    assert.deepEqual(
      [...seen].sort((a, b) => Number(a) - Number(b)),
      [1, 2, 3, 4, 5, 6, 7, 8],
    );
  });

  test("a forged, edited or replayed cursor is a 400, never another query's rows", async () => {
    const first = await h.get("/admin/audit?limit=1", otherPartnerAdmin);
    assert.equal(first.status, 200);
    const theirs = await h.get("/admin/audit?limit=1", admin);
    const mine = await h.get("/admin/audit?limit=1", partnerAdmin);
    const cursors = [theirs.body.next, mine.body.next].filter((c): c is string => typeof c === "string");
    assert.equal(cursors.length, 2);
    const forged = [
      "1",
      "0",
      Buffer.from("c1.0.0.00000000000000000000000000000000").toString("base64url"),
      // partner-1's own cursor with the position edited
      Buffer.from(
        Buffer.from(cursors[1] as string, "base64url")
          .toString()
          .replace(/^c1\.[0-9]+\./, "c1.0."),
      ).toString("base64url"),
      "%00",
      "x".repeat(129),
    ];
    // partner-1's admin replays the admin's unscoped cursor, and its own with other filters.
    for (const [path, cursor] of [
      ["/admin/audit", cursors[0]],
      ["/admin/audit?subject=agent-p2", cursors[1]],
      ["/admin/mcp-audit", cursors[1]],
      ["/admin/evidence", cursors[1]],
      ...forged.slice(0, 3).map((c) => ["/admin/audit", c]),
    ] as const) {
      const sep = path.includes("?") ? "&" : "?";
      const res = await h.get(`${path}${sep}cursor=${encodeURIComponent(String(cursor))}`, partnerAdmin);
      assert.equal(res.status, 400, `${path} ${cursor}`);
      assert.equal(res.body.error, "invalid_request");
    }
    for (const cursor of forged.slice(3)) {
      const res = await h.get(`/admin/audit?cursor=${encodeURIComponent(cursor)}`, partnerAdmin);
      assert.ok(res.status === 400 || res.status === 200, cursor);
      for (const row of (res.body.items ?? []) as Array<Record<string, unknown>>) {
        assert.equal(row.partner_id, PARTNER);
      }
    }
  });

  test("partner scope holds in every filter combination", async () => {
    const filters = [
      "",
      "subject=agent-p2",
      "subject=agent-7",
      `capability=${CAPABILITY}`,
      "decision=allowed",
      "decision=denied",
      "reason=operation_not_allowed",
      "kind=decision",
      "kind=policy_change",
      `subject=agent-p2&capability=${CAPABILITY}&decision=allowed`,
      "since=2000-01-01T00:00:00Z",
    ];
    for (const view of ["/admin/audit", "/admin/mcp-audit", "/admin/evidence"]) {
      for (const filter of filters) {
        if (view !== "/admin/audit" && filter.startsWith("kind")) continue;
        if (view === "/admin/mcp-audit" && /decision|reason/.test(filter)) continue;
        const res = await h.get(`${view}?${filter}`, partnerAdmin);
        assert.equal(res.status, 200, `${view}?${filter}`);
        for (const row of res.body.items as Array<Record<string, unknown>>) {
          assert.equal(row.partner_id, PARTNER, `${view}?${filter}`);
        }
      }
    }
    const none = await h.get("/admin/audit?subject=agent-p2", partnerAdmin);
    assert.equal((none.body.items as unknown[]).length, 0);
  });

  test("a partner admin sees only its partner and may not ask for another", async () => {
    const own = await h.get("/admin/audit", partnerAdmin);
    const rows = own.body.items as Array<Record<string, unknown>>;
    assert.equal(rows.length, 6);
    assert.ok(rows.every((row) => row.partner_id === PARTNER));
    const other = await h.get("/admin/audit", otherPartnerAdmin);
    assert.equal((other.body.items as unknown[]).length, 1);
    const refused = await h.get("/admin/audit?partner=partner-2", partnerAdmin);
    assert.equal(refused.status, 403);
    assert.equal(refused.body.error, "insufficient_role");
  });

  test("a filtered first page holds the matches, not a scan window (6,000 other records first)", async () => {
    const { store } = h.service.context;
    const noise = Array.from({ length: 6000 }, (_, i) => ({
      kind: "decision",
      decision: "allowed",
      partner_id: PARTNER,
      subject_id: `busy-${i % 50}`,
      capability_id: CAPABILITY,
      time: new Date(Date.now() - 60_000 + i).toISOString(),
    }));
    for (let i = 0; i < noise.length; i += 1000) await store.appendMany(logs.audit, noise.slice(i, i + 1000));
    await store.append(logs.audit, {
      kind: "decision",
      decision: "denied",
      reason: "policy_expired",
      partner_id: PARTNER,
      subject_id: "late-subject",
      capability_id: CAPABILITY,
      time: new Date().toISOString(),
    });
    const page = await h.get("/admin/audit?subject=late-subject&decision=denied", partnerAdmin);
    assert.equal(page.status, 200);
    const items = page.body.items as Array<Record<string, unknown>>;
    assert.equal(items.length, 1);
    assert.equal(items[0]?.reason, "policy_expired");
    assert.equal(page.body.next, undefined);
    const byReason = await h.get("/admin/audit?reason=policy_expired", admin);
    assert.equal((byReason.body.items as unknown[]).length, 1);
  });

  test("runtime subjects and anonymous callers cannot read audit", async () => {
    assert.equal((await h.get("/admin/audit", await h.token("agent-7"))).status, 403);
    const anonymous = await fetch(`${h.url}/admin/audit`);
    assert.equal(anonymous.status, 401);
  });

  test("usage by subject, API and permission, per period and success state, with billing sync status", async () => {
    const bySubject = await h.get("/admin/usage?period=day&group_by=subject", admin);
    assert.equal(bySubject.status, 200);
    assert.deepEqual(bySubject.body.totals, { allowed: 4, denied: 3 });
    const rows = bySubject.body.items as Array<Record<string, unknown>>;
    const agent7 = rows.filter((r) => r.subject_id === "agent-7");
    assert.deepEqual(agent7.map((r) => [r.state, r.count]).sort(), [
      ["allowed", 3],
      ["denied", 2],
    ]);
    assert.ok(rows.every((r) => r.billing_sync_status === "pending"));

    const byPermission = await h.get(
      `/admin/usage?period=hour&group_by=permission&partner=${PARTNER}&state=allowed`,
      admin,
    );
    const perms = byPermission.body.items as Array<Record<string, unknown>>;
    const getUser = perms.find((r) => r.permission_id === "billing-api:get:/users/{id}");
    assert.equal(getUser?.count, 2);
    assert.equal(getUser?.capability_id, CAPABILITY);
    assert.deepEqual(byPermission.body.totals, { allowed: 3, denied: 0 });

    // partner + subject: the range of that subject's keys only, the same counts.
    const oneSubject = await h.get(`/admin/usage?period=hour&partner=${PARTNER}&subject=agent-7`, admin);
    assert.deepEqual(oneSubject.body.totals, { allowed: 3, denied: 2 });
    const nobody = await h.get(`/admin/usage?partner=${PARTNER}&subject=agent-70`, admin);
    assert.deepEqual(nobody.body.totals, { allowed: 0, denied: 0 });

    const byApi = await h.get("/admin/usage?group_by=capability", partnerAdmin);
    assert.deepEqual(byApi.body.totals, { allowed: 3, denied: 2 });

    await h.service.context.store.put(BILLING_SYNC_COLLECTION, `d|${periodOf(new Date(), "day")}`, {
      synced_at: new Date().toISOString(),
    });
    const synced = await h.get("/admin/usage", admin);
    assert.ok(
      (synced.body.items as Array<Record<string, unknown>>).every((r) => r.billing_sync_status === "synced"),
    );
  });

  test("usage rejects too long a range and since after until", async () => {
    const wide = await h.get(
      "/admin/usage?period=hour&since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z",
      admin,
    );
    assert.equal(wide.status, 400);
    const reversed = await h.get("/admin/usage?since=2026-03-01T00:00:00Z&until=2026-01-01T00:00:00Z", admin);
    assert.equal(reversed.status, 400);
  });

  test("MCP audit lists the rows other paths record, hashed and truncated", async () => {
    await h.service.recorder.recordMcpCall({
      actor: "agent-7",
      subject_id: "agent-7",
      partner_id: PARTNER,
      capability_id: CAPABILITY,
      tool: "billing_get_user",
      permission_id: "billing-api:get:/users/{id}",
      method: "GET",
      url: "https://api.example.com/v1/users/1?api_key=secret",
      status: 200,
      duration_ms: 12.5,
      request: { id: "1", password: "hunter2" },
      response: { name: "x".repeat(10_000) },
      requestId: "req_mcp_1",
      time: new Date(),
    });
    await h.service.recorder.flush(5000);
    const res = await h.get("/admin/mcp-audit?tool=billing_get_user", auditor);
    assert.equal(res.status, 200);
    const [row] = res.body.items as Array<Record<string, unknown>>;
    assert.ok(row);
    assert.match(String(row.url_hash), /^sha256:[0-9a-f]{64}$/);
    assert.equal(JSON.stringify(row).includes("secret"), false);
    assert.equal(JSON.stringify(row).includes("hunter2"), false);
    assert.equal((row.response as { truncated: boolean }).truncated, true);
    assert.equal((row.request as { truncated: boolean }).truncated, false);
    const other = await h.get("/admin/mcp-audit", otherPartnerAdmin);
    assert.equal((other.body.items as unknown[]).length, 0);
  });

  test("a decision's receipt finds its record, for its partner and the platform only", async () => {
    const t7 = await h.token("agent-7");
    const response = await fetch(`${h.url}/v1/authorize-invocation`, {
      method: "POST",
      headers: { authorization: `Bearer ${t7}`, "content-type": "application/json" },
      body: JSON.stringify({ capability_id: CAPABILITY, method: "GET", path: "/users/5" }),
    });
    assert.equal(response.status, 200);
    const receipt = response.headers.get("x-authority-receipt");
    assert.match(receipt ?? "", /^r2\.a\.\d+\.[A-Za-z0-9_-]{22}$/);
    assert.equal(await h.service.recorder.flush(5000), true);
    const path = `/admin/audit/receipts/${encodeURIComponent(receipt ?? "")}`;
    const mine = await h.get(path, partnerAdmin);
    assert.equal(mine.status, 200);
    assert.equal(mine.body.path, "/users/5");
    assert.equal((mine.body.chain as { stream: string }).stream.length > 0, true);
    assert.equal((await h.get(path, admin)).status, 200);
    assert.equal((await h.get(path, otherPartnerAdmin)).status, 404);
    assert.equal((await h.get("/admin/audit/receipts/r1.a.1.dec_nothing", admin)).status, 404);
    assert.equal((await h.get("/admin/audit/receipts/not-a-receipt", admin)).status, 404);
  });
});
