/**
 * The one behaviour contract of Store, run against every backend. Each test gets a fresh,
 * empty store from `open` and calls its cleanup afterwards.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { compareCodePoints, StoreError } from "../../src/store/errors.ts";
import type { Store } from "../../src/store/store.ts";
import { runLogQueryContract } from "./contract-log-query.ts";

export interface OpenedStore {
  readonly store: Store;
  cleanup(): Promise<void>;
}

/** Polls until `check` returns true; fails after a generous deadline (never asserts on speed). */
export async function eventually(
  check: () => Promise<boolean>,
  what: string,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) assert.fail(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function hasCode(code: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof StoreError, `expected a StoreError, got ${String(error)}`);
    assert.equal(error.code, code);
    return true;
  };
}

async function allPages(store: Store, collection: string, limit: number, prefix?: string) {
  const ids: string[] = [];
  let after: string | undefined;
  let pages = 0;
  for (;;) {
    const page = await store.list<unknown>(collection, { limit, prefix, after });
    pages++;
    ids.push(...page.items.map((item) => item.id));
    assert.ok(page.items.length <= limit);
    if (page.next === undefined) return { ids, pages };
    assert.equal(page.items.length, limit, "a page with a next cursor is full");
    assert.equal(page.next, page.items.at(-1)?.id);
    after = page.next;
  }
}

function shuffled<T>(items: readonly T[]): T[] {
  const copy = [...items];
  // Deterministic shuffle: the order must not depend on luck to expose sorting bugs.
  let seed = 42;
  for (let i = copy.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    const j = seed % (i + 1);
    const a = copy[i] as T;
    copy[i] = copy[j] as T;
    copy[j] = a;
  }
  return copy;
}

