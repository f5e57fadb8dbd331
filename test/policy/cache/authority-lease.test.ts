import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  createAuthorityLease,
  PolicyCacheError,
  type PolicyChangeSource,
} from "../../../src/policy/cache/index.ts";
import type { PolicyChange, PolicyChangesPage } from "../../../src/policy/change-log.ts";

/**
 * The sidecar's freshness lease over the authority's change log (decision 2507), driven
 * step by step (`sync()`, no background reads) against a scripted authority and a test clock.
 */

function page(cursor: number, changes: PolicyChange[] = [], extra: Partial<PolicyChangesPage> = {}) {
  return { cursor, changes, complete: true, reset: false, lease_ms: 2000, ...extra };
}

function scripted() {
  const requests: Array<{ after: number | undefined; wait: boolean; instance: string }> = [];
  const answers: Array<PolicyChangesPage | Error> = [];
  const source: PolicyChangeSource = {
    async fetchPolicyChanges(after, options) {
      requests.push({ after, wait: options.wait, instance: options.instance });
      const next = answers.shift();
      if (next === undefined) throw new Error("no answer scripted");
      if (next instanceof Error) throw next;
      return next;
    },
  };
  return { source, requests, answers };
}

describe("the sidecar's freshness lease", () => {
  test("current for lease_ms from when the last complete read was sent; lapses after, without I/O", async () => {
    const authority = scripted();
    const time = { at: 10_000 };
    const lease = createAuthorityLease({ source: authority.source, now: () => time.at });
    assert.equal(lease.current(), false, "no lease before the first read");
    assert.equal(await lease.whenCurrent(1), false);
    authority.answers.push(page(5));
    await lease.sync();
    assert.equal(authority.requests[0]?.after, undefined, "a first read starts at the end of the log");
    assert.match(authority.requests[0]?.instance ?? "", /^[A-Za-z0-9_-]{22}$/);
    assert.equal(lease.current(), true);
    assert.equal(await lease.whenCurrent(1), true);
    time.at += 2000;
    assert.equal(lease.current(), true);
    time.at += 1;
    assert.equal(lease.current(), false, "past the bound, nothing is decided from the cache");
    // A failed read does not renew it.
    authority.answers.push(new Error("authority unreachable"));
    await assert.rejects(lease.sync());
    assert.equal(lease.current(), false);
    lease.close();
  });

  test("changes reach the listeners before the lease is extended, and the next read acknowledges them", async () => {
    const authority = scripted();
    const time = { at: 0 };
    const lease = createAuthorityLease({ source: authority.source, now: () => time.at });
    const seen: Array<{ changes: readonly PolicyChange[]; current: boolean }> = [];
    lease.onChanges((changes) => seen.push({ changes, current: lease.current() }));
    authority.answers.push(page(5));
    await lease.sync();
    time.at += 2500;
    authority.answers.push(
      page(7, [{ subject_id: "agent-1", head: 3, document_hash: "sha256:aa", revoked_at: null }]),
      page(7),
    );
    await lease.sync();
    assert.deepEqual(seen, [
      {
        changes: [{ subject_id: "agent-1", head: 3, document_hash: "sha256:aa", revoked_at: null }],
        current: false,
      },
    ]);
    assert.deepEqual(
      authority.requests.slice(1).map(({ after, wait }) => ({ after, wait })),
      [
        { after: 5, wait: false },
        { after: 7, wait: false },
      ],
      "read from 5, then at once from 7: the acknowledgement",
    );
    assert.equal(lease.current(), true);
    lease.close();
  });

  test("a reset, or a cursor that went back (a replaced store), tells the listeners to forget everything", async () => {
    const authority = scripted();
    const lease = createAuthorityLease({ source: authority.source, now: () => 0 });
    let resets = 0;
    lease.onReset(() => resets++);
    authority.answers.push(page(50));
    await lease.sync();
    authority.answers.push(page(3), page(3));
    await lease.sync();
    assert.equal(resets, 1);
    authority.answers.push(page(90, [], { reset: true }), page(90));
    await lease.sync();
    assert.equal(resets, 2);
    lease.close();
  });

  test("a malformed answer (lease out of range, no cursor) is an error and grants nothing", async () => {
    for (const bad of [page(1, [], { lease_ms: 10 }), page(-1), { ...page(1), complete: "yes" }]) {
      const authority = scripted();
      const lease = createAuthorityLease({ source: authority.source, now: () => 0 });
      authority.answers.push(bad as PolicyChangesPage);
      await assert.rejects(lease.sync(), PolicyCacheError);
      assert.equal(lease.current(), false);
      lease.close();
    }
  });

  test("a change a listener could not apply is not covered by a lease: the next read brings it again", async () => {
    const authority = scripted();
    const time = { at: 0 };
    const lease = createAuthorityLease({ source: authority.source, now: () => time.at });
    authority.answers.push(page(5));
    await lease.sync();
    time.at += 2500;
    let failing = true;
    const applied: number[] = [];
    lease.onChanges((changes) => {
      if (failing) throw new Error("could not evict");
      applied.push(...changes.map((change) => change.head));
    });
    const change = { subject_id: "agent-1", head: 9, document_hash: "sha256:bb", revoked_at: null };
    authority.answers.push(page(6, [change]));
    await assert.rejects(lease.sync(), PolicyCacheError);
    assert.equal(lease.current(), false);
    failing = false;
    authority.answers.push(page(6, [change]), page(6));
    await lease.sync();
    assert.equal(authority.requests.at(-2)?.after, 5, "read again from before the change");
    assert.deepEqual(applied, [9]);
    assert.equal(lease.current(), true);
    lease.close();
  });

  test("closed: not current, and nobody waits for a first lease", async () => {
    const authority = scripted();
    const lease = createAuthorityLease({ source: authority.source, now: () => 0 });
    const waiting = lease.whenCurrent(60_000);
    lease.close();
    assert.equal(await waiting, false);
    assert.equal(lease.current(), false);
  });
  test("idle: reading stops after a lease no decision asked about, and the next decision reads again with what was logged meanwhile", async () => {
    const time = { at: 0 };
    const requests: Array<{ after: number | undefined; wait: boolean }> = [];
    let logged: PolicyChange[] = [];
    let cursor = 5;
    const source: PolicyChangeSource = {
      async fetchPolicyChanges(after, options) {
        requests.push({ after, wait: options.wait });
        // Bounded, so that a lease that never pauses fails the test instead of spinning.
        if (requests.length > 100) return new Promise<never>(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 2));
        const changes = logged;
        logged = [];
        cursor += changes.length;
        // A held read with nothing new comes back after 45 % of the lease.
        if (changes.length === 0 && options.wait) time.at += 900;
        return page(cursor, changes);
      },
    };
    const lease = createAuthorityLease({ source, now: () => time.at });
    const seen: PolicyChange[] = [];
    lease.onChanges((changes) => seen.push(...changes));
    lease.start();
    assert.equal(await lease.whenCurrent(1000), true);
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    for (let i = 0; i < 200 && requests.length < 12; i++) await pause(10);
    const beforeFirstDecision = requests.length;
    assert.ok(
      beforeFirstDecision >= 12,
      "no decision yet (a ready sidecar waits for its first Check): reads go on",
    );
    assert.equal(lease.current(), true, "a decision");
    // Until no read was sent for 100 ms (or the source's bound was reached).
    for (let last = -1, i = 0; i < 60 && requests.length !== last; i++) {
      last = requests.length;
      await pause(100);
    }
    const whileIdle = requests.length;
    assert.ok(whileIdle - beforeFirstDecision <= 8, `an idle lease stops reading (${whileIdle} reads)`);
    time.at += 2001;
    assert.equal(lease.held(), false, "the paused lease lapses: nothing is decided from it");
    assert.equal(requests.length, whileIdle, "held() does not start reading");

    const revoked = {
      subject_id: "agent-1",
      head: 4,
      document_hash: "sha256:bb",
      revoked_at: "2026-11-29T00:00:00Z",
    };
    logged = [revoked];
    assert.equal(lease.current(), false, "a decision finds it lapsed…");
    assert.equal(await lease.whenCurrent(1000), true, "…and waits for the read it started");
    assert.deepEqual(seen, [revoked], "the change logged while it paused came before the lease");
    assert.equal(requests[whileIdle]?.after, 5, "read on from the kept cursor");
    assert.ok(requests.length < 100);
    lease.close();
  });
});
