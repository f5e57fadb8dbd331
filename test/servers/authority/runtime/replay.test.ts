/**
 * What-if replay on a real authority (decision 2771): decisions recorded through
 * authorize-invocation, then `PUT …/policies/{capability}?dry_run=true` with a proposed
 * assignment — the flips it reports are exactly those the test computes from the answers it
 * got and the two allow lists, nothing is written, and `authority replay` gates on them.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { HttpMethod } from "../../../../src/core/index.ts";
import { type Harness, startHarness } from "./harness.ts";
import { CAPABILITY, PARTNER, seedAll, seedPolicy, seedSubject } from "./seed.ts";

type Op = readonly [HttpMethod, string];
const permission = ([method, path]: Op) => `${CAPABILITY}:${method.toLowerCase()}:${path}`;
const BEFORE: readonly Op[] = [
  ["GET", "/users/{id}"],
  ["DELETE", "/users/{id}"],
  ["POST", "/invoices"],
];
const PROPOSED: readonly Op[] = [
  ["GET", "/users/{id}"],
  ["GET", "/users/me"],
  ["GET", "/invoices/{invoiceId}/lines/{lineId}"],
];
/** Requests and the catalog operation each names (null: none). */
const REQUESTS: ReadonlyArray<{ method: HttpMethod; path: string; op: Op | null }> = [
  { method: "GET", path: "/users/42", op: ["GET", "/users/{id}"] },
  { method: "GET", path: "/users/me", op: ["GET", "/users/me"] },
  { method: "DELETE", path: "/users/7", op: ["DELETE", "/users/{id}"] },
  { method: "POST", path: "/invoices", op: ["POST", "/invoices"] },
  { method: "GET", path: "/invoices/1/lines/2", op: ["GET", "/invoices/{invoiceId}/lines/{lineId}"] },
  { method: "PATCH", path: "/users/42", op: null },
  { method: "GET", path: "/nowhere", op: null },
];
const WRAPPER = fileURLToPath(new URL("../../../../bin/authority", import.meta.url));

interface Flips {
  count: number;
  examples: Array<{ requestId: string; recorded: { decision: string }; replayed: { decision: string } }>;
}
interface DryRun {
  dry_run: boolean;
  records: number;
  truncated: boolean;
  replay: {
    replayed: number;
    unchanged: number;
    allow_to_deny: Flips;
    deny_to_allow: Flips;
    skipped: Record<string, number>;
  };
  gate?: { passed: boolean; failures: string[] };
}