export function runStoreContract(name: string, open: () => Promise<OpenedStore>): void {
  async function withStore(test: (store: Store) => Promise<void>): Promise<void> {
    const { store, cleanup } = await open();
    try {
      await test(store);
    } finally {
      await cleanup();
    }
  }

  describe(`Store contract: ${name}`, () => {
    describe("documents", () => {
      it("gets undefined for a missing id, then what was put, then the overwrite", () =>
        withStore(async (store) => {
          assert.equal(await store.get("things", "a"), undefined);
          await store.put("things", "a", { n: 1 });
          assert.deepEqual(await store.get("things", "a"), { n: 1 });
          await store.put("things", "a", { n: 2, extra: true });
          assert.deepEqual(await store.get("things", "a"), { n: 2, extra: true });
          assert.equal(await store.count("things"), 1);
        }));

      it("keeps collections apart", () =>
        withStore(async (store) => {
          await store.put("left", "same", "L");
          await store.put("right", "same", "R");
          assert.equal(await store.get("left", "same"), "L");
          assert.equal(await store.get("right", "same"), "R");
          await store.delete("left", "same");
          assert.equal(await store.get("right", "same"), "R");
        }));

      it("round-trips nested JSON values of every JSON type", () =>
        withStore(async (store) => {
          const value = {
            string: 'héllo "quoted" \n\t \\ 😀 \u2028',
            number: -12.5e-3,
            big: Number.MAX_SAFE_INTEGER,
            zero: 0,
            bool: false,
            nil: null,
            empty: {},
            list: [1, "two", [3, [4, { five: 5 }]], null, true],
            deep: { a: { b: { c: { d: { e: ["f"] } } } } },
          };
          await store.put("json", "v", value);
          assert.deepEqual(await store.get("json", "v"), value);
          for (const scalar of ["text", 42, true, null, [], ""]) {
            await store.put("json", "scalar", scalar);
            assert.deepEqual(await store.get("json", "scalar"), scalar);
          }
          const page = await store.list("json");
          assert.deepEqual(page.items.find((item) => item.id === "v")?.value, value);
        }));

      it("deletes: true for a live document, false when absent, and it is gone everywhere", () =>
        withStore(async (store) => {
          await store.put("d", "x", 1);
          await store.put("d", "y", 2);
          assert.equal(await store.delete("d", "x"), true);
          assert.equal(await store.delete("d", "x"), false);
          assert.equal(await store.delete("d", "never"), false);
          assert.equal(await store.get("d", "x"), undefined);
          assert.deepEqual(
            (await store.list("d")).items.map((item) => item.id),
            ["y"],
          );
          assert.equal(await store.count("d"), 1);
        }));

      it("creates only when absent and never overwrites a live document", () =>
        withStore(async (store) => {
          assert.equal(await store.create("c", "k", { v: "first" }), true);
          assert.equal(await store.create("c", "k", { v: "second" }), false);
          assert.deepEqual(await store.get("c", "k"), { v: "first" });
          await store.delete("c", "k");
          assert.equal(await store.create("c", "k", { v: "third" }), true);
          assert.deepEqual(await store.get("c", "k"), { v: "third" });
        }));

      it("lets exactly one of many concurrent creates win", () =>
        withStore(async (store) => {
          const contenders = Array.from({ length: 50 }, (_, i) => i);
          const results = await Promise.all(
            contenders.map((i) => store.create("race", "prize", { winner: i })),
          );
          const winners = contenders.filter((i) => results[i]);
          assert.equal(winners.length, 1);
          assert.deepEqual(await store.get("race", "prize"), { winner: winners[0] });
          assert.equal(await store.count("race"), 1);
        }));

      it("counts live documents per collection", () =>
        withStore(async (store) => {
          assert.equal(await store.count("empty"), 0);
          await Promise.all(Array.from({ length: 37 }, (_, i) => store.put("counted", `id-${i}`, i)));
          await store.put("counted", "id-0", "overwritten");
          await store.put("other", "id-0", 0);
          assert.equal(await store.count("counted"), 37);
          await store.delete("counted", "id-5");
          assert.equal(await store.count("counted"), 36);
        }));
    });

    describe("expiry", () => {
      it("makes a document with a TTL absent after it expires (get, list, count, delete)", () =>
        withStore(async (store) => {
          await store.put("ttl", "short", "gone soon", { ttlMs: 50 });
          await store.put("ttl", "long", "stays", { ttlMs: 600_000 });
          await store.put("ttl", "forever", "stays");
          await eventually(async () => (await store.get("ttl", "short")) === undefined, "short TTL expiry");
          assert.equal(await store.get("ttl", "long"), "stays");
          assert.equal(await store.get("ttl", "forever"), "stays");
          assert.deepEqual(
            (await store.list("ttl")).items.map((item) => item.id),
            ["forever", "long"],
          );
          assert.equal(await store.count("ttl"), 2);
          assert.equal(await store.delete("ttl", "short"), false);
        }));

      it("lets create take over an expired id", () =>
        withStore(async (store) => {
          assert.equal(await store.create("nonce", "n1", "first", { ttlMs: 30 }), true);
          await eventually(async () => (await store.get("nonce", "n1")) === undefined, "nonce expiry");
          assert.equal(await store.create("nonce", "n1", "second", { ttlMs: 600_000 }), true);
          assert.equal(await store.get("nonce", "n1"), "second");
          assert.equal(await store.create("nonce", "n1", "third"), false);
        }));

      it("putIfMatch and deleteIfMatch write only while the live document holds the token", () =>
        withStore(async (store) => {
          const mine = { field: "claim", equals: "token-a" };
          // Absent: nothing to compare with, nothing written.
          assert.equal(await store.putIfMatch("cas", "k", { claim: "token-a", v: 0 }, mine), false);
          assert.equal(await store.get("cas", "k"), undefined);
          await store.put("cas", "k", { claim: "token-a", v: 1 }, { ttlMs: 600_000 });
          assert.equal(await store.putIfMatch("cas", "k", { claim: "token-a", v: 2 }, mine), true);
          assert.deepEqual(await store.get("cas", "k"), { claim: "token-a", v: 2 });
          // Taken over by another writer: the old token no longer writes or deletes.
          await store.put("cas", "k", { claim: "token-b", v: 3 });
          assert.equal(await store.putIfMatch("cas", "k", { claim: "token-a", v: 4 }, mine), false);
          assert.equal(await store.deleteIfMatch("cas", "k", mine), false);
          assert.deepEqual(await store.get("cas", "k"), { claim: "token-b", v: 3 });
          assert.equal(await store.deleteIfMatch("cas", "k", { field: "claim", equals: "token-b" }), true);
          assert.equal(await store.get("cas", "k"), undefined);
          assert.deepEqual((await store.list("cas")).items, []);
          // Only a string equals a string; other shapes never match.
          for (const value of [{ claim: 5 }, { claim: ["5"] }, "5", ["5"], { other: "5" }, null]) {
            await store.put("cas", "shape", value);
            const five = { field: "claim", equals: "5" };
            assert.equal(await store.putIfMatch("cas", "shape", { claim: "5" }, five), false);
            assert.equal(await store.deleteIfMatch("cas", "shape", five), false);
          }
        }));

      it("putIfMatch sets the new TTL, and an expired document never matches", () =>
        withStore(async (store) => {
          const token = { field: "claim", equals: "t" };
          await store.put("cas", "lease", { claim: "t" });
          assert.equal(
            await store.putIfMatch("cas", "lease", { claim: "t", n: 1 }, token, { ttlMs: 30 }),
            true,
          );
          await eventually(async () => (await store.get("cas", "lease")) === undefined, "lease expiry");
          assert.equal(await store.putIfMatch("cas", "lease", { claim: "t", n: 2 }, token), false);
          assert.equal(await store.deleteIfMatch("cas", "lease", token), false);
          assert.equal(await store.get("cas", "lease"), undefined);
          assert.equal(await store.create("cas", "lease", { claim: "u" }), true);
        }));

      it("lets exactly one of many concurrent putIfMatch calls with one token win", () =>
        withStore(async (store) => {
          await store.put("cas", "race", { claim: "start" });
          const wins = await Promise.all(
            Array.from({ length: 12 }, (_, i) =>
              store.putIfMatch("cas", "race", { claim: `next-${i}` }, { field: "claim", equals: "start" }),
            ),
          );
          assert.equal(wins.filter(Boolean).length, 1);
          const winner = wins.indexOf(true);
          assert.deepEqual(await store.get("cas", "race"), { claim: `next-${winner}` });
        }));

      it("refuses a match whose field is not a plain name", () =>
        withStore(async (store) => {
          await store.put("cas", "k", { claim: "t" });
          for (const field of ["", "a.b", "$.claim", "a'b", "A", "x".repeat(65)]) {
            await assert.rejects(
              store.putIfMatch("cas", "k", { claim: "t" }, { field, equals: "t" }),
              (error: unknown) => error instanceof StoreError && error.code === "store_invalid_argument",
            );
            await assert.rejects(store.deleteIfMatch("cas", "k", { field, equals: "t" }), StoreError);
          }
          assert.deepEqual(await store.get("cas", "k"), { claim: "t" });
        }));

      it("drops the TTL when a document is put again without one", () =>
        withStore(async (store) => {
          await store.put("ttl", "kept", "v1", { ttlMs: 40 });
          await store.put("ttl", "kept", "v2");
          // A sentinel written later with the same TTL: once it is gone, "kept" would be too.
          await store.put("ttl", "sentinel", "s", { ttlMs: 40 });
          await eventually(async () => (await store.get("ttl", "sentinel")) === undefined, "sentinel expiry");
          assert.equal(await store.get("ttl", "kept"), "v2");
          assert.equal(await store.count("ttl"), 1);
        }));

      it("skips many expired documents when listing and counting", () =>
        withStore(async (store) => {
          await Promise.all(
            Array.from({ length: 120 }, (_, i) =>
              store.put(
                "mixed",
                `k${String(i).padStart(3, "0")}`,
                i,
                i % 2 === 0 ? { ttlMs: 30 } : undefined,
              ),
            ),
          );
          await eventually(async () => (await store.count("mixed")) === 60, "half of the documents expire");
          const { ids } = await allPages(store, "mixed", 7);
          assert.equal(ids.length, 60);
          assert.ok(ids.every((id) => Number(id.slice(1)) % 2 === 1));
        }));
    });

    describe("listing", () => {
      it("lists in id order with a default page of 100 and pages through everything once", () =>
        withStore(async (store) => {
          const ids = Array.from({ length: 250 }, (_, i) => `item-${String(i).padStart(4, "0")}`);
          for (const id of shuffled(ids)) await store.put("many", id, { id });
          const first = await store.list<{ id: string }>("many");
          assert.equal(first.items.length, 100);
          assert.deepEqual(
            first.items.map((item) => item.id),
            ids.slice(0, 100),
          );
          assert.deepEqual(first.items[0]?.value, { id: ids[0] });
          assert.equal(first.next, ids[99]);
          const { ids: paged, pages } = await allPages(store, "many", 30);
          assert.deepEqual(paged, ids);
          assert.equal(pages, 9);
        }));

      it("ends with no cursor when the last page is exactly full", () =>
        withStore(async (store) => {
          for (let i = 0; i < 10; i++) await store.put("exact", `e${i}`, i);
          const first = await store.list("exact", { limit: 5 });
          assert.equal(first.next, "e4");
          const second = await store.list("exact", { limit: 5, after: first.next });
          assert.deepEqual(
            second.items.map((item) => item.id),
            ["e5", "e6", "e7", "e8", "e9"],
          );
          assert.equal(second.next, undefined);
          assert.deepEqual(await store.list("exact", { after: "e9" }), { items: [] });
          assert.deepEqual(await store.list("nothing-here"), { items: [] });
        }));

      it("caps a page at 1000 items", () =>
        withStore(async (store) => {
          await Promise.all(
            Array.from({ length: 1005 }, (_, i) => store.put("big", `b${String(i).padStart(5, "0")}`, i)),
          );
          const page = await store.list("big", { limit: 5000 });
          assert.equal(page.items.length, 1000);
          assert.equal(page.next, "b00999");
          const rest = await store.list("big", { limit: 1000, after: page.next });
          assert.equal(rest.items.length, 5);
          assert.equal(rest.next, undefined);
        }));

      it("filters by prefix literally (no wildcards) and combines prefix with after", () =>
        withStore(async (store) => {
          const ids = [
            "user:1",
            "user:2",
            "user:3",
            "user",
            "user2",
            "users",
            "usr",
            "a_b",
            "axb",
            "50%",
            "50%off",
            "50x",
            "tenant/one",
            "tenant/one/two",
            "tenant/onex",
          ];
          for (const id of ids) await store.put("p", id, id);
          const ids1 = async (prefix: string, after?: string) =>
            (await store.list("p", { prefix, after })).items.map((item) => item.id);
          assert.deepEqual(await ids1("user:"), ["user:1", "user:2", "user:3"]);
          assert.deepEqual(await ids1("user"), ["user", "user2", "user:1", "user:2", "user:3", "users"]);
          assert.deepEqual(await ids1("a_"), ["a_b"]);
          assert.deepEqual(await ids1("50%"), ["50%", "50%off"]);
          assert.deepEqual(await ids1("tenant/one/"), ["tenant/one/two"]);
          assert.deepEqual(await ids1("nope"), []);
          assert.deepEqual(await ids1("user:", "user:1"), ["user:2", "user:3"]);
          assert.deepEqual(await ids1("user:", "a"), ["user:1", "user:2", "user:3"]);
          assert.deepEqual(await ids1("user:", "zzz"), []);
          const paged = await allPages(store, "p", 1, "user:");
          assert.deepEqual(paged.ids, ["user:1", "user:2", "user:3"]);
          assert.deepEqual((await store.list("p", { prefix: "" })).items.length, ids.length);
        }));

      it("handles unicode and special characters in ids, ordered by code point", () =>
        withStore(async (store) => {
          const ids = [
            "plain",
            "with space",
            "colon:inside:id",
            "percent%20",
            "under_score",
            "[bracket",
            "(paren",
            "-dash",
            "+plus",
            "*star?",
            "back\\slash",
            "quote'\"",
            "café",
            "日本語",
            "emoji😀",
            "emoji\uFFFD",
            "\u{10FFFF}last",
            "tab\there",
            "new\nline",
            "x".repeat(512),
          ];
          for (const id of shuffled(ids)) await store.put("unicode", id, { id });
          for (const id of ids) assert.deepEqual(await store.get("unicode", id), { id }, id);
          const expected = [...ids].sort(compareCodePoints);
          const { ids: listed } = await allPages(store, "unicode", 3);
          assert.deepEqual(listed, expected);
          assert.deepEqual(
            (await store.list("unicode", { prefix: "emoji" })).items.map((item) => item.id),
            ["emoji\uFFFD", "emoji😀"],
          );
          assert.deepEqual(
            (await store.list("unicode", { prefix: "\u{10FFFF}" })).items.map((item) => item.id),
            ["\u{10FFFF}last"],
          );
          assert.equal(await store.create("unicode", "café", "again"), false);
          assert.equal(await store.delete("unicode", "colon:inside:id"), true);
          assert.equal(await store.count("unicode"), ids.length - 1);
        }));
    });

    describe("logs", () => {
      it("assigns seqs 1..n with none lost under 200 concurrent appends", () =>
        withStore(async (store) => {
          assert.equal(await store.logLength("audit"), 0);
          assert.deepEqual(await store.readLog("audit"), []);
          const seqs = await Promise.all(
            Array.from({ length: 200 }, (_, i) => store.append("audit", { i, nested: { tag: `t${i}` } })),
          );
          assert.deepEqual(
            [...seqs].sort((a, b) => a - b),
            Array.from({ length: 200 }, (_, i) => i + 1),
          );
          assert.equal(await store.logLength("audit"), 200);
          const entries = await store.readLog<{ i: number; nested: { tag: string } }>("audit", {
            limit: 1000,
          });
          assert.deepEqual(
            entries.map((entry) => entry.seq),
            Array.from({ length: 200 }, (_, i) => i + 1),
          );
          // Each append got back the seq its own value was stored under.
          for (const entry of entries) {
            assert.equal(seqs[entry.value.i], entry.seq);
            assert.equal(entry.value.nested.tag, `t${entry.value.i}`);
          }
        }));

      it("pages a log with afterSeq and limit (default 100)", () =>
        withStore(async (store) => {
          for (let i = 1; i <= 150; i++) assert.equal(await store.append("events", `e${i}`), i);
          const first = await store.readLog<string>("events");
          assert.equal(first.length, 100);
          assert.deepEqual(first[0], { seq: 1, value: "e1" });
          const seen: number[] = [];
          let afterSeq = 0;
          for (;;) {
            const page = await store.readLog<string>("events", { afterSeq, limit: 64 });
            if (page.length === 0) break;
            for (const entry of page) {
              seen.push(entry.seq);
              assert.equal(entry.value, `e${entry.seq}`);
            }
            afterSeq = page.at(-1)?.seq ?? afterSeq;
          }
          assert.deepEqual(
            seen,
            Array.from({ length: 150 }, (_, i) => i + 1),
          );
          assert.deepEqual(await store.readLog("events", { afterSeq: 150 }), []);
          assert.deepEqual(await store.readLog("events", { afterSeq: 1000 }), []);
          assert.deepEqual(await store.readLog("events", { afterSeq: 148, limit: 1 }), [
            { seq: 149, value: "e149" },
          ]);
        }));

      it("appendMany writes a batch under consecutive seqs, in order, beside single appends", () =>
        withStore(async (store) => {
          assert.equal(await store.append("batch", "a"), 1);
          assert.deepEqual(await store.appendMany("batch", ["b", { c: 1 }, "d"]), [2, 3, 4]);
          assert.deepEqual(await store.appendMany("batch", []), []);
          assert.equal(await store.append("batch", "e"), 5);
          assert.deepEqual(await store.readLog("batch"), [
            { seq: 1, value: "a" },
            { seq: 2, value: "b" },
            { seq: 3, value: { c: 1 } },
            { seq: 4, value: "d" },
            { seq: 5, value: "e" },
          ]);
        }));

      it("appendAcross (where offered) writes several logs in one transaction, all or none", () =>
        withStore(async (store) => {
          if (store.appendAcross === undefined) return;
          assert.equal(await store.append("across-a", "a1"), 1);
          const seqs = await store.appendAcross<unknown>([
            { log: "across-a", value: "a2" },
            { log: "across-b", value: "b1" },
            { log: "across-a", value: "a3" },
            { log: "across-b", value: { b: 2 } },
          ]);
          assert.deepEqual(seqs, [2, 1, 3, 2]);
          assert.deepEqual(await store.appendAcross([]), []);
          // One bad entry refuses the whole batch: nothing of it is stored.
          await assert.rejects(
            store.appendAcross([
              { log: "across-a", value: "a4" },
              { log: "", value: "bad log name" },
            ]),
            StoreError,
          );
          await assert.rejects(store.appendAcross([{ log: "across-a", value: { n: 10n } }]), StoreError);
          assert.deepEqual(await store.readLog("across-a"), [
            { seq: 1, value: "a1" },
            { seq: 2, value: "a2" },
            { seq: 3, value: "a3" },
          ]);
          assert.deepEqual(await store.readLog("across-b"), [
            { seq: 1, value: "b1" },
            { seq: 2, value: { b: 2 } },
          ]);
          assert.equal(await store.append("across-b", "b3"), 3);
        }));

      it("appendMany batches racing each other and single appends lose nothing and share no seq", () =>
        withStore(async (store) => {
          const batches = await Promise.all(
            Array.from({ length: 20 }, (_, b) =>
              store.appendMany(
                "race",
                Array.from({ length: 10 }, (_, i) => `b${b}-${i}`),
              ),
            ),
          );
          const singles = await Promise.all(
            Array.from({ length: 20 }, (_, i) => store.append("race", `s${i}`)),
          );
          const seqs = [...batches.flat(), ...singles].sort((x, y) => x - y);
          assert.deepEqual(
            seqs,
            Array.from({ length: 220 }, (_, i) => i + 1),
          );
          const entries = await store.readLog<string>("race", { limit: 1000 });
          for (const [b, batch] of batches.entries()) {
            for (const [i, seq] of batch.entries()) assert.equal(entries[seq - 1]?.value, `b${b}-${i}`);
          }
        }));

      it("appendMany refuses a batch holding a value JSON cannot hold, writing none of it", () =>
        withStore(async (store) => {
          await assert.rejects(
            store.appendMany("strict", ["ok", () => 1]),
            hasCode("store_invalid_argument"),
          );
          assert.equal(await store.logLength("strict"), 0);
        }));

      it("stores an entry whose id the log holds once: the repeat returns the stored seq (decision 2751)", () =>
        withStore(async (store) => {
          const record = (id: string, copy: number) => ({ id, copy, time: "2026-01-01T00:00:00.000Z" });
          assert.equal(await store.append("ids", record("dec_1", 1)), 1);
          assert.equal(await store.append("ids", record("dec_1", 2)), 1);
          // A batch re-sent with new entries among the repeats: only the new ones get seqs.
          assert.deepEqual(
            await store.appendMany("ids", [
              record("dec_2", 1),
              record("dec_1", 3),
              record("dec_2", 2),
              record("dec_3", 1),
            ]),
            [2, 1, 2, 3],
          );
          await store.writeAll([{ op: "append", log: "ids", value: record("dec_3", 2) }]);
          // Entries without a string id are never checked; another log holds its own ids.
          assert.deepEqual(await store.appendMany("ids", ["plain", "plain", { id: 7 }]), [4, 5, 6]);
          assert.equal(await store.append("other", record("dec_1", 4)), 1);
          assert.equal(await store.logLength("ids"), 6);
          const entries = await store.readLog<{ id: string; copy: number }>("ids");
          assert.deepEqual(
            entries.slice(0, 3).map((entry) => [entry.seq, entry.value.id, entry.value.copy]),
            [
              [1, "dec_1", 1],
              [2, "dec_2", 1],
              [3, "dec_3", 1],
            ],
          );
          assert.deepEqual(
            (await store.logIdsHeld("ids", ["dec_3", "dec_9", "dec_1", "x".repeat(600)])).sort(),
            ["dec_1", "dec_3"],
          );
          assert.deepEqual(await store.logIdsHeld("other", ["dec_2"]), []);
          await assert.rejects(
            store.logIdsHeld(
              "ids",
              Array.from({ length: 1001 }, (_, i) => `dec_${i}`),
            ),
            hasCode("store_invalid_argument"),
          );
          const page = await store.queryLog("ids", { since: 1, limit: 100 });
          assert.deepEqual(
            page.entries.map((entry) => entry.seq),
            [1, 2, 3],
          );
        }));

      it("racing appends of one id store it once", () =>
        withStore(async (store) => {
          const seqs = await Promise.all(
            Array.from({ length: 10 }, (_, i) =>
              i % 2 === 0
                ? store.append("id-race", { id: "dec_race", i })
                : store.appendMany("id-race", [{ id: `dec_other_${i}` }, { id: "dec_race", i }]),
            ),
          );
          assert.equal(await store.logLength("id-race"), 6);
          const entries = await store.readLog<{ id: string }>("id-race");
          assert.equal(entries.filter((entry) => entry.value.id === "dec_race").length, 1);
          const raced = entries.find((entry) => entry.value.id === "dec_race")?.seq;
          for (const result of seqs) assert.equal(Array.isArray(result) ? result[1] : result, raced);
        }));

      it("an id removed by retention may be written again", () =>
        withStore(async (store) => {
          await store.appendMany("id-trim", [{ id: "dec_a" }, { id: "dec_b" }]);
          assert.equal(await store.trimLog("id-trim", { keepLast: 1 }), 1);
          assert.deepEqual(await store.logIdsHeld("id-trim", ["dec_a", "dec_b"]), ["dec_b"]);
          assert.equal(await store.append("id-trim", { id: "dec_a" }), 3);
          assert.equal(await store.append("id-trim", { id: "dec_b" }), 2);
        }));

      it("keeps logs independent", () =>
        withStore(async (store) => {
          assert.equal(await store.append("one", "a"), 1);
          assert.equal(await store.append("two", "b"), 1);
          assert.equal(await store.append("one", "c"), 2);
          assert.equal(await store.logLength("one"), 2);
          assert.deepEqual(await store.readLog("two"), [{ seq: 1, value: "b" }]);
        }));
    });

    describe("counters", () => {
      it("increments exactly under 200 concurrent increments", () =>
        withStore(async (store) => {
          const amounts = Array.from({ length: 200 }, (_, i) => (i % 9) - 2);
          const returned = await Promise.all(amounts.map((by) => store.increment("usage", "calls", by)));
          const total = amounts.reduce((sum, by) => sum + by, 0);
          assert.equal((await store.readCounters("usage")).calls, total);
          assert.ok(returned.includes(total));
          assert.equal(await store.increment("usage", "calls"), total + 1);
          assert.equal(await store.increment("usage", "fresh"), 1);
          assert.equal(await store.increment("usage", "neg", -5), -5);
        }));

      it("reads counters by literal prefix, in key order", () =>
        withStore(async (store) => {
          assert.deepEqual(await store.readCounters("empty"), {});
          for (const key of ["tool:b", "tool:a", "toolbox", "x", "tool_x", "tool:ü"]) {
            await store.increment("per-tool", key, 2);
          }
          await store.increment("per-tool", "tool:a", 3);
          await store.increment("elsewhere", "tool:a", 100);
          const tools = await store.readCounters("per-tool", "tool:");
          assert.deepEqual(tools, { "tool:a": 5, "tool:b": 2, "tool:ü": 2 });
          assert.deepEqual(Object.keys(tools), ["tool:a", "tool:b", "tool:ü"]);
          assert.deepEqual(await store.readCounters("per-tool", "tool_"), { tool_x: 2 });
          assert.equal(Object.keys(await store.readCounters("per-tool")).length, 6);
          assert.deepEqual(await store.readCounters("per-tool", "zzz"), {});
        }));
    });

    describe("health and validation", () => {
      it("reports healthy with its backend name", () =>
        withStore(async (store) => {
          const health = await store.health();
          assert.equal(health.ok, true);
          assert.equal(health.backend, store.backend);
          assert.ok(health.detail.length > 0);
        }));

      it("rejects invalid collection, log and counter names", () =>
        withStore(async (store) => {
          const bad = ["", "Upper", "1starts-with-digit", "has:colon", "has space", "a".repeat(65), "é"];
          for (const name of bad) {
            await assert.rejects(store.get(name, "x"), hasCode("store_invalid_name"), name);
            await assert.rejects(store.put(name, "x", 1), hasCode("store_invalid_name"), name);
            await assert.rejects(store.list(name), hasCode("store_invalid_name"), name);
            await assert.rejects(store.count(name), hasCode("store_invalid_name"), name);
            await assert.rejects(store.append(name, 1), hasCode("store_invalid_name"), name);
            await assert.rejects(store.readLog(name), hasCode("store_invalid_name"), name);
            await assert.rejects(store.increment(name, "k"), hasCode("store_invalid_name"), name);
            await assert.rejects(store.readCounters(name), hasCode("store_invalid_name"), name);
          }
          for (const good of ["a", "a.b-c_d9", "a".repeat(64)]) {
            await store.put(good, "x", 1);
            assert.equal(await store.get(good, "x"), 1);
          }
        }));

      it("rejects invalid ids and counter keys", () =>
        withStore(async (store) => {
          const bad = ["", "x".repeat(513), "nul\u0000inside", "lone\uD800surrogate"];
          for (const id of bad) {
            await assert.rejects(store.get("c", id), hasCode("store_invalid_name"));
            await assert.rejects(store.put("c", id, 1), hasCode("store_invalid_name"));
            await assert.rejects(store.create("c", id, 1), hasCode("store_invalid_name"));
            await assert.rejects(store.delete("c", id), hasCode("store_invalid_name"));
            await assert.rejects(store.increment("c", id), hasCode("store_invalid_name"));
          }
          assert.equal(await store.count("c"), 0);
        }));

      it("rejects bad values, TTLs, limits, cursors and increments", () =>
        withStore(async (store) => {
          await assert.rejects(store.put("c", "k", undefined), hasCode("store_invalid_argument"));
          await assert.rejects(store.put("c", "k", 10n), hasCode("store_invalid_argument"));
          await assert.rejects(
            store.append("log", () => 1),
            hasCode("store_invalid_argument"),
          );
          for (const ttlMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
            await assert.rejects(store.put("c", "k", 1, { ttlMs }), hasCode("store_invalid_argument"));
          }
          for (const limit of [0, -5, 1.5]) {
            await assert.rejects(store.list("c", { limit }), hasCode("store_invalid_argument"));
            await assert.rejects(store.readLog("log", { limit }), hasCode("store_invalid_argument"));
          }
          await assert.rejects(store.readLog("log", { afterSeq: -1 }), hasCode("store_invalid_argument"));
          await assert.rejects(store.increment("n", "k", 0.5), hasCode("store_invalid_argument"));
          await assert.rejects(store.increment("n", "k", 2 ** 60), hasCode("store_invalid_argument"));
          assert.equal(await store.count("c"), 0);
          assert.equal(await store.logLength("log"), 0);
        }));

      it("refuses calls after close", async () => {
        const { store, cleanup } = await open();
        try {
          await store.put("c", "k", 1);
          await store.close();
          await store.close();
          await assert.rejects(store.get("c", "k"), hasCode("store_closed"));
          await assert.rejects(store.append("log", 1), hasCode("store_closed"));
          assert.equal((await store.health()).ok, false);
        } finally {
          await cleanup();
        }
      });
    });
    runLogQueryContract(open);
  });
}
