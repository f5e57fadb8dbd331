/**
 * Statements a binding invoke sends to PostgreSQL, with the binding's records reused
 * (`record-cache-ms`) and read every time (0): the reuse saves the five reads of the client,
 * the binding, the mapping, the experience and the auth profile on every invoke (the counting
 * follows test/store/postgres.test.ts: the pg client's query, patched).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { BINDING_RECORD_COLLECTIONS } from "../../../../src/bindings/binding-records.ts";
import { type PostgresServerHandle, startPostgresServer } from "../../../helpers/postgres-server.ts";
import { type BindingsHarness, startBindingsHarness } from "./harness.ts";

const INVOKES = 20;
const LIST = { capability_id: "customers", method: "GET", path: "/customers" };

interface Sent {
  statements: number;
  /** Documents of the binding's records the statements read (a grouped get counts each key). */
  bindingReads: number;
}

const valuesOf = (args: readonly unknown[]): readonly unknown[] => {
  const [first, second] = args;
  if (Array.isArray(second)) return second;
  const values = (first as { values?: unknown } | undefined)?.values;
  return Array.isArray(values) ? values : [];
};

/** Counts the statements the process sends while `during` runs, and the binding records they read. */
async function countingStatements(during: () => Promise<void>): Promise<Sent> {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  const sent: Sent = { statements: 0, bindingReads: 0 };
  proto.query = function (this: unknown, ...args: unknown[]) {
    sent.statements++;
    for (const value of valuesOf(args).flat()) {
      if (typeof value === "string" && BINDING_RECORD_COLLECTIONS.has(value)) sent.bindingReads++;
    }
    return original.apply(this, args);
  };
  try {
    await during();
    return sent;
  } finally {
    proto.query = original;
  }
}

describe("binding invoke on PostgreSQL: statements per invoke", () => {
  let server: PostgresServerHandle;
  let h: BindingsHarness;
  before(async () => {
    server = await startPostgresServer();
    h = await startBindingsHarness({ storeUrl: server.url });
  });
  after(async () => {
    await h.close();
    await server.stop();
  });

  it("reads the binding's records once within record-cache-ms, not on every invoke", async () => {
    const perInvoke = async (recordCacheMs: number): Promise<Sent> => {
      const replica = await h.startReplica({ config: { recordCacheMs } });
      assert.equal((await h.invoke(LIST, { base: replica.url })).status, 200);
      const sent = await countingStatements(async () => {
        for (let i = 0; i < INVOKES; i++) {
          assert.equal((await h.invoke(LIST, { base: replica.url })).status, 200);
        }
        // The evidence digests the audit writer queued belong to these invokes.
        await replica.context.decisions.recorder.flush(10_000);
      });
      return { statements: sent.statements / INVOKES, bindingReads: sent.bindingReads / INVOKES };
    };
    const everyTime = await perInvoke(0);
    const reused = await perInvoke(60_000);
    process.stderr.write(
      `per invoke: read every time ${JSON.stringify(everyTime)}, reused ${JSON.stringify(reused)}\n`,
    );
    // The invoke reads client, binding, mapping, experience and auth profile, then the auth
    // profile again for the secret's freshness check (the executor's secret cache,
    // src/mcp/secret-cache.ts); the sample upstream's envelope check on the main app (read
    // every time) reads its own client and the binding.
    assert.equal(everyTime.bindingReads, 8);
    // Within the bound only the secret's freshness check and the upstream's check read them.
    assert.equal(reused.bindingReads, 3);
    assert.ok(everyTime.statements - reused.statements >= 5, "each saved read was a statement");
  });
});
