/**
 * Policy and binding changes chained like decisions (decision 2771): the admin API's own
 * transactions write them in the replica's `<replica>/admin` stream, sealed by its checkpoints,
 * so `audit verify` passes them untouched and names each kind of tampering with them.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { recordBindingChange, recordPolicyChange, writeAssignmentChange } from "../../src/admin/audit.ts";
import { type AdminChain, adminStreamOf, createAdminChain } from "../../src/audit/admin-chain.ts";
import { createChainLinker } from "../../src/audit/chain.ts";
import { exportChains } from "../../src/audit/chain-export.ts";
import { recoverChainHeads, startCheckpoints } from "../../src/audit/checkpoints.ts";
import { createAuditRecorder } from "../../src/audit/recorder.ts";
import { verifyChainExport } from "../../src/audit/verify-chain.ts";
import { KeyRing, PublicKeyRing } from "../../src/crypto/index.ts";
import { keyRingCheckpointSigner } from "../../src/servers/authority/checkpoint-signers.ts";
import type { AssignmentRecord } from "../../src/store/model.ts";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const NOW = new Date("2026-07-01T09:00:00.000Z");
const ring = KeyRing.generate({ owner: "service:authority" });
const keys = PublicKeyRing.import(ring.exportPublic());
const signer = keyRingCheckpointSigner(async () => ring);
const actor = { subject: "root", requestId: "req-admin" };

/** One replica's start: its decision stream and its admin stream, each with its checkpoints. */
async function replica(store: Store, id: string) {
  const streams = await Promise.all(
    [id, adminStreamOf(id)].map(async (stream) => {
      const linker = createChainLinker({ stream, heads: await recoverChainHeads(store, stream, NOW) });
      const checkpoints = startCheckpoints({
        store,
        linker,
        signer,
        intervalMs: 3_600_000,
        now: () => NOW,
        onError: (error) => assert.fail(String(error)),
      });
      return { linker, checkpoints };
    }),
  );
  const [decisions, admin] = streams as [(typeof streams)[0], (typeof streams)[0]];
  const recorder = createAuditRecorder({ store, chain: decisions.linker });
  const adminChain: AdminChain = createAdminChain(store, admin.linker);
  const deps = { store, adminChain };
  return {
    admin,
    async change(i: number) {
      const assignment = { partner_id: "p1", subject_id: `s${i}`, capability_id: "cap" } as AssignmentRecord;
      const change = { partnerId: "p1", subjectId: `s${i}`, capabilityId: "cap" };
      await writeAssignmentChange(deps, actor, { action: "assign", ...change }, assignment, NOW);
      await recordPolicyChange(deps, actor, { action: "revoke", ...change, capabilityId: null }, NOW);
      await recordBindingChange(deps, {
        action: "experience_update",
        actor: "root",
        partner_id: "p1",
        binding_id: `b${i}`,
        revision: i,
        enabled: true,
        time: NOW.toISOString(),
        requestId: `req-b${i}`,
      });
      await recorder.record({
        actor: "agent",
        subject_id: `s${i}`,
        partner_id: "p1",
        capability_id: "cap",
        method: "GET",
        path: "/x",
        permission_id: null,
        decision: "allowed",
        reason: null,
        transport: "http",
        requestId: `req-${i}`,
        time: NOW,
      });
    },
    async stop() {
      await recorder.close();
      for (const stream of streams) {
        stream.checkpoints.stop();
        await stream.checkpoints.checkpoint("shutdown");
      }
    },
  };
}

describe("policy and binding changes in the chains", () => {
  let dir: TempDir;
  let store: SqliteStore;
  let lines: string[];
  const verify = (text: readonly string[]) => verifyChainExport(`${text.join("\n")}\n`, keys);
  /** The 1-based line of the k-th admin change record. */
  const changeLine = (k: number) => {
    let seen = 0;
    for (let i = 0; i < lines.length; i++) {
      const parsed = JSON.parse(lines[i] as string) as { type: string; value?: { kind?: string } };
      const kind = parsed.value?.kind;
      if (parsed.type === "record" && (kind === "policy_change" || kind === "binding_change") && ++seen === k)
        return i + 1;
    }
    throw new Error(`no change ${k}`);
  };

  before(async () => {
    dir = await makeTempDir("admin-chain-");
    store = new SqliteStore({ path: join(dir.path, "a.db"), sweepIntervalMs: 0 });
    const first = await replica(store, "replica-a");
    for (let i = 0; i < 3; i++) await first.change(i);
    await first.stop();
    // A restart continues the admin stream where it ended.
    const second = await replica(store, "replica-a");
    assert.equal(second.admin.linker.storedHeads().audit.n, 9);
    for (let i = 3; i < 5; i++) await second.change(i);
    await second.stop();
    lines = [];
    for await (const line of exportChains(store, NOW)) lines.push(line);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  it("verifies them untouched: chained, none left unchained or unsealed", async () => {
    const result = await verify(lines);
    assert.equal(result.failure, undefined);
    assert.equal(result.records, 20);
    assert.equal(result.unchained, 0);
    assert.equal(result.unsealed, 0);
    assert.equal(result.streams, 2);
  });

  it("names a changed, a removed, a swapped and a cut change record", async () => {
    const at = changeLine(4);
    const flipped = lines.map((line, i) =>
      i === at - 1 ? line.replace('"actor":"root"', '"actor":"toor"') : line,
    );
    assert.notDeepEqual(flipped, lines);
    assert.equal((await verify(flipped)).failure?.kind, "modified");
    assert.equal((await verify(lines.filter((_, i) => i !== at - 1))).failure?.kind, "removed");
    const next = changeLine(5);
    const swapped = [...lines];
    [swapped[at - 1], swapped[next - 1]] = [lines[next - 1] as string, lines[at - 1] as string];
    assert.equal((await verify(swapped)).failure?.kind, "reordered");
    const last = changeLine(15);
    const cut = lines.filter((_, i) => i !== last - 1);
    assert.equal((await verify(cut)).failure?.kind, "truncated");
  });
});