describe("what-if replay of an assignment (dry_run)", () => {
  let h: Harness;
  let admin: string;
  let since: string;
  const expected = { allowToDeny: [] as string[], denyToAllow: [] as string[], unchanged: 0 };
  const proposedBody = {
    allowed_permission_ids: PROPOSED.map(permission),
    ttl_seconds: 3600,
    auth_profile_ref: "none",
  };
  const url = (query: string, partner = PARTNER) =>
    `${h.url}/partners/${partner}/caab/subjects/agent-7/policies/${CAPABILITY}?${query}`;
  const put = async (query: string, token = admin, body: unknown = proposedBody) => {
    const response = await fetch(url(query), {
      method: "PUT",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as DryRun & Record<string, unknown> };
  };

  before(async () => {
    h = await startHarness();
    const { store, protector } = h.service.context;
    since = new Date(Date.now() - 60_000).toISOString();
    await seedAll(store, protector, { allow: [...BEFORE] });
    // Another subject's decisions on the same capability: never part of agent-7's replay.
    const other = await seedSubject(store, { subjectId: "agent-8" });
    await seedPolicy(store, protector, { subject: other, allow: [...PROPOSED] });
    const tokens = { "agent-7": await h.token("agent-7"), "agent-8": await h.token("agent-8") };
    const proposed = new Set(PROPOSED.map(permission));
    for (let round = 0; round < 3; round++) {
      for (const request of REQUESTS) {
        for (const subject of ["agent-7", "agent-8"] as const) {
          const answer = await h.authorize(
            { subject: { subject_id: subject }, capability_id: CAPABILITY, ...request, op: undefined },
            tokens[subject],
          );
          if (subject !== "agent-7") continue;
          // Independently: the answer the test got, and whether the proposed list names the operation.
          const wasAllowed = answer.body.status === "allowed";
          const nowAllowed = request.op !== null && proposed.has(permission(request.op));
          const requestId = String(answer.body.requestId);
          if (wasAllowed && !nowAllowed) expected.allowToDeny.push(requestId);
          else if (!wasAllowed && nowAllowed) expected.denyToAllow.push(requestId);
          else expected.unchanged++;
        }
      }
    }
    assert.equal(await h.service.recorder.flush(5000), true);
    admin = await h.token("pa-1", { roles: ["partner_admin"], partnerId: PARTNER });
  });
  after(() => h.close());

  it("reports exactly the flips the test computed, and writes nothing", async () => {
    const assignmentPath = `/partners/${PARTNER}/caab/subjects/agent-7/policies/${CAPABILITY}`;
    const policyBefore = await h.get(`/partners/${PARTNER}/caab/subjects/agent-7/policy`, admin);
    const assignmentBefore = await h.get(assignmentPath, admin);
    assert.equal(policyBefore.status, 200);
    const { status, body } = await put(`dry_run=true&since=${since}&examples=100`);
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.dry_run, true);
    assert.equal(body.truncated, false);
    assert.ok(expected.allowToDeny.length > 0 && expected.denyToAllow.length > 0);
    const ids = (flips: Flips) => flips.examples.map((example) => example.requestId);
    assert.deepEqual(ids(body.replay.allow_to_deny), expected.allowToDeny);
    assert.deepEqual(ids(body.replay.deny_to_allow), expected.denyToAllow);
    assert.equal(body.replay.allow_to_deny.count, expected.allowToDeny.length);
    assert.equal(body.replay.deny_to_allow.count, expected.denyToAllow.length);
    assert.equal(body.replay.unchanged, expected.unchanged);
    assert.equal(body.records, REQUESTS.length * 3);

    const policyAfter = await h.get(`/partners/${PARTNER}/caab/subjects/agent-7/policy`, admin);
    assert.deepEqual(policyAfter.body, policyBefore.body, "a dry run signs and stores nothing");
    assert.deepEqual((await h.get(assignmentPath, admin)).body, assignmentBefore.body, "nor an assignment");
  });

  it("checks the proposed change like the real one, and keeps to the partner's scope", async () => {
    const unknown = await put("dry_run=true", admin, { allowed_permission_ids: ["billing-api:get:/nope"] });
    assert.equal(unknown.status, 400);
    const backwards = await put(`dry_run=true&since=${new Date().toISOString()}&until=${since}`);
    assert.equal(backwards.status, 400);
    const otherAdmin = await h.token("pa-2", { roles: ["partner_admin"], partnerId: "partner-2" });
    assert.equal((await put("dry_run=true", otherAdmin)).status, 403);
    const reader = await h.token("viewer", { roles: ["partner_viewer"], partnerId: PARTNER });
    assert.notEqual((await put("dry_run=true", reader)).status, 200);
  });

  it("reads only decision records: the subject's admin changes in the window are neither counted nor skipped", async () => {
    const shadow = await fetch(`${url("").replace(/\?$/, "")}/shadow`, {
      method: "PUT",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify(proposedBody),
    });
    assert.equal(shadow.status, 200, "a shadow_assign record of agent-7 on the capability is in the window");
    const { status, body } = await put(`dry_run=true&since=${since}`);
    assert.equal(status, 200);
    assert.equal(body.records, REQUESTS.length * 3);
    assert.deepEqual(body.replay.skipped, {});
  });

  it("the policy view replays the subject's shadows: what promoting each would flip, exactly the flips computed", async () => {
    // The test above left agent-7 with a shadow of the proposed assignment on the capability.
    const view = `/partners/${PARTNER}/caab/subjects/agent-7/policy`;
    const plain = await h.get(view, admin);
    assert.equal(plain.status, 200);
    assert.equal(plain.body.shadow_replay, undefined, "a view without replay=shadow replays nothing");
    const replayed = await h.get(
      `${view}?replay=shadow&since=${encodeURIComponent(since)}&examples=100`,
      admin,
    );
    assert.equal(replayed.status, 200, JSON.stringify(replayed.body));
    assert.equal(replayed.body.subject_id, "agent-7");
    assert.ok(replayed.body.shadow_policy, "the view still shows the shadow itself");
    const reports = replayed.body.shadow_replay as DryRun[] & Array<{ capability_id: string }>;
    assert.equal(reports.length, 1);
    const [report] = reports;
    assert.ok(report);
    assert.equal(report.capability_id, CAPABILITY);
    const ids = (flips: Flips) => flips.examples.map((example) => example.requestId);
    assert.deepEqual(ids(report.replay.allow_to_deny), expected.allowToDeny);
    assert.deepEqual(ids(report.replay.deny_to_allow), expected.denyToAllow);
    assert.equal(report.replay.unchanged, expected.unchanged);
    // A replay is a partner admin's work, bounded like a dry run: read roles see the view only.
    const auditor = await h.token("eve", { roles: ["auditor"] });
    assert.equal((await h.get(view, auditor)).status, 200);
    assert.equal((await h.get(`${view}?replay=shadow`, auditor)).status, 403);
    const otherAdmin = await h.token("pa-2", { roles: ["partner_admin"], partnerId: "partner-2" });
    assert.equal((await h.get(`${view}?replay=shadow`, otherAdmin)).status, 403);
    assert.equal((await h.get(`${view}?replay=everything`, admin)).status, 400);
  });

  it("runs one dry run per partner at a time: another gets 429 replay_busy with Retry-After, then the slot frees", async () => {
    const store = h.service.context.store;
    const queryLog = store.queryLog.bind(store);
    let entered = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    // The first dry run is held inside its first read of the log, so the second surely meets it running.
    let holding = true;
    store.queryLog = async (log, query) => {
      if (log === "audit" && holding) {
        holding = false;
        entered();
        await held;
      }
      return queryLog(log, query);
    };
    try {
      const first = put(`dry_run=true&since=${since}`);
      await inside;
      const second = await fetch(url(`dry_run=true&since=${since}`), {
        method: "PUT",
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
        body: JSON.stringify(proposedBody),
      });
      const refused = (await second.json()) as { error: string };
      assert.equal(second.status, 429);
      assert.equal(refused.error, "replay_busy");
      assert.ok(Number(second.headers.get("retry-after")) >= 1, "Retry-After names whole seconds");
      release();
      assert.equal((await first).status, 200);
    } finally {
      release();
      store.queryLog = queryLog;
    }
    assert.equal(
      (await put(`dry_run=true&since=${since}`)).status,
      200,
      "the finished replay freed its slot",
    );
  });

  it("yields to the event loop between pages of a long replay, so decisions are not stalled", async () => {
    const { store } = h.service.context;
    const subject = await seedSubject(store, { subjectId: "agent-9" });
    const now = Date.now();
    const records = Array.from({ length: 2_500 }, (_, i) => ({
      kind: "decision",
      id: `seeded-${i}`,
      actor: null,
      subject_id: subject.subject_id,
      partner_id: PARTNER,
      capability_id: CAPABILITY,
      method: "GET",
      path: `/users/${i}`,
      permission_id: permission(["GET", "/users/{id}"]),
      decision: "allowed",
      reason: null,
      transport: "http",
      requestId: `seeded-${i}`,
      time: new Date(now - 30_000 + i).toISOString(),
    }));
    await store.appendMany("audit", records);
    let turns = 0;
    let ticker = setImmediate(function turn() {
      turns++;
      ticker = setImmediate(turn);
    });
    const turnsAtPage: number[] = [];
    const queryLog = store.queryLog.bind(store);
    store.queryLog = (log, query) => {
      if (log === "audit") turnsAtPage.push(turns);
      return queryLog(log, query);
    };
    try {
      const response = await fetch(
        `${h.url}/partners/${PARTNER}/caab/subjects/agent-9/policies/${CAPABILITY}?dry_run=true&since=${since}`,
        {
          method: "PUT",
          headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
          body: JSON.stringify(proposedBody),
        },
      );
      const body = (await response.json()) as DryRun;
      assert.equal(response.status, 200, JSON.stringify(body));
      assert.equal(body.records, records.length);
    } finally {
      clearImmediate(ticker);
      store.queryLog = queryLog;
    }
    assert.ok(turnsAtPage.length >= 3, `pages read: ${turnsAtPage.length}`);
    for (let page = 1; page < turnsAtPage.length; page++) {
      assert.ok(
        (turnsAtPage[page] ?? 0) > (turnsAtPage[page - 1] ?? 0),
        `the event loop turned between pages: ${turnsAtPage.join(",")}`,
      );
    }
  });

  it("`authority replay` prints the report and exits 1 when flips exceed the threshold", async () => {
    const file = join(h.dir.path, "assignment.json");
    await writeFile(file, JSON.stringify(proposedBody));
    const run = async (...gate: string[]) => {
      const args = ["replay", "--url", h.url, "--partner", PARTNER, "--subject", "agent-7"];
      args.push("--capability", CAPABILITY, "--assignment", file, "--since", since, ...gate);
      try {
        const { stdout } = await promisify(execFile)(WRAPPER, args, {
          env: { ...process.env, AUTHORITY_TOKEN: admin },
          timeout: 30_000,
        });
        return { code: 0, answer: JSON.parse(stdout) as DryRun };
      } catch (error) {
        const failed = error as { code: number; stdout: string };
        return { code: failed.code, answer: JSON.parse(failed.stdout || "{}") as DryRun };
      }
    };
    const narrow = expected.allowToDeny.length;
    const failing = await run("--max-allow-to-deny", String(narrow - 1));
    assert.equal(failing.code, 1);
    assert.equal(failing.answer.gate?.passed, false);
    assert.deepEqual(failing.answer.gate?.failures, [`allow_to_deny ${narrow} > ${narrow - 1}`]);
    const passing = await run("--max-allow-to-deny", String(narrow), "--max-deny-to-allow", "1000");
    assert.equal(passing.code, 0);
    assert.equal(passing.answer.gate?.passed, true);
    assert.equal(passing.answer.replay.allow_to_deny.count, narrow);
  });
});
