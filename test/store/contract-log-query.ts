/**
 * The filter and retention contract of Store (queryLog, trimLog, deleteCounters), run by
 * runStoreContract against every backend: the same entries, the same queries, the same answers.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { findReceipt, parseReceipt, receiptOf } from "../../src/audit/receipts.ts";
import { StoreError } from "../../src/store/errors.ts";
import type { LogPosition, LogQuery, Store, TimedLogEntry } from "../../src/store/store.ts";
import type { OpenedStore } from "./contract.ts";

interface Row {
  readonly kind: string;
  readonly partner_id: string;
  readonly subject_id: string;
  readonly capability_id: string | null;
  readonly decision: string;
  readonly reason: string | null;
  readonly time: string;
  readonly n: number;
}

const T0 = Date.parse("2026-05-01T00:00:00.000Z");

/** Deterministic rows over two partners, times not in seq order (late writes), some sharing a ms. */
function rows(count: number): Row[] {
  const out: Row[] = [];
  let seed = 7;
  const next = (m: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % m;
  };
  for (let n = 0; n < count; n++) {
    const partner = next(3) === 0 ? "p-b" : "p-a";
    const denied = next(4) === 0;
    out.push({
      kind: next(5) === 0 ? "policy_change" : "decision",
      partner_id: partner,
      subject_id: `${partner}-s${next(4)}`,
      capability_id: next(6) === 0 ? null : `cap${next(3)}`,
      decision: denied ? "denied" : "allowed",
      reason: denied ? (next(2) === 0 ? "expired" : "not_assigned") : null,
      time: new Date(T0 + n * 1000 - next(4) * 1500).toISOString(),
      n,
    });
  }
  return out;
}

async function collect(store: Store, log: string, query: LogQuery, limit: number) {
  const entries: TimedLogEntry<Row>[] = [];
  let after: LogPosition | undefined;
  for (let pages = 0; pages < 10_000; pages++) {
    const page = await store.queryLog<Row>(log, { ...query, limit, ...(after ? { after } : {}) });
    assert.ok(page.entries.length <= limit);
    entries.push(...page.entries);
    if (page.next === undefined) return entries;
    after = page.next;
  }
  assert.fail("paging did not end");
}

function expected(all: readonly Row[], query: LogQuery): number[] {
  const seqOf = new Map(all.map((row, i) => [row, i + 1]));
  return all
    .filter((row) => {
      const time = Date.parse(row.time);
      if (query.since !== undefined && time < query.since) return false;
      if (query.until !== undefined && time > query.until) return false;
      return Object.entries(query.where ?? {}).every(
        ([field, value]) => (row as unknown as Record<string, unknown>)[field] === value,
      );
    })
    .sort((a, b) => Date.parse(a.time) - Date.parse(b.time) || (seqOf.get(a) ?? 0) - (seqOf.get(b) ?? 0))
    .map((row) => row.n);
}

const invalid = (error: unknown): boolean => {
  assert.ok(error instanceof StoreError);
  assert.equal(error.code, "store_invalid_argument");
  return true;
};

