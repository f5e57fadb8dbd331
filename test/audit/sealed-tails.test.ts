/**
 * Unsealed tails (decision 2771): records after a stream's newest checkpoint can be cut from the
 * end of an export undetected. `audit verify` says exactly how many each stream has, and a caller
 * that must know nothing was cut requires a seal: all records, those up to a time (with a
 * checkpoint at or after it), or one record — and a checkpoint on demand seals them.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createChainLinker } from "../../src/audit/chain.ts";
import { exportChains } from "../../src/audit/chain-export.ts";
import { recoverChainHeads, startCheckpoints } from "../../src/audit/checkpoints.ts";
import { receiptOf } from "../../src/audit/receipts.ts";
import { createAuditRecorder } from "../../src/audit/recorder.ts";
import { verifyChainExport } from "../../src/audit/verify-chain.ts";
import { KeyRing, PublicKeyRing } from "../../src/crypto/index.ts";
import { keyRingCheckpointSigner } from "../../src/servers/authority/checkpoint-signers.ts";
import { logs } from "../../src/store/model.ts";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const T0 = Date.parse("2026-06-30T12:00:00.000Z");
const ring = KeyRing.generate({ owner: "service:authority" });
const keys = PublicKeyRing.import(ring.exportPublic());

describe("unsealed tails", () => {
  let dir: TempDir;
  let store: SqliteStore;
  let clock = T0;
  const ids: string[] = [];
  const receipts: string[] = [];
  let sealedLines: string[];
  let openLines: string[];

  const exported = async () => {
    const lines: string[] = [];
    for await (const line of exportChains(store, new Date(clock))) lines.push(line);
    return lines;
  };
  const verify = (lines: readonly string[], sealed?: Parameters<typeof verifyChainExport>[2]) =>
    verifyChainExport(`${lines.join("\n")}\n`, keys, sealed);

  before(async () => {
    dir = await makeTempDir("sealed-tails-");
    store = new SqliteStore({ path: join(dir.path, "s.db"), sweepIntervalMs: 0 });
    const linker = createChainLinker({
      stream: "replica-a",
      heads: await recoverChainHeads(store, "replica-a", new Date(T0)),
    });
    const recorder = createAuditRecorder({ store, chain: linker });
    const checkpoints = startCheckpoints({
      store,
      linker,
      signer: keyRingCheckpointSigner(async () => ring),
      intervalMs: 3_600_000,
      now: () => new Date(clock),
      onError: (error) => assert.fail(String(error)),
    });
    const decide = async (i: number) => {
      const record = await recorder.record({
        actor: "agent",
        subject_id: "s1",
        partner_id: "p1",
        capability_id: "cap",
        method: "GET",
        path: `/items/${i}`,
        permission_id: null,
        decision: "allowed",
        reason: null,
        transport: "http",
        requestId: `req-${i}`,
        time: new Date(clock),
      });
      ids.push(record.id);
      receipts.push(receiptOf(logs.audit, record));
      clock += 1000;
    };
    for (let i = 0; i < 4; i++) await decide(i);
    await recorder.flush();
    await checkpoints.checkpoint("demand");
    clock += 1000;
    for (let i = 4; i < 7; i++) await decide(i);
    await recorder.flush();
    openLines = await exported();
    await checkpoints.checkpoint("demand");
    sealedLines = await exported();
    checkpoints.stop();
    await recorder.close();
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  it("counts the unsealed records of each stream, and passes them unless a seal is required", async () => {
    const result = await verify(openLines);
    assert.equal(result.ok, true);
    assert.equal(result.unsealed, 3);
    assert.deepEqual(result.unsealedByStream, { "audit/replica-a": 3 });
    const cut = openLines.slice(0, -1);
    // The attack the requirement closes: the newest record cut from the end passes otherwise.
    assert.equal((await verify(cut)).ok, true);
    const required = await verify(cut, { sealed: { all: true } });
    assert.equal(required.failure?.kind, "unsealed");
  });

  it("--require-sealed fails on an unsealed tail and passes once a checkpoint on demand sealed it", async () => {
    const open = await verify(openLines, { sealed: { all: true } });
    assert.equal(open.ok, false);
    assert.equal(open.failure?.kind, "unsealed");
    assert.match(open.failure?.message ?? "", /n=5 of audit\/replica-a/);
    const sealed = await verify(sealedLines, { sealed: { all: true } });
    assert.equal(sealed.failure, undefined);
    assert.equal(sealed.unsealed, 0);
    assert.deepEqual(sealed.unsealedByStream, {});
  });

  it("--sealed-through a time: the records up to it sealed, and a checkpoint at or after it", async () => {
    const firstCheckpoint = T0 + 4000;
    assert.equal((await verify(openLines, { sealed: { through: firstCheckpoint } })).ok, true);
    const later = await verify(openLines, { sealed: { through: T0 + 5000 } });
    assert.equal(later.failure?.kind, "unsealed");
    // After every record and every checkpoint: none is at or after it.
    const future = await verify(sealedLines, { sealed: { through: clock + 60_000 } });
    assert.match(future.failure?.message ?? "", /no checkpoint at or after/);
  });

  it("--sealed-through a record (id or receipt): sealed, unsealed or not in the export", async () => {
    assert.equal((await verify(openLines, { sealed: { record: ids[3] ?? "" } })).ok, true);
    assert.equal((await verify(openLines, { sealed: { record: receipts[3] ?? "" } })).ok, true);
    const open = await verify(openLines, { sealed: { record: receipts[5] ?? "" } });
    assert.equal(open.failure?.kind, "unsealed");
    assert.equal((await verify(sealedLines, { sealed: { record: ids[6] ?? "" } })).ok, true);
    const missing = await verify(openLines.slice(0, -1), { sealed: { record: ids[6] ?? "" } });
    assert.match(missing.failure?.message ?? "", /no record/);
  });
});
