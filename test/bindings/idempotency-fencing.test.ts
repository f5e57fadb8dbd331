/**
 * Decision 2991: every write of a key after its claim is fenced by the claim's token. A replica
 * that stalls (a GC pause, SIGSTOP, a stalled VM) longer than its claim's lease, while another
 * replica takes the lapsed claim over, must not write the key or contact the upstream when it
 * wakes: its `sending` write fails, its release cannot erase the other's claim, and the upstream
 * is called once. Two idempotency handles on their own connections to one real store stand for
 * two replicas, on SQLite (its clock injected), PostgreSQL and Redis.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { sha256Ref } from "../../src/bindings/derive.ts";
import { createIdempotency, type IdempotentWork, type WorkResult } from "../../src/bindings/idempotency.ts";
import { hashCanonical } from "../../src/core/canonical-json.ts";
import { AuthorityError } from "../../src/errors.ts";
import { bindingCollections, bindingKeys, type IdempotencyRecord } from "../../src/store/binding-model.ts";
import { openStore, SqliteStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";

const LEASE_MS = 300;
const request = hashCanonical({ request: "pay 10" });

function isCode(code: string) {
  return (error: unknown) => error instanceof AuthorityError && error.code === code;
}

/** A promise and the function that settles it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

interface Backend {
  /** A replica's own connection to the one store. */
  connect(): Promise<Store>;
  /** Lets every claim's lease lapse (the clock moves or time passes). */
  lapse(): Promise<void>;
  /** The replicas' clock (the idempotency's `now`). */
  now(): Date;
  stop(): Promise<void>;
}

async function sqliteBackend(): Promise<Backend> {
  const dir = mkdtempSync(join(tmpdir(), "fencing-"));
  let clock = Date.parse("2026-11-29T12:00:00Z");
  return {
    connect: async () => new SqliteStore({ path: join(dir, "store.db"), now: () => clock }),
    lapse: async () => {
      clock += LEASE_MS * 2;
    },
    now: () => new Date(clock),
    stop: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** PostgreSQL and Redis expire by the server's clock: the lease lapses in real time. */
function serverBackend(url: string, stop: () => Promise<void>): Backend {
  return {
    connect: () => openStore(url),
    lapse: () => sleep(LEASE_MS * 2),
    now: () => new Date(),
    stop,
  };
}

const backends: Array<[string, () => Promise<Backend>]> = [
  ["SQLite", sqliteBackend],
  [
    "PostgreSQL",
    async () => {
      const server: PostgresServerHandle = await startPostgresServer();
      return serverBackend(server.url, () => server.stop());
    },
  ],
  [
    "Redis",
    async () => {
      const server: RedisServerHandle = await startRedisServer();
      return serverBackend(server.url, () => server.stop());
    },
  ],
];

for (const [name, start] of backends) {
  describe(`idempotency fencing: a stalled replica whose claim was taken over (${name})`, () => {
    let backend: Backend;
    const stores: Store[] = [];
    before(async () => {
      backend = await start();
    });
    after(async () => {
      for (const store of stores) await store.close().catch(() => undefined);
      await backend.stop();
    });

    /** A replica; a duplicate waits up to `waitMs` for the key (long: the lease lapses meanwhile). */
    async function replica(waitMs = 60_000) {
      const store = await backend.connect();
      stores.push(store);
      const idempotency = createIdempotency({
        store,
        leaseMs: LEASE_MS,
        waitMs,
        pollMs: 10,
        now: () => backend.now(),
      });
      return { store, idempotency };
    }

    /**
     * Replica A claims `key` and stalls; its lease lapses; replica B takes the key over and
     * stores `sending`. Returns A's run (its work resumes with `resume`) and B's, held after
     * its `sending` write until `finishB` is called.
     */
    async function takeOver(key: string, aAfterStall: IdempotentWork, upstream: { calls: number }) {
      const a = await replica();
      const b = await replica();
      const aClaimed = gate();
      const resume = gate();
      const runA = a.idempotency.run("b1", key, request, async (sending, unsent) => {
        aClaimed.open();
        await resume.opened; // stalled past its lease
        return aAfterStall(sending, unsent);
      });
      runA.catch(() => undefined);
      await aClaimed.opened;
      await backend.lapse();
      const bSent = gate();
      const finishB = gate();
      const runB = b.idempotency.run("b1", key, request, async (sending) => {
        await sending();
        upstream.calls++;
        bSent.open();
        await finishB.opened;
        return { response: { status_code: 200, body: { by: "B" } }, keep: true };
      });
      runB.catch(() => undefined);
      await bSent.opened;
      return { a, runA, resume: resume.open, runB, finishB: finishB.open };
    }

    it("the stalled replica's `sending` write fails and it never contacts the upstream", async () => {
      const upstream = { calls: 0 };
      const { runA, resume, runB, finishB } = await takeOver(
        "k-send",
        async (sending) => {
          await sending();
          upstream.calls++;
          return { response: { status_code: 200, body: { by: "A" } }, keep: true };
        },
        upstream,
      );
      resume();
      await assert.rejects(runA, isCode("conflict"));
      finishB();
      assert.deepEqual((await runB).response.body, { by: "B" });
      assert.equal(upstream.calls, 1);
      // The kept result is B's, replayed to a retry on a third replica.
      const c = await replica();
      const replayed = await c.idempotency.run("b1", "k-send", request, async () => {
        upstream.calls++;
        return { response: { status_code: 200, body: { by: "C" } }, keep: true };
      });
      assert.deepEqual(replayed, { response: { status_code: 200, body: { by: "B" } }, replayed: true });
      assert.equal(upstream.calls, 1);
    });

    const endings: Array<[string, IdempotentWork]> = [
      [
        "releases the key (a result not kept)",
        async () => ({ response: { status_code: 503, body: {} }, keep: false }),
      ],
      [
        "fails before the call",
        async () => {
          throw new Error("seal failed");
        },
      ],
      [
        "keeps a result it made without the upstream",
        async () => ({
          response: { status_code: 403, body: {} },
          keep: true,
          // Its evidence is stored even though the result is not.
          writes: [{ op: "put", collection: "fencing_evidence", id: "kept", value: { by: "A" } }],
        }),
      ],
    ];
    for (const [ending, aAfterStall] of endings) {
      it(`the stalled replica that then ${ending} leaves the other's claim alone`, async () => {
        const upstream = { calls: 0 };
        const key = `k-${ending.split(" ")[0]}`;
        const { a, runA, resume, runB, finishB } = await takeOver(key, aAfterStall, upstream);
        resume();
        await runA.catch(() => undefined);
        if (ending.startsWith("keeps")) {
          assert.deepEqual(await a.store.get("fencing_evidence", "kept"), { by: "A" });
        }
        // B still holds the key: a third replica neither runs it nor finds it free.
        const id = bindingKeys.idempotency("b1", sha256Ref(key).slice("sha256:".length));
        const held = await a.store.get<IdempotencyRecord>(bindingCollections.idempotency, id);
        assert.equal(held?.state, "sending", "B's `sending` record is still stored");
        const c = await replica(50);
        const fresh: WorkResult = { response: { status_code: 200, body: { by: "C" } }, keep: true };
        await assert.rejects(
          c.idempotency.run("b1", key, request, async (sending) => {
            await sending();
            upstream.calls++;
            return fresh;
          }),
          isCode("conflict"),
        );
        finishB();
        assert.deepEqual((await runB).response.body, { by: "B" });
        assert.equal(upstream.calls, 1);
      });
    }
  });
}
