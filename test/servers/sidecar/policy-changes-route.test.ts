import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createSubject } from "../../../src/admin/subjects.ts";
import type { PolicyChangesPage } from "../../../src/policy/change-log.ts";
import { readPolicyRecord } from "../../../src/policy/record-store.ts";
import { PARTNER, startWorld, type World } from "./world.ts";

/**
 * `GET /v1/sidecar/policy-changes` over real HTTP (decision 2507): who may read the log, what
 * a partner-bound sidecar sees, and that a change which takes access away answers only once
 * every sidecar holding a lease has acknowledged it. The lease here is a minute, so a wait can
 * only end by an acknowledgement, never by time on a slow machine. Every read names its
 * instance: a read without one is a lease nobody can acknowledge (a change then waits it out).
 */
describe("authority service: the policy change log sidecars follow", () => {
  let world: World;
  const INSTANCE = "holder-0123456789abcdef";
  const GLOBEX_INSTANCE = "globex-0123456789abcdef";
  let globexToken: string;

  before(async () => {
    world = await startWorld({ sidecarLeaseMs: 60_000 });
    globexToken = (
      await world.idp.issueToken({
        subject: "sidecar-globex",
        roles: ["sidecar"],
        claims: { partner_id: "globex" },
      })
    ).accessToken;
  });
  after(() => world.close());

  const read = async (
    query: Record<string, string>,
    token: string | null = world.tokens.sidecar,
  ): Promise<{ status: number; body: PolicyChangesPage }> => {
    const response = await fetch(
      `${world.authorityUrl}/v1/sidecar/policy-changes?${new URLSearchParams(query)}`,
      {
        headers: token === null ? {} : { authorization: `Bearer ${token}` },
      },
    );
    return { status: response.status, body: (await response.json()) as never };
  };
  const subject = async (subjectId: string): Promise<void> => {
    await createSubject(world.context, PARTNER, {
      subject_id: subjectId,
      subject_type: "agent",
      display_name: subjectId,
    });
    await world.assign(subjectId, {});
  };
  /** Reads (as the holder) until the log shows a change of `subjectId`; the cursor then. */
  const readUntil = async (after: number, subjectId: string): Promise<number> => {
    for (let cursor = after; ; ) {
      const page = await read({ after: String(cursor), instance: INSTANCE });
      assert.equal(page.status, 200);
      if (page.body.changes.some((change) => change.subject_id === subjectId)) return page.body.cursor;
      cursor = page.body.cursor;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };

  test("sidecar principals only; a malformed cursor or instance id is a 400", async () => {
    assert.equal((await read({ instance: INSTANCE }, null)).status, 401);
    assert.equal((await read({ instance: INSTANCE }, world.tokens.agent)).status, 403);
    const malformed: Array<Record<string, string>> = [
      { after: "-1" },
      { after: "01" },
      { after: "x" },
      { instance: "short" },
      { wait: "1" },
    ];
    for (const query of malformed) {
      assert.equal((await read(query)).status, 400, JSON.stringify(query));
    }
    const first = await read({ instance: INSTANCE });
    assert.equal(first.status, 200);
    assert.equal(first.body.lease_ms, 60_000);
    assert.deepEqual(Object.keys(first.body).sort(), ["changes", "complete", "cursor", "lease_ms", "reset"]);
  });

  test("every policy write is logged; a sidecar bound to another partner does not see it", async () => {
    const start = (await read({ instance: INSTANCE })).body.cursor;
    await subject("agent-logged");
    const page = await read({ after: String(start), instance: INSTANCE });
    const record = await readPolicyRecord(world.store, "agent-logged");
    assert.deepEqual(page.body.changes, [
      { subject_id: "agent-logged", head: 1, document_hash: record?.document_hash, revoked_at: null },
    ]);
    // globex follows its own partner's log: acme's change neither shows nor moves its cursor.
    const foreignStart = (await read({ instance: GLOBEX_INSTANCE }, globexToken)).body.cursor;
    await subject("agent-logged-2");
    const foreign = await read({ after: String(foreignStart), instance: GLOBEX_INSTANCE }, globexToken);
    assert.equal(foreign.status, 200);
    assert.deepEqual(
      { changes: foreign.body.changes, cursor: foreign.body.cursor },
      { changes: [], cursor: foreignStart },
    );
    // A cursor of the whole log handed to a partner-bound reader is a reset, not a position.
    assert.equal(
      (await read({ after: String(start), instance: GLOBEX_INSTANCE }, globexToken)).body.reset,
      true,
    );
  });

  test("a revocation answers once the sidecar holding a lease acknowledged it; a first grant does not wait", async () => {
    await subject("agent-acknowledged");
    // The holder reads the log once: it now holds a lease of a minute.
    let cursor = (await read({ instance: INSTANCE })).body.cursor;
    // So does a sidecar of another partner, which never acknowledges anything (it could not see
    // acme's change), and one that reads without an instance id: neither may hold acme's revocation up.
    assert.equal((await read({ instance: GLOBEX_INSTANCE }, globexToken)).status, 200);
    assert.equal((await read({}, globexToken)).status, 200);
    // A first grant takes nothing away: it answers although the holder has not read it.
    await subject("agent-first-grant");

    let answered = false;
    const revoking = world.revoke("agent-acknowledged").then((status) => {
      answered = true;
      return status;
    });
    cursor = await readUntil(cursor, "agent-acknowledged");
    assert.equal(answered, false, "the holder has not acknowledged the revocation yet");
    // Its next read says it applied everything up to the revocation: the acknowledgement.
    assert.equal((await read({ after: String(cursor), instance: INSTANCE })).status, 200);
    assert.equal(await revoking, 200);
  });
});
