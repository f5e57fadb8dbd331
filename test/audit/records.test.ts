import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { evidenceRecord, mcpAuditRecord, safeRepresentation } from "../../src/audit/mcp-records.ts";
import { auditPath, boundedText, decisionRecord } from "../../src/audit/records.ts";
import {
  decodeUsageComponent,
  encodeUsageComponent,
  parseUsageKey,
  periodOf,
  periodsBetween,
  usageKey,
  usageKeysFor,
} from "../../src/audit/usage.ts";

describe("usage keys", () => {
  test("separators inside ids cannot forge another key, and keys parse back", () => {
    const dims = {
      partner_id: "p|1",
      subject_id: "a|b%7C",
      capability_id: "api",
      permission_id: "api:get:/x/{id}",
      state: "allowed",
    } as const;
    const key = usageKey("day", "2026-06-01", dims);
    assert.equal(key.split("|").length, 7);
    assert.deepEqual(parseUsageKey(key), { granularity: "day", period: "2026-06-01", ...dims });
  });

  test("absent values are empty components; long ones are hashed so keys stay under 512 characters", () => {
    assert.equal(encodeUsageComponent(null), "");
    assert.equal(decodeUsageComponent(""), null);
    const long = "x".repeat(5000);
    const encoded = encodeUsageComponent(long);
    assert.match(encoded, /^#[0-9a-f]{32}$/);
    assert.equal(encoded, encodeUsageComponent(long), "stable");
    const key = usageKey("hour", "2026-06-01T10", {
      partner_id: long,
      subject_id: long,
      capability_id: long,
      permission_id: long,
      state: "denied",
    });
    assert.ok(key.length < 512);
    assert.equal(parseUsageKey(key)?.subject_id, encoded);
  });

  test("periods are UTC days and hours", () => {
    const t = new Date("2026-06-01T23:59:59.999Z");
    assert.equal(periodOf(t, "day"), "2026-06-01");
    assert.equal(periodOf(t, "hour"), "2026-06-01T23");
    assert.equal(
      usageKeysFor(t, {
        partner_id: null,
        subject_id: null,
        capability_id: null,
        permission_id: null,
        state: "denied",
      }).length,
      2,
    );
    assert.deepEqual(
      periodsBetween(new Date("2026-06-01T22:10:00Z"), new Date("2026-06-02T01:00:00Z"), "hour"),
      ["2026-06-01T22", "2026-06-01T23", "2026-06-02T00", "2026-06-02T01"],
    );
    assert.deepEqual(
      periodsBetween(new Date("2026-06-01T22:10:00Z"), new Date("2026-06-02T01:00:00Z"), "day"),
      ["2026-06-01", "2026-06-02"],
    );
  });

  test("malformed keys do not parse", () => {
    for (const key of ["", "d|x", "x|2026-06-01|||||allowed", "d|2026-06-01||||||maybe"]) {
      assert.equal(parseUsageKey(key), undefined);
    }
  });
});

describe("record builders", () => {
  test("decision records bound every field and drop query strings", () => {
    const record = decisionRecord({
      actor: "a".repeat(5000),
      subject_id: "s",
      partner_id: null,
      capability_id: null,
      method: "GET",
      path: "/x?secret=1#frag",
      decision: "allowed",
      reason: "missing_policy",
      transport: "mcp",
      requestId: "r",
      time: "2026-06-01T00:00:00.000Z",
    });
    assert.equal(record.path, "/x");
    assert.equal(record.reason, null, "an allow carries no reason");
    assert.ok((record.actor ?? "").length <= 1024);
    assert.match(record.id, /^dec_/);
    assert.equal(auditPath(null), null);
    assert.equal(boundedText("🙂".repeat(600), 10)?.endsWith("…"), true);
  });

  test("MCP rows hash the URL, redact secrets again and flag truncation", () => {
    const row = mcpAuditRecord(
      {
        actor: "a",
        subject_id: "s",
        partner_id: "p",
        capability_id: "c",
        tool: "t",
        permission_id: "c:get:/x",
        method: "GET",
        url: "https://api.example.com/x?key=top-secret",
        status: 502,
        duration_ms: 12.34567,
        error_code: "upstream_error",
        request: { query: { q: "ok" }, headers: { authorization: "Bearer zzz" } },
        response: { items: Array.from({ length: 200 }, (_, i) => ({ i })) },
        requestId: "r",
        time: new Date("2026-06-01T00:00:00Z"),
      },
      256,
    );
    assert.match(row.url_hash ?? "", /^sha256:[0-9a-f]{64}$/);
    const text = JSON.stringify(row);
    assert.equal(text.includes("top-secret"), false);
    assert.equal(text.includes("zzz"), false);
    assert.equal(row.request.truncated, false);
    assert.equal(row.response.truncated, true);
    assert.ok((row.response.json ?? "").length <= 256);
    assert.ok(row.response.size > 256);
    assert.equal(row.duration_ms, 12.346);
    assert.deepEqual(safeRepresentation(undefined), { json: null, truncated: false, size: 0 });
  });

  test("evidence digests request, response and idempotency key instead of storing them", () => {
    const record = evidenceRecord({
      binding_id: "b",
      actor: "w",
      subject_id: "s",
      partner_id: "p",
      capability_id: "c",
      permission_id: "c:get:/x",
      decision: "allowed",
      policy: { document_hash: `sha256:${"1".repeat(64)}`, policy_version: "2026-06-01T00:00:00.000Z" },
      request: { b: 1, a: 2 },
      response_status: 200,
      response: { ok: true },
      redaction_events: 2,
      idempotency_key: "idem-123",
      requestId: "r",
      time: new Date("2026-06-01T00:00:00Z"),
    });
    assert.equal(
      record.request_digest,
      evidenceRecord({ ...record, request: { a: 2, b: 1 } } as never).request_digest,
    );
    assert.match(record.idempotency_key_hash ?? "", /^sha256:/);
    assert.equal(JSON.stringify(record).includes("idem-123"), false);
    assert.equal(record.reason, null);
  });
});