export function runLogQueryContract(open: () => Promise<OpenedStore>): void {
  const withStore = async (test: (store: Store) => Promise<void>) => {
    const { store, cleanup } = await open();
    try {
      await test(store);
    } finally {
      await cleanup();
    }
  };

  describe("log queries", () => {
    it("a filtered first page holds the matches, however many other entries come first", () =>
      withStore(async (store) => {
        const noise = Array.from({ length: 6000 }, (_, i) => ({
          partner_id: "p-a",
          subject_id: "busy",
          decision: "allowed",
          time: new Date(T0 + i).toISOString(),
        }));
        await store.appendMany("audit", noise.slice(0, 3000));
        await store.appendMany("audit", noise.slice(3000));
        await store.append("audit", {
          partner_id: "p-a",
          subject_id: "rare",
          time: new Date(T0 + 9000).toISOString(),
        });
        const page = await store.queryLog<{ subject_id: string }>("audit", {
          where: { partner_id: "p-a", subject_id: "rare" },
        });
        assert.equal(page.entries.length, 1);
        assert.equal(page.entries[0]?.value.subject_id, "rare");
        assert.equal(page.entries[0]?.seq, 6001);
        assert.equal(page.entries[0]?.time, T0 + 9000);
        assert.equal(page.next, undefined);
      }));

    it("checks conditions no index answers on a bounded number of candidates, then continues", () =>
      withStore(async (store) => {
        const rows = Array.from({ length: 5200 }, (_, i) => ({
          partner_id: "p",
          kind: i === 5150 ? "rare" : "common",
          time: new Date(T0 + i).toISOString(),
        }));
        await store.appendMany("audit", rows.slice(0, 2600));
        await store.appendMany("audit", rows.slice(2600));
        const first = await store.queryLog("audit", { where: { partner_id: "p", kind: "rare" } });
        assert.equal(first.entries.length, 0, "5,000 candidates examined, none matched");
        assert.deepEqual(first.next, { time: T0 + 4999, seq: 5000 });
        const rest = await store.queryLog<{ kind: string }>("audit", {
          where: { partner_id: "p", kind: "rare" },
          ...(first.next ? { after: first.next } : {}),
        });
        assert.deepEqual(
          rest.entries.map((e) => e.seq),
          [5151],
        );
        assert.equal(rest.next, undefined);
        const common = await store.queryLog("audit", { where: { kind: "common" }, limit: 10 });
        assert.equal(common.entries.length, 10);
      }));

    it("answers every filter combination, in (time, seq) order, across pages", () =>
      withStore(async (store) => {
        const all = rows(400);
        await store.appendMany("audit", all.slice(0, 150));
        for (const row of all.slice(150, 170)) await store.append("audit", row);
        await store.appendMany("audit", all.slice(170));
        const queries: LogQuery[] = [
          {},
          { where: { partner_id: "p-a" } },
          { where: { partner_id: "p-b", subject_id: "p-b-s1" } },
          { where: { partner_id: "p-a", capability_id: "cap2", decision: "denied" } },
          { where: { reason: "expired" } },
          { where: { partner_id: "p-a", kind: "policy_change" } },
          { where: { decision: "allowed" }, since: T0 + 100_000, until: T0 + 200_000 },
          { where: { partner_id: "p-b", subject_id: "p-a-s1" } },
          { since: T0 + 390_000 },
          { where: { subject_id: "nobody" } },
        ];
        for (const query of queries) {
          for (const limit of [7, 1000]) {
            const got = await collect(store, "audit", query, limit);
            assert.deepEqual(
              got.map((entry) => entry.value.n),
              expected(all, query),
              `${JSON.stringify(query)} limit ${limit}`,
            );
          }
        }
        const full = await store.queryLog<Row>("audit", { where: { partner_id: "p-a" }, limit: 10 });
        assert.equal(full.entries.length, 10, "an indexed query's page is full while matches follow");
        assert.deepEqual(full.next, { time: full.entries[9]?.time, seq: full.entries[9]?.seq });
      }));

    it("keeps a partner's filter whatever position a caller continues from", () =>
      withStore(async (store) => {
        const all = rows(200);
        await store.appendMany("audit", all);
        const theirs = await store.queryLog<Row>("audit", { where: { partner_id: "p-b" }, limit: 1000 });
        const positions: LogPosition[] = [
          { time: 0, seq: 0 },
          { time: 0, seq: Number.MAX_SAFE_INTEGER },
          ...theirs.entries.slice(0, 5).map((entry) => ({ time: entry.time - 1, seq: entry.seq })),
        ];
        for (const after of positions) {
          const wheres: Record<string, string>[] = [
            { partner_id: "p-a" },
            { partner_id: "p-a", subject_id: "p-b-s0" },
          ];
          for (const where of wheres) {
            const page = await store.queryLog<Row>("audit", { where, after, limit: 1000 });
            for (const entry of page.entries) assert.equal(entry.value.partner_id, "p-a");
          }
        }
      }));

    it("matches strings only, exactly; entries without a time sort first", () =>
      withStore(async (store) => {
        await store.appendMany("mixed", [
          { subject_id: 5, kind: 5 },
          { subject_id: "5", kind: "5" },
          { subject_id: "S" },
          "not an object",
          { subject_id: "s", time: "yesterday" },
          { subject_id: "s", time: "2026-05-01T00:00:00Z" },
        ]);
        const five = await store.queryLog("mixed", { where: { subject_id: "5" } });
        assert.deepEqual(
          five.entries.map((e) => e.seq),
          [2],
        );
        const kind = await store.queryLog("mixed", { where: { kind: "5" } });
        assert.deepEqual(
          kind.entries.map((e) => e.seq),
          [2],
        );
        const lower = await store.queryLog("mixed", { where: { subject_id: "s" } });
        assert.deepEqual(
          lower.entries.map((e) => [e.seq, e.time]),
          [
            [5, 0],
            [6, T0],
          ],
        );
        assert.equal((await store.queryLog("mixed", { where: { nope: "x" } })).entries.length, 0);
        assert.equal((await store.queryLog("never-written")).entries.length, 0);
      }));

    it("refuses malformed queries", () =>
      withStore(async (store) => {
        const bad: unknown[] = [
          { where: { "a.b": "x" } },
          { where: { "$.x": "x" } },
          { where: { subject_id: 5 } },
          { where: { subject_id: "x".repeat(513) } },
          { where: { tool: "x".repeat(4097) } },
          { where: Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`f${i}`, "x"])) },
          { since: 1.5 },
          { after: { time: -1, seq: 0 } },
          { after: { time: 0, seq: "1" } },
          { limit: 0 },
        ];
        for (const query of bad) {
          await assert.rejects(store.queryLog("audit", query as LogQuery), invalid, JSON.stringify(query));
        }
      }));
  });

  describe("retention", () => {
    it("trims the oldest entries by age and by count, never the newest; seqs continue", () =>
      withStore(async (store) => {
        const all = rows(50);
        await store.appendMany("audit", all);
        await assert.rejects(store.trimLog("audit", {}), invalid);
        await assert.rejects(store.trimLog("audit", { keepLast: 0 }), invalid);
        await assert.rejects(store.trimLog("audit", { keepLast: 5, max: 10_001 }), invalid);
        assert.equal(await store.trimLog("audit", { keepLast: 40, max: 4 }), 4);
        assert.equal(await store.trimLog("audit", { keepLast: 40 }), 6);
        assert.equal(await store.trimLog("audit", { keepLast: 40 }), 0);
        assert.equal((await store.readLog("audit", { limit: 1000 }))[0]?.seq, 11);
        // Age: removes from the oldest while older than the cutoff, stops at the first younger one.
        const cutoff = T0 + 20_000;
        const removed = await store.trimLog("audit", { olderThan: cutoff });
        const left = await store.readLog<Row>("audit", { limit: 1000 });
        assert.equal(left.length, 40 - removed);
        assert.ok(Date.parse(left[0]?.value.time ?? "") >= cutoff);
        assert.ok(removed >= 5);
        // Everything is old: all but the newest go.
        assert.equal(
          await store.trimLog("audit", { olderThan: T0 + 10_000_000, max: 10_000 }),
          left.length - 1,
        );
        assert.deepEqual(
          (await store.readLog("audit")).map((e) => e.seq),
          [50],
        );
        assert.equal(await store.append("audit", { time: "2026-06-01T00:00:00Z", subject_id: "after" }), 51);
        assert.equal(await store.logLength("audit"), 51);
        const page = await store.queryLog("audit", {});
        assert.deepEqual(
          page.entries.map((e) => e.seq),
          [50, 51],
        );
        const kept = await store.queryLog("audit", { where: { subject_id: all[49]?.subject_id ?? "" } });
        assert.deepEqual(
          kept.entries.map((e) => e.seq),
          [50],
        );
        assert.equal(await store.trimLog("empty", { keepLast: 1 }), 0);
      }));

    it("deletes counters under a prefix before a key, in batches", () =>
      withStore(async (store) => {
        for (const key of [
          "h|2026-05-01T10|a",
          "h|2026-05-01T11|a",
          "h|2026-05-02T00|a",
          "d|2026-05-01|a",
          "h",
        ]) {
          await store.increment("usage", key, 2);
        }
        await assert.rejects(store.deleteCounters("usage", "h|", "h|2026-05-02", 0), invalid);
        assert.equal(await store.deleteCounters("usage", "h|", "h|2026-05-02", 1), 1);
        assert.equal(await store.deleteCounters("usage", "h|", "h|2026-05-02"), 1);
        assert.equal(await store.deleteCounters("usage", "h|", "h|2026-05-02"), 0);
        assert.deepEqual(await store.readCounters("usage"), {
          "d|2026-05-01|a": 2,
          h: 2,
          "h|2026-05-02T00|a": 2,
        });
      }));
  });

  describe("receipts (decision 2863)", () => {
    it("a receipt is found however many records share its millisecond", () =>
      withStore(async (store) => {
        // A burst: more records in one ms than any fixed number of lookup pages reads, two partners.
        const time = new Date(T0 + 5).toISOString();
        const burst = Array.from({ length: 2_600 }, (_, i) => ({
          kind: "decision",
          id: `dec_burst-${i}`,
          partner_id: i % 13 === 0 ? "p-b" : "p-a",
          time,
        }));
        await store.appendMany("audit", burst.slice(0, 1_300));
        await store.appendMany("audit", burst.slice(1_300));
        const last = burst.at(-1);
        assert.ok(last !== undefined && last.partner_id === "p-a");
        const receipt = parseReceipt(receiptOf("audit", last));
        assert.ok(receipt !== undefined);
        const found = await findReceipt(store, receipt, "p-a");
        assert.deepEqual(found?.value, last, "the last record of the burst, by its r2 receipt");
        assert.equal(found?.seq, burst.length);
        const byId = parseReceipt(`r1.a.${T0 + 5}.${last.id}`);
        assert.ok(byId !== undefined);
        assert.deepEqual((await findReceipt(store, byId, undefined))?.value, last, "and by an r1 receipt");
        assert.equal(await findReceipt(store, receipt, "p-b"), undefined, "never in another partner's scope");
      }));
  });

  describe("batches of writes", () => {
    it("applies puts, deletes, appends and increments in order, together", () =>
      withStore(async (store) => {
        await store.put("assignments", "gone", { old: true });
        await store.writeAll([
          { op: "put", collection: "assignments", id: "p/s/c", value: { cap: "c" } },
          { op: "delete", collection: "assignments", id: "gone" },
          {
            op: "append",
            log: "audit",
            value: { action: "assign", partner_id: "p", time: "2026-05-01T00:00:00Z" },
          },
          { op: "append", log: "audit", value: { action: "again", partner_id: "p" } },
          { op: "increment", counters: "usage", key: "k", by: 3 },
          { op: "put", collection: "keys", id: "idem", value: 1, ttlMs: 60_000 },
        ]);
        assert.deepEqual(await store.get("assignments", "p/s/c"), { cap: "c" });
        assert.equal(await store.get("assignments", "gone"), undefined);
        assert.deepEqual(
          (await store.readLog("audit")).map((e) => [e.seq, (e.value as { action: string }).action]),
          [
            [1, "assign"],
            [2, "again"],
          ],
        );
        const indexed = await store.queryLog("audit", { where: { partner_id: "p" } });
        assert.deepEqual(
          indexed.entries.map((e) => e.seq),
          [2, 1],
        );
        assert.deepEqual(await store.readCounters("usage"), { k: 3 });
        assert.equal(await store.get("keys", "idem"), 1);
        await store.writeAll([]);
      }));

    it("refuses a batch with one bad write before applying any", () =>
      withStore(async (store) => {
        const bad: unknown[] = [
          [
            { op: "put", collection: "c", id: "a", value: 1 },
            { op: "append", log: "Bad Name", value: 1 },
          ],
          [
            { op: "put", collection: "c", id: "a", value: 1 },
            { op: "put", collection: "c", id: "b", value: () => 1 },
          ],
          [{ op: "put", collection: "c", id: "a", value: 1 }, { op: "drop" }],
          [{ op: "increment", counters: "n", key: "k", by: 1.5 }],
          Array.from({ length: 101 }, (_, i) => ({ op: "put", collection: "c", id: `x${i}`, value: 1 })),
        ];
        for (const writes of bad) {
          await assert.rejects(store.writeAll(writes as never), StoreError);
        }
        assert.equal(await store.count("c"), 0);
        assert.equal(await store.logLength("audit"), 0);
      }));
  });
}
