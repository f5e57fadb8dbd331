/**
 * Shadow policies and the log-only mode over the real servers (decision 2761): a shadow that
 * disagrees with the enforced policy is recorded beside the decision and counted on every
 * path — authorize-invocation, binding invoke, broker, MCP, ext_authz and the forward proxy —
 * while only the enforced policy acts; promoting is one recorded action; the log-only mode is
 * a platform admin's alone.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { writeCompiledPolicy } from "../../src/admin/policy-writer.ts";
import { getSubject } from "../../src/admin/subjects.ts";
import { headlessContextOf } from "../../src/bindings/assignments.ts";
import { getBinding } from "../../src/bindings/bindings.ts";
import { getMapping } from "../../src/bindings/mappings.ts";
import { type AssignmentRecord, collections, logs } from "../../src/store/model.ts";
import {
  AGENT,
  ALLOWED,
  BINDING,
  CAPABILITY,
  OTHER_PARTNER,
  PARTNER,
  type System,
  startSystem,
} from "../helpers/system.ts";

const GET_ITEM = `${CAPABILITY}:get:/items/{itemId}`;
const LIST_ITEMS = `${CAPABILITY}:get:/items`;

interface DecisionRow {
  readonly kind: string;
  readonly transport: string;
  readonly subject_id: string | null;
  readonly decision: string;
  readonly reason: string | null;
  readonly requestId: string;
  readonly shadow?: { decision: string; reason: string | null; agrees: boolean };
  readonly log_only?: { reason: string };
}

describe("shadow policies and the log-only mode, on every path", () => {
  let system: System;
  let admin: string;
  let agent: string;

  const adminCall = async (method: string, path: string, json?: unknown, token?: string) =>
    system.call(method, `${system.url}${path}`, {
      token: token ?? admin,
      ...(json === undefined ? {} : { json }),
    });

  async function decisions(): Promise<DecisionRow[]> {
    const page = await system.store.queryLog<DecisionRow>(logs.audit, {
      where: { kind: "decision" },
      limit: 1000,
    });
    return page.entries.map((entry) => entry.value);
  }

  async function partnerAdmin(partnerId: string): Promise<string> {
    const issued = await system.idp.server().issueToken({
      subject: `${partnerId}-admin`,
      roles: ["partner_admin"],
      claims: { partner_id: partnerId },
    });
    return issued.accessToken;
  }

  async function metric(url: string, name: string): Promise<string[]> {
    const reply = await system.call("GET", url);
    return reply.text.split("\n").filter((line) => line.startsWith(name));
  }

  before(async () => {
    // A short catalog lifetime: the sidecar learns the log-only mode with the catalog.
    system = await startSystem({ sidecar: { options: { catalogTtlMs: 200 } } });
    admin = await system.adminToken();
    agent = await system.agentToken();
    await system.recorder.flush();
  });
  after(() => system?.close());

  test("a partner admin sets a shadow for its own subject; it is signed and stored like a policy", async () => {
    const shadowPath = `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${CAPABILITY}/shadow`;
    // The shadow allows the list operation the enforced policy lacks, and not the item read.
    const set = await adminCall("PUT", shadowPath, {
      allowed_permission_ids: [LIST_ITEMS],
      ttl_seconds: 3600,
    });
    assert.equal(set.status, 200, set.text);
    assert.equal(set.json.shadow_policy.subject_id, AGENT);
    assert.equal(set.json.shadow_policy.encrypted_present, true);
    assert.equal(set.json.shadow_policy.artifact, undefined);
    assert.deepEqual((await adminCall("GET", shadowPath)).json.allowed_permission_ids, [LIST_ITEMS]);
    const view = await adminCall("GET", `/partners/${PARTNER}/caab/subjects/${AGENT}/shadow-policy`);
    assert.equal(view.status, 200, view.text);
    // Another partner's admin can neither read nor write it.
    const other = await partnerAdmin(OTHER_PARTNER);
    const foreign = await adminCall(
      "PUT",
      shadowPath,
      { allowed_permission_ids: [GET_ITEM], ttl_seconds: 60 },
      other,
    );
    assert.equal(foreign.status, 403, foreign.text);
  });

  test("every path records and counts the disagreeing shadow; only the enforced policy acts", async () => {
    const binding = system.binding;
    assert.ok(binding);
    // The binding's mapped user (a headless v2 subject) gets its shadow the same way, under its own context.
    const context = system.context;
    const bindingRecord = await getBinding(context, BINDING);
    const mapping = await getMapping(context, bindingRecord, binding.subjectId);
    const subject = await getSubject(context, PARTNER, binding.subjectId);
    const enforced = await system.store.get<AssignmentRecord>(
      collections.assignments,
      `${PARTNER}/${binding.subjectId}/${CAPABILITY}`,
    );
    assert.ok(enforced);
    const shadow: AssignmentRecord = {
      ...enforced,
      allowed_permission_ids: [LIST_ITEMS] as AssignmentRecord["allowed_permission_ids"],
      operations: [],
    };
    await writeCompiledPolicy(
      context,
      subject,
      [shadow],
      null,
      headlessContextOf(bindingRecord, mapping),
      collections.shadowPolicies,
    );

    const before = (await decisions()).length;
    const tools = (await system.mcp("tools/list", {}, agent)).json.result.tools as Array<{ name: string }>;
    const getItem = tools.find((tool) => tool.name.startsWith("getItem"))?.name;
    assert.ok(getItem);
    const replies = {
      http: await system.authorize({ capability_id: CAPABILITY, method: "GET", path: "/items/7" }, agent),
      mcp: await system.mcp("tools/call", { name: getItem, arguments: { path: { itemId: "7" } } }, agent),
      invoke: await system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/7" }),
      broker: await system.call("POST", `${system.url}/v1/broker/execute`, {
        token: await system.workloadToken(binding.agent, "authority/authority.broker.execute"),
        headers: { "x-authority-user-assertion": await system.userAssertion() },
        json: { capability_id: CAPABILITY, method: "GET", path: "/items/7" },
      }),
      proxy: await system.proxy("/items/7", agent),
    };
    for (const [path, reply] of Object.entries(replies))
      assert.equal(reply.status, 200, `${path}: ${reply.text}`);
    assert.equal(replies.mcp.json.result.isError, undefined, replies.mcp.text);
    const check = await system.check({
      method: "GET",
      path: "/items/7",
      capability: CAPABILITY,
      token: agent,
    });
    assert.equal(check.allowed, true);
    // The enforced policy denies the list; the shadow's allow changes nothing.
    const denied = await system.authorize(
      { capability_id: CAPABILITY, method: "GET", path: "/items" },
      agent,
    );
    assert.equal(denied.status, 403, denied.text);
    assert.equal(denied.json.reason, "operation_not_allowed");

    const rows = await waitFor(async () => {
      // The sidecar fetches a shadow in the background, never holding a decision for it:
      // the first Checks of a subject may be recorded without one.
      const again = await system.check({
        method: "GET",
        path: "/items/7",
        capability: CAPABILITY,
        token: agent,
      });
      assert.equal(again.allowed, true);
      assert.equal((await system.proxy("/items/7", agent)).status, 200);
      await system.sidecar?.sidecar.flushAudit(5000);
      await system.recorder.flush();
      const all = (await decisions()).slice(before);
      const transports = new Set(all.filter((row) => row.shadow !== undefined).map((row) => row.transport));
      return ["http", "mcp", "invoke", "broker", "grpc", "proxy"].every((t) => transports.has(t))
        ? all
        : undefined;
    });
    const disagreeing = { decision: "denied", reason: "operation_not_allowed", agrees: false };
    for (const transport of ["http", "mcp", "invoke", "broker", "grpc", "proxy"]) {
      const allowed = rows.filter((r) => r.transport === transport && r.decision === "allowed");
      assert.ok(allowed.length > 0, `an allowed ${transport} decision`);
      // On the authority every decision has its shadow; the sidecar's first ones may not yet.
      const noted = transport === "grpc" || transport === "proxy" ? allowed.filter((r) => r.shadow) : allowed;
      assert.ok(noted.length > 0, transport);
      for (const row of noted) assert.deepEqual(row.shadow, disagreeing, transport);
    }
    const list = rows.find((r) => r.transport === "http" && r.decision === "denied");
    assert.deepEqual(list?.shadow, { decision: "allowed", reason: null, agrees: false });
    // The admin views show the shadow beside each path's decision: the audit view, and the
    // record a response's receipt finds.
    for (const transport of ["http", "mcp", "invoke", "broker", "grpc", "proxy"]) {
      const view = await adminCall("GET", `/admin/audit?kind=decision&transport=${transport}&limit=500`);
      assert.equal(view.status, 200, view.text);
      const shown = (view.json.items as DecisionRow[]).filter((item) => item.shadow !== undefined);
      assert.ok(
        shown.some((item) => item.decision === "allowed" && item.shadow?.agrees === false),
        `${transport} in GET /admin/audit: ${view.text.slice(0, 400)}`,
      );
    }
    const receipt = replies.http.headers["x-authority-receipt"];
    assert.ok(typeof receipt === "string", "authorize-invocation answers a receipt");
    const found = await adminCall("GET", `/admin/audit/receipts/${encodeURIComponent(receipt)}`);
    assert.equal(found.status, 200, found.text);
    assert.deepEqual(found.json.shadow, disagreeing);

    const counted = await metric(`${system.url}/metrics`, "authority_shadow_decisions_total");
    // The authority counts every record it keeps: its own decisions and those its sidecars ship.
    for (const transport of ["http", "mcp", "invoke", "broker", "grpc", "proxy"]) {
      assert.ok(
        counted.some(
          (line) =>
            line.includes(`transport="${transport}"`) &&
            line.includes('agreement="disagree"') &&
            line.includes('enforced="allowed"') &&
            line.includes('shadow="operation_not_allowed"'),
        ),
        `${transport} counted: ${counted.join("\n")}`,
      );
    }
    const sidecar = system.sidecar;
    assert.ok(sidecar);
    const sidecarCounted = await metric(
      `http://127.0.0.1:${sidecar.metricsPort}/metrics`,
      "authority_sidecar_shadow_decisions_total",
    );
    for (const transport of ["grpc", "proxy"])
      assert.ok(
        sidecarCounted.some(
          (line) =>
            line.includes(`transport="${transport}"`) &&
            line.includes('agreement="disagree"') &&
            line.includes('enforced="allowed"') &&
            line.includes('shadow="operation_not_allowed"'),
        ),
        `sidecar ${transport} counted: ${sidecarCounted.join("\n")}`,
      );
  });

  test("a shadow whose artifact was tampered with never changes a decision, and is noted as invalid", async () => {
    const stored = await system.store.get<Record<string, unknown>>(collections.shadowPolicies, AGENT);
    assert.ok(stored);
    // An attacker with store access points the shadow at the enforced policy of someone else
    // and flips its facts: it no longer verifies.
    await system.store.put(collections.shadowPolicies, AGENT, {
      ...stored,
      document_hash: `sha256:${"0".repeat(64)}`,
    });
    const reply = await system.authorize(
      { capability_id: CAPABILITY, method: "GET", path: "/items/7" },
      agent,
    );
    assert.equal(reply.status, 200, reply.text);
    const denied = await system.authorize(
      { capability_id: CAPABILITY, method: "GET", path: "/items" },
      agent,
    );
    assert.equal(denied.status, 403, denied.text);
    await system.recorder.flush();
    const rows = (await decisions()).filter(
      (r) => r.requestId === reply.json.requestId || r.requestId === denied.json.requestId,
    );
    assert.equal(rows.length, 2);
    for (const row of rows)
      assert.deepEqual(row.shadow, {
        decision: "invalid",
        reason: "policy_verification_failed",
        agrees: false,
      });
    await system.store.put(collections.shadowPolicies, AGENT, stored);
  });

  test("promoting the shadow is one action, recorded; the promoted policy is enforced at once", async () => {
    const promote = await adminCall(
      "POST",
      `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${CAPABILITY}/shadow/promote`,
    );
    assert.equal(promote.status, 200, promote.text);
    assert.deepEqual(promote.json.assignment.allowed_permission_ids, [LIST_ITEMS]);
    assert.equal(promote.json.shadow_policy, null);
    const listed = await system.authorize(
      { capability_id: CAPABILITY, method: "GET", path: "/items" },
      agent,
    );
    assert.equal(listed.status, 200, listed.text);
    const item = await system.authorize(
      { capability_id: CAPABILITY, method: "GET", path: "/items/7" },
      agent,
    );
    assert.equal(item.status, 403, item.text);
    const page = await system.store.queryLog<{ kind: string; action?: string; subject_id?: string }>(
      logs.audit,
      {
        where: { kind: "policy_change" },
        limit: 1000,
      },
    );
    assert.ok(page.entries.some((e) => e.value.action === "promote_shadow" && e.value.subject_id === AGENT));
    // Nothing left to promote.
    const again = await adminCall(
      "POST",
      `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${CAPABILITY}/shadow/promote`,
    );
    assert.equal(again.status, 404, again.text);
    // Restore the enforced policy the other tests expect.
    const restore = await adminCall(
      "PUT",
      `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${CAPABILITY}`,
      {
        allowed_permission_ids: [...ALLOWED],
        ttl_seconds: 3600,
      },
    );
    assert.equal(restore.status, 200, restore.text);
  });

  test("the log-only mode: only a platform admin sets it; it allows the allow list's denials, loudly", async () => {
    const path = `/admin/log-only/${PARTNER}/${CAPABILITY}`;
    const ownPartnerAdmin = await partnerAdmin(PARTNER);
    const otherPartnerAdmin = await partnerAdmin(OTHER_PARTNER);
    for (const token of [ownPartnerAdmin, otherPartnerAdmin, agent]) {
      const refused = await adminCall("PUT", path, { reason: "onboarding" }, token);
      assert.equal(refused.status, 403, refused.text);
      assert.equal((await adminCall("DELETE", path, undefined, token)).status, 403);
    }
    assert.equal(
      (
        await adminCall(
          "PUT",
          `/admin/log-only/${OTHER_PARTNER}/${CAPABILITY}`,
          { reason: "x" },
          ownPartnerAdmin,
        )
      ).status,
      403,
    );
    assert.equal((await adminCall("GET", "/admin/log-only")).json.items.length, 0);
    // Loud while it is on, even with no traffic: a gauge of the capabilities in the mode.
    const inMode = async () => metric(`${system.url}/metrics`, "authority_log_only_capabilities ");
    assert.deepEqual(await inMode(), ["authority_log_only_capabilities 0"]);
    const list = { capability_id: CAPABILITY, method: "GET", path: "/items" };
    assert.equal((await system.authorize(list, agent)).status, 403);

    const set = await adminCall("PUT", path, { reason: "onboarding" });
    assert.equal(set.status, 200, set.text);
    assert.deepEqual(await inMode(), ["authority_log_only_capabilities 1"]);
    const allowed = await system.authorize(list, agent);
    assert.equal(allowed.status, 200, allowed.text);
    // Revocation, unknown operations and other subjects are not relaxed.
    const unknown = await system.authorize({ ...list, path: "/nowhere" }, agent);
    assert.equal(unknown.status, 403);
    await system.recorder.flush();
    const row = (await decisions()).find((r) => r.requestId === allowed.json.requestId);
    assert.deepEqual(row?.log_only, { reason: "operation_not_allowed" });
    const counted = await metric(`${system.url}/metrics`, "authority_log_only_allows_total");
    assert.ok(
      counted.some((line) => line.includes('reason="operation_not_allowed"')),
      counted.join("\n"),
    );
    // Loud in the logs too: the switch, and each allow it made, at warn (40) with the request's id.
    const warnings = system.logs
      .lines()
      .map((line) => JSON.parse(line) as { level: number; msg: string; requestId?: string; actor?: string })
      .filter((line) => line.level === 40 && /LOG-ONLY MODE/.test(line.msg));
    assert.ok(
      warnings.some((line) => /ENABLED/.test(line.msg) && line.actor !== undefined),
      "the switch is logged at warn, with who turned it on",
    );
    assert.ok(
      warnings.some((line) => line.requestId === allowed.json.requestId),
      "each log-only allow is logged at warn",
    );
    const changes = await system.store.queryLog<{ kind: string; action: string }>(logs.audit, {
      where: { kind: "log_only_change" },
      limit: 10,
    });
    assert.deepEqual(
      changes.entries.map((e) => e.value.action),
      ["enable"],
    );

    // ext_authz and the proxy apply it too, once the sidecar has read the capability again.
    const checked = await waitFor(async () => {
      const answer = await system.check({
        method: "GET",
        path: "/items",
        capability: CAPABILITY,
        token: agent,
      });
      return answer.allowed ? answer : undefined;
    });
    assert.equal(checked.allowed, true);
    assert.equal((await system.proxy("/items", agent)).status, 200);
    const sidecar = system.sidecar;
    assert.ok(sidecar);
    const sidecarCounted = await metric(
      `http://127.0.0.1:${sidecar.metricsPort}/metrics`,
      "authority_sidecar_log_only_allows_total",
    );
    for (const transport of ["grpc", "proxy"])
      assert.ok(
        sidecarCounted.some((line) => line.includes(`transport="${transport}"`)),
        `sidecar ${transport}: ${sidecarCounted.join("\n")}`,
      );

    const cleared = await adminCall("DELETE", path);
    assert.equal(cleared.json.disabled, true);
    assert.deepEqual(await inMode(), ["authority_log_only_capabilities 0"]);
    assert.equal((await system.authorize(list, agent)).status, 403);
    await waitFor(async () => {
      const answer = await system.check({
        method: "GET",
        path: "/items",
        capability: CAPABILITY,
        token: agent,
      });
      return answer.allowed ? undefined : answer;
    });
  });
});

async function waitFor<T>(probe: () => Promise<T | undefined>, attempts = 100): Promise<T> {
  for (let i = 0; i < attempts; i++) {
    const found = await probe();
    if (found !== undefined) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("condition not met");
}
