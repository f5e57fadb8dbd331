/**
 * Decision 2751: a replica that dies after the upstream call may have been sent leaves its key
 * in the `sending` state; once that claim's lease has passed, another replica refuses the key
 * (409 `idempotency_outcome_unknown`) instead of executing it a second time. Two idempotency
 * instances on their own connections to one real PostgreSQL stand for two replicas; the dead
 * one's work never returns (its process is gone) and its store is closed.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createIdempotency, type IdempotentWork, type WorkResult } from "../../src/bindings/idempotency.ts";
import { hashCanonical } from "../../src/core/canonical-json.ts";
import { AuthorityError } from "../../src/errors.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";

const LEASE_MS = 300;
const request = hashCanonical({ request: "pay 10" });
const ok: WorkResult = { response: { status_code: 200, body: { paid: true } }, keep: true };

function isCode(code: string) {
  return (error: unknown) => error instanceof AuthorityError && error.code === code;
}

/** A replica's view: its own store connection and idempotency, and what its work ran. */
async function replica(url: string) {
  const store = await openStore(url);
  const idempotency = createIdempotency({ store, leaseMs: LEASE_MS, waitMs: 100, pollMs: 10 });
  return { store, idempotency };
}

describe("idempotency across replicas (PostgreSQL)", () => {
  let server: PostgresServerHandle;
  let survivor: Awaited<ReturnType<typeof replica>>;
  const stores: Store[] = [];
  before(async () => {
    server = await startPostgresServer();
    survivor = await replica(server.url);
    stores.push(survivor.store);
  });
  after(async () => {
    for (const store of stores) await store.close().catch(() => undefined);
    await server.stop();
  });

  /** Starts `key` on a replica that dies at `point` (before or after sending): its work never returns. */
  async function dieDuring(key: string, point: "claimed" | "sending"): Promise<void> {
    const dead = await replica(server.url);
    let reached!: () => void;
    const atPoint = new Promise<void>((resolve) => {
      reached = resolve;
    });
    const work: IdempotentWork = async (sending) => {
      if (point === "sending") await sending();
      reached();
      return new Promise<WorkResult>(() => undefined); // the process is gone
    };
    void dead.idempotency.run("b1", key, request, work).catch(() => undefined);
    await atPoint;
    await dead.store.close();
  }

  it("refuses a key whose dead claimant may have sent the call, and never runs it again", async () => {
    await dieDuring("k-sent", "sending");
    let executions = 0;
    const work: IdempotentWork = async (sending) => {
      await sending();
      executions++;
      return ok;
    };
    // Within the lease: still in progress (the claimant may be alive).
    await assert.rejects(survivor.idempotency.run("b1", "k-sent", request, work), isCode("conflict"));
    await sleep(LEASE_MS * 2);
    await assert.rejects(
      survivor.idempotency.run("b1", "k-sent", request, work),
      isCode("idempotency_outcome_unknown"),
    );
    // …and on every later retry while the key is kept.
    await assert.rejects(
      survivor.idempotency.run("b1", "k-sent", request, work),
      isCode("idempotency_outcome_unknown"),
    );
    assert.equal(executions, 0);
  });

  it("runs a key whose dead claimant never reached the sending point, once its lease passed", async () => {
    await dieDuring("k-claimed", "claimed");
    await sleep(LEASE_MS * 2);
    let executions = 0;
    const outcome = await survivor.idempotency.run("b1", "k-claimed", request, async (sending) => {
      await sending();
      executions++;
      return ok;
    });
    assert.equal(executions, 1);
    assert.deepEqual(outcome, { response: ok.response, replayed: false });
  });

  it("a fault after sending leaves the outcome unknown at once; a fault before releases the key", async () => {
    const failing =
      (send: boolean): IdempotentWork =>
      async (sending) => {
        if (send) await sending();
        throw new Error("fault");
      };
    await assert.rejects(survivor.idempotency.run("b1", "k-fault-after", request, failing(true)), /fault/);
    await assert.rejects(
      survivor.idempotency.run("b1", "k-fault-after", request, async () => ok),
      isCode("idempotency_outcome_unknown"),
    );
    await assert.rejects(survivor.idempotency.run("b1", "k-fault-before", request, failing(false)), /fault/);
    const retried = await survivor.idempotency.run("b1", "k-fault-before", request, async () => ok);
    assert.equal(retried.replayed, false);
  });
});
