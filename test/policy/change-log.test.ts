import assert from "node:assert/strict";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";
import {
  appendPolicyChange,
  createSidecarLeases,
  type PolicyChangesRequest,
  type SidecarLeases,
} from "../../src/policy/change-log.ts";
import { openStore } from "../../src/store/index.ts";
import { collections } from "../../src/store/model.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/**
 * The authority's side of the sidecars' freshness leases (decision 2507): the change log a
 * sidecar reads, the read held until a change is logged, and `outlast`, which a change that
 * takes access away waits on before it answers. No test here asserts how fast something
 * happens; where a wait matters, only that it did not end before its bound.
 */
describe("policy change log and sidecar leases", () => {
  let dir: TempDir;
  /** Each test's own store: another test's grant marks would read as another authority process's. */
  let store: Store;
  let stores = 0;

  before(async () => {
    dir = await makeTempDir("change-log-");
  });
  beforeEach(async () => {
    store = await openStore(`sqlite:${join(dir.path, `${++stores}.db`)}`);
  });
  afterEach(async () => {
    await store.close();
  });
  after(async () => {
    await dir.cleanup();
  });

  const reader = (leases: SidecarLeases, instance: string | undefined, partnerId?: string) => {
    return (after: number | undefined, wait = false) => {
      const request: PolicyChangesRequest = { after, instance, principal: "sidecar-1", partnerId, wait };
      return leases.read(request);
    };
  };
  const change = (subject: string, head: number, partner = "acme") =>
    appendPolicyChange(store, {
      subject_id: subject,
      partner_id: partner,
      head,
      document_hash: `sha256:${head}`,
      revoked_at: null,
    });
  const seen = (subject_id: string, head: number) => ({
    subject_id,
    head,
    document_hash: `sha256:${head}`,
    revoked_at: null,
  });
  /** Whether the promise settled by the time every queued event ran (no timing involved). */
  const settled = async (promise: Promise<unknown>): Promise<boolean> => {
    let done = false;
    void promise.then(() => {
      done = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    return done;
  };

  test("the first read starts at the end of the log; later reads page through it, another partner's changes left out", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 2000 });
    const read = reader(leases, "instance-aaaaaaaaaaaaaaaa", "acme");
    const first = await read(undefined);
    assert.deepEqual(
      { changes: first.changes, complete: first.complete, reset: first.reset, lease_ms: first.lease_ms },
      { changes: [], complete: true, reset: false, lease_ms: 2000 },
    );
    await change("agent-a", 1);
    await change("agent-b", 4, "globex");
    await change("agent-a", 2);
    const next = await read(first.cursor);
    assert.deepEqual(next.changes, [seen("agent-a", 1), seen("agent-a", 2)]);
    assert.equal(next.complete, true);
    assert.deepEqual((await read(next.cursor)).changes, [], "the cursor is past both");
    // An unbound sidecar sees every partner's changes.
    const platform = reader(leases, "instance-bbbbbbbbbbbbbbbb");
    const all = await platform(0);
    assert.equal(all.changes.length, 3);
  });

  test("a cursor ahead of the log (a replaced store) is a reset: the sidecar forgets what it holds", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 2000 });
    const read = reader(leases, "instance-cccccccccccccccc");
    const end = (await read(undefined)).cursor;
    const ahead = await read(end + 5);
    assert.deepEqual(
      { reset: ahead.reset, cursor: ahead.cursor, changes: ahead.changes },
      {
        reset: true,
        cursor: end,
        changes: [],
      },
    );
  });

  test("a read with nothing new is held until a change is logged, and answered with it", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 60_000 });
    const read = reader(leases, "instance-dddddddddddddddd");
    const end = (await read(undefined)).cursor;
    const held = read(end, true);
    assert.equal(await settled(held), false, "held while nothing is logged");
    const { seq } = await change("agent-held", 1);
    leases.logged("acme");
    const answer = await held;
    assert.deepEqual(answer.changes, [seen("agent-held", 1)]);
    assert.equal(answer.cursor, seq);
    // Shutdown answers held reads at once.
    const again = read(seq, true);
    leases.close();
    assert.deepEqual((await again).changes, []);
  });

  test("outlast: at once without lease holders; otherwise once every holder acknowledged the change", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 60_000 });
    const none = await change("agent-o", 1);
    assert.equal(await settled(leases.outlast(none, "acme")), true, "nobody holds a lease");

    const one = reader(leases, "instance-eeeeeeeeeeeeeeee");
    const two = reader(leases, "instance-ffffffffffffffff");
    const start = (await one(undefined)).cursor;
    await two(undefined);
    const seq = await change("agent-o", 2);
    const waiting = leases.outlast(seq, "acme");
    assert.equal(await settled(waiting), false, "two sidecars hold leases that may have missed it");
    // The first reads the change; its next read (after = seq) is its acknowledgement.
    assert.equal((await one(start)).cursor, seq.seq);
    await one(seq.seq);
    assert.equal(await settled(waiting), false, "the second has not acknowledged it");
    // Another principal cannot acknowledge for it with its instance id.
    await leases.read({
      after: seq.seq,
      instance: "instance-ffffffffffffffff",
      principal: "someone-else",
      partnerId: undefined,
      wait: false,
    });
    assert.equal(await settled(waiting), false);
    await two(seq.seq);
    await waiting;
  });

  test("outlast: a holder that never acknowledges is waited out until its lease ran out, not less", async () => {
    const leaseMs = 300;
    const leases = createSidecarLeases({ store, leaseMs });
    const read = reader(leases, "instance-gggggggggggggggg");
    // The holder's lease runs from before its read was sent: at the latest until then + leaseMs.
    const readAt = performance.now();
    await read(undefined);
    const seq = await change("agent-silent", 1);
    await leases.outlast(seq, "acme");
    assert.ok(performance.now() >= readAt + leaseMs - 1, "not before the holder's lease ran out");
  });

  test("outlast: a whole lease when a read came without an instance id, or another authority process grants leases", async () => {
    const leaseMs = 300;
    const untracked = createSidecarLeases({ store, leaseMs });
    await reader(untracked, undefined)(undefined);
    const seq = await change("agent-untracked", 1);
    let calledAt = performance.now();
    await untracked.outlast(seq, "acme");
    assert.ok(performance.now() - calledAt >= leaseMs - 1);

    // Another process's mark in the shared store: its sidecars are not known here.
    const here = createSidecarLeases({ store, leaseMs });
    const there = createSidecarLeases({ store, leaseMs });
    await reader(there, "instance-hhhhhhhhhhhhhhhh")(undefined);
    calledAt = performance.now();
    await here.outlast(await change("agent-elsewhere", 1), "acme");
    assert.ok(performance.now() - calledAt >= leaseMs - 1);
    assert.ok((await store.list(collections.sidecarLeases)).items.length >= 1);
  });

  test("outlast waits only on the changed partner's sidecars and platform-wide ones (attack: another partner's sidecar held every revocation up)", async () => {
    // A minute's lease: a wait that is not ended by an acknowledgement would never settle here.
    const leases = createSidecarLeases({ store, leaseMs: 60_000 });
    const globex = reader(leases, "instance-globex-silent00", "globex");
    await globex(undefined);
    // A globex read without an instance id: a lease nobody can acknowledge, but only globex's.
    await reader(leases, undefined, "globex")(undefined);
    const first = await change("agent-acme", 1);
    assert.equal(
      await settled(leases.outlast(first, "acme")),
      true,
      "globex's silent sidecars cannot hold up an acme revocation",
    );

    // acme's own sidecar and a platform-wide one both may enforce acme's policies: both are waited on.
    const acme = reader(leases, "instance-acme-holder0000", "acme");
    const platform = reader(leases, "instance-platform-holder", undefined);
    const acmeStart = (await acme(undefined)).cursor;
    const platformStart = (await platform(undefined)).cursor;
    const seq = await change("agent-acme", 2);
    const waiting = leases.outlast(seq, "acme");
    assert.equal(await settled(waiting), false, "acme's and the platform's sidecars may have missed it");
    const acmeSaw = await acme(acmeStart);
    assert.deepEqual(acmeSaw.changes, [seen("agent-acme", 2)]);
    await acme(acmeSaw.cursor);
    assert.equal(await settled(waiting), false, "the platform-wide sidecar has not acknowledged it");
    const platformSaw = await platform(platformStart);
    await platform(platformSaw.cursor);
    await waiting;

    // A globex change waits on the platform-wide sidecar (it enforces globex too), not on acme's.
    const globexSeq = await change("agent-globex", 1, "globex");
    const globexWaiting = leases.outlast(globexSeq, "globex");
    await platform(platformSaw.cursor);
    assert.equal(await settled(globexWaiting), false, "a platform-wide sidecar holds every partner's lease");
  });

  test("an instance-less read of acme (or of the platform) still makes an acme change wait a whole lease", async () => {
    const leaseMs = 300;
    for (const partnerId of ["acme", undefined]) {
      const leases = createSidecarLeases({ store, leaseMs });
      await reader(leases, undefined, partnerId)(undefined);
      const seq = await change("agent-untracked", 1);
      const calledAt = performance.now();
      await leases.outlast(seq, "acme");
      assert.ok(
        performance.now() - calledAt >= leaseMs - 1,
        `untracked reader of ${partnerId ?? "the platform"}`,
      );
    }
  });

  test("a partner-bound reader learns nothing of other partners' change volume (attack: the cursor counted them)", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 60_000 });
    const globex = reader(leases, "instance-globex-counter0", "globex");
    const before = await globex(undefined);
    for (let head = 1; head <= 5; head++) await change("agent-acme", head);
    // Neither a first read nor a follow-up read moves with acme's changes.
    assert.equal(
      (await reader(leases, "instance-globex-counter1", "globex")(undefined)).cursor,
      before.cursor,
    );
    const after = await globex(before.cursor);
    assert.deepEqual(
      { cursor: after.cursor, changes: after.changes },
      { cursor: before.cursor, changes: [] },
    );
    // A held read is not answered early by another partner's change either (its timing would count them).
    const held = globex(before.cursor, true);
    await change("agent-acme", 6);
    leases.logged("acme");
    assert.equal(await settled(held), false, "acme's change does not wake globex's held read");
    // globex's own change moves its cursor by one, and wakes it.
    await change("agent-globex", 1, "globex");
    leases.logged("globex");
    const own = await held;
    assert.deepEqual(own.changes, [seen("agent-globex", 1)]);
    assert.notEqual(own.cursor, before.cursor);
    const next = await globex(own.cursor);
    assert.equal(next.cursor, own.cursor);
    // The platform-wide reader still reads every partner's changes, in log order.
    const platform = reader(leases, "instance-platform-all000", undefined);
    const start = (await platform(undefined)).cursor;
    await change("agent-acme", 7);
    await change("agent-globex", 2, "globex");
    const all = await platform(start);
    assert.deepEqual(all.changes, [seen("agent-acme", 7), seen("agent-globex", 2)]);
  });

  test("a held read acknowledges on arrival: a revocation does not wait for the hold", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 60_000 });
    const acme = reader(leases, "instance-acme-held000000", "acme");
    const start = (await acme(undefined)).cursor;
    const seq = await change("agent-held-ack", 1);
    const waiting = leases.outlast(seq, "acme");
    const saw = await acme(start);
    // The next read reaches the end of the log and is held; it acknowledged the change already.
    const held = acme(saw.cursor, true);
    let acknowledged = false;
    for (let turns = 0; turns < 200 && !acknowledged; turns++) acknowledged = await settled(waiting);
    assert.equal(acknowledged, true, "the revocation answered while the read was held");
    assert.equal(await settled(held), false, "still held");
    leases.close();
    await held;
  });

  test("a cursor from the other numbering, or beyond the log, is a reset and acknowledges nothing", async () => {
    const leases = createSidecarLeases({ store, leaseMs: 60_000 });
    const platform = reader(leases, "instance-platform-cursor", undefined);
    const acme = reader(leases, "instance-acme-cursor0000", "acme");
    await change("agent-acme", 1);
    await change("agent-acme", 2);
    const platformCursor = (await platform(undefined)).cursor;
    const acmeCursor = (await acme(undefined)).cursor;
    // Each reader handed the other's cursor: a reset, continuing from its own end of the log.
    const crossed = await acme(platformCursor);
    assert.deepEqual({ reset: crossed.reset, cursor: crossed.cursor }, { reset: true, cursor: acmeCursor });
    const crossedBack = await platform(acmeCursor);
    assert.deepEqual(
      { reset: crossedBack.reset, cursor: crossedBack.cursor },
      { reset: true, cursor: platformCursor },
    );
    // A holder that claims a position beyond the log has not acknowledged a change logged later.
    const seq = await change("agent-acme", 3);
    await acme(Number.MAX_SAFE_INTEGER);
    await platform(Number.MAX_SAFE_INTEGER);
    const waiting = leases.outlast(seq, "acme");
    assert.equal(await settled(waiting), false, "a claim beyond the log is no acknowledgement");
  });

  test("a lease bound outside 200–60000 ms is refused at construction", () => {
    for (const leaseMs of [0, 199, 60_001, 1.5]) {
      assert.throws(() => createSidecarLeases({ store, leaseMs }), RangeError);
    }
  });
});
