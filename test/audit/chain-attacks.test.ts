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

  /** A copy of replica-a's k-th record line, edited by `edit` (a record the attacker fabricates from a real one). */
  function forgedFrom(k: number, edit: (value: Record<string, unknown>) => void): string {
    const source = lines.filter((line) => isRecordOf(line, "replica-a"))[k - 1];
    assert.ok(source !== undefined);
    const line = JSON.parse(source) as { seq: number; value: Record<string, unknown> };
    edit(line.value);
    return JSON.stringify({ ...line, seq: line.seq + 1000 });
  }
  const after = (k: number, extra: string): string[] => {
    const at = lines.indexOf(lines.filter((line) => isRecordOf(line, "replica-a"))[k - 1] as string);
    return [...lines.slice(0, at + 1), extra, ...lines.slice(at + 1)];
  };

  it("an inserted decision record without a chain is named, not counted as unchained", async () => {
    const forged = forgedFrom(3, (value) => {
      delete value.chain;
      value.id = "dec_forged";
      value.path = "/items/forged";
    });
    const tampered = after(3, forged);
    const result = await verify(tampered);
    assert.equal(result.ok, false);
    assert.equal(result.failure?.kind, "inserted");
    assert.equal(result.failure?.line, tampered.indexOf(forged) + 1);
    // At the start of the log too: a record dated after the chains began is no older record.
    const first = lines.findIndex((line) => parsed(line).type === "record");
    const early = [...lines.slice(0, first), forged, ...lines.slice(first)];
    const second = await verify(early);
    assert.equal(second.failure?.kind, "inserted");
    assert.equal(second.failure?.line, first + 1);
  });

  it("an inserted record that copies a place in the chain is named", async () => {
    const forged = forgedFrom(3, (value) => {
      value.id = "dec_forged";
    });
    const tampered = after(3, forged);
    const result = await verify(tampered);
    assert.equal(result.ok, false);
    assert.equal(result.failure?.kind, "inserted");
    assert.equal(result.failure?.line, tampered.indexOf(forged) + 1);
  });

  it("a whole stream the attacker made up is unsealed: --require-sealed refuses it", async () => {
    const forged = forgedFrom(1, (value) => {
      value.chain = { stream: "replica-forged", n: 1, prev: `sha256:${"0".repeat(64)}` };
      value.id = "dec_forged";
    });
    const tampered = [...lines, forged];
    const lax = await verify(tampered);
    assert.equal(lax.unsealedByStream[`${logs.audit}/replica-forged`], 1);
    const strict = await verifyChainExport(`${tampered.join("\n")}\n`, keys, { sealed: { all: true } });
    assert.equal(strict.failure?.kind, "unsealed");
    assert.equal(strict.failure?.line, tampered.length);
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
