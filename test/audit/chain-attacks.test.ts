/**
 * Attack pass on `authority audit verify` (verify-chain.ts): exports an attacker edited so that
 * the verifier would pass them, and hostile lines that must not take the verifier down.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createChainLinker } from "../../src/audit/chain.ts";
import { exportChains } from "../../src/audit/chain-export.ts";
import { recoverChainHeads, startCheckpoints } from "../../src/audit/checkpoints.ts";
import { createAuditRecorder } from "../../src/audit/recorder.ts";
import { verifyChainExport } from "../../src/audit/verify-chain.ts";
import { KeyRing, PublicKeyRing } from "../../src/crypto/index.ts";
import { keyRingCheckpointSigner } from "../../src/servers/authority/checkpoint-signers.ts";
import { logs } from "../../src/store/model.ts";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const NOW = new Date("2026-06-30T12:00:00.000Z");
const ring = KeyRing.generate({ owner: "service:authority" });
const keys = PublicKeyRing.import(ring.exportPublic());
const signer = keyRingCheckpointSigner(async () => ring);

let dir: TempDir;
let store: SqliteStore;
/** Two replicas' records: a checkpoint (interval) after a's 6th record, shutdown checkpoints at the end. */
let lines: string[];

async function replica(target: Store, stream: string) {
  const linker = createChainLinker({ stream, heads: await recoverChainHeads(target, stream, NOW) });
  const recorder = createAuditRecorder({ store: target, chain: linker });
  const checkpoints = startCheckpoints({
    store: target,
    linker,
    signer,
    intervalMs: 3_600_000,
    now: () => NOW,
    onError: (error) => assert.fail(String(error)),
  });
  return {
    recorder,
    checkpoints,
    decide: (i: number) =>
      recorder.record({
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
        requestId: `${stream}-${i}`,
        time: new Date(NOW.getTime() - 60_000 + i),
      }),
    async stop() {
      await recorder.close();
      checkpoints.stop();
      await checkpoints.checkpoint("shutdown");
    },
  };
}

const verify = (text: readonly string[]) => verifyChainExport(`${text.join("\n")}\n`, keys);
const parsed = (line: string) =>
  JSON.parse(line) as { type: string; log?: string; value?: { chain?: { stream: string; n: number } } };
const isRecordOf = (line: string, stream: string) =>
  parsed(line).type === "record" && parsed(line).value?.chain?.stream === stream;

before(async () => {
  dir = await makeTempDir("chain-attacks-");
  store = new SqliteStore({ path: join(dir.path, "c.db"), sweepIntervalMs: 0 });
  const a = await replica(store, "replica-a");
  const b = await replica(store, "replica-b");
  for (let i = 1; i <= 6; i++) await a.decide(i);
  await a.recorder.flush();
  await a.checkpoints.checkpoint("interval");
  for (let i = 7; i <= 10; i++) await a.decide(i);
  for (let i = 1; i <= 4; i++) await b.decide(i);
  await Promise.all([a.stop(), b.stop()]);
  lines = [];
  for await (const line of exportChains(store, NOW)) lines.push(line);
});
after(async () => {
  await store.close();
  await dir.cleanup();
});

describe("audit verify: attacks on the export", () => {
  it("the untouched export verifies", async () => {
    const result = await verify(lines);
    assert.equal(result.failure, undefined);
    assert.equal(result.records, 14);
  });

  it("records removed up to an interval checkpoint are named (only retention starts a stream later)", async () => {
    let removed = 0;
    const tampered = lines.filter((line) => {
      if (!isRecordOf(line, "replica-a") || removed >= 6) return true;
      removed++;
      return false;
    });
    assert.equal(removed, 6);
    const result = await verify(tampered);
    assert.equal(result.ok, false);
    assert.equal(result.failure?.kind, "removed");
    assert.equal(result.failure?.stream, "replica-a");
  });

  it("a replica whose every record was removed, its checkpoints kept, is a truncation", async () => {
    const tampered = lines.filter((line) => !isRecordOf(line, "replica-b"));
    const result = await verify(tampered);
    assert.equal(result.ok, false);
    assert.equal(result.failure?.kind, "truncated");
    assert.equal(result.failure?.stream, "replica-b");
  });

  it("a record nested too deep to hash is refused, not a crash", async () => {
    const depth = 200_000;
    const chain = { stream: "replica-z", n: 1, prev: `sha256:${"0".repeat(64)}` };
    const value = `{"chain":${JSON.stringify(chain)},"x":${"[".repeat(depth)}${"]".repeat(depth)}}`;
    const hostile = `{"type":"record","log":"${logs.audit}","seq":99,"value":${value}}`;
    const result = await verify([...lines, hostile]);
    assert.equal(result.ok, false);
    assert.equal(result.failure?.line, lines.length + 1);
  });
});
