import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { type Harness, startHarness } from "./harness.ts";

/**
 * Subject squatting (docs/decisions/0701-subject-ownership.md): a partner admin names a
 * subject after a principal outside its partner — the platform admin, another partner's
 * agent, an agent that does not exist yet — and gives it a policy. None of those principals
 * may then act as that subject; the partner's own principals and subjects the platform
 * vouched for keep working.
 */
describe("subjects cannot be squatted", () => {
  let h: Harness;
  let platformAdmin: string;
  let acmeAdmin: string;
  const GET_CUSTOMERS = { capability_id: "customers", method: "GET", path: "/customers" };

  async function call(method: string, path: string, token: string, body?: unknown) {
    const response = await fetch(`${h.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  }

  async function subjectWithPolicy(
    partner: string,
    token: string,
    subjectId: string,
    extra: Record<string, unknown> = {},
  ) {
    const created = await call("POST", `/partners/${partner}/users`, token, {
      subject_id: subjectId,
      subject_type: "agent",
      display_name: subjectId,
      ...extra,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const assigned = await call(
      "PUT",
      `/partners/${partner}/caab/subjects/${subjectId}/policies/customers`,
      token,
      { allowed_permission_ids: ["customers:get:/customers"], ttl_seconds: 3600 },
    );
    assert.equal(assigned.status, 200, JSON.stringify(assigned.body));
    return created.body;
  }

  before(async () => {
    // The sample catalog's operations carry signed constraints: acme is in their rollout.
    h = await startHarness({
      settings: { "parameter-scoping": "true", "parameter-scoping-partners": "acme" },
    });
    platformAdmin = await h.token("root-admin", { roles: ["admin"] });
    acmeAdmin = await h.token("acme-ops", { roles: ["partner_admin"], partnerId: "acme" });
    for (const partner of ["acme", "globex"]) {
      const created = await call("POST", "/partners", platformAdmin, { partner_id: partner, name: partner });
      assert.equal(created.status, 201, JSON.stringify(created.body));
    }
    const document = await readFile(
      new URL("../../../../examples/openapi/customers.yaml", import.meta.url),
      "utf8",
    );
    const profile = await call("PUT", "/partners/acme/caab/auth-profiles/customers-key", acmeAdmin, {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: "upstream-key-0123456789",
    });
    assert.equal(profile.status, 201, JSON.stringify(profile.body));
    const imported = await call("POST", "/partners/acme/api-specs/import-openapi", acmeAdmin, {
      capability_id: "customers",
      name: "Customer records",
      document,
      format: "yaml",
      upstream_base_url: "https://customers.example.com",
      auth_profile_ref: "customers-key",
    });
    assert.equal(imported.status, 201, JSON.stringify(imported.body));
  });
  after(async () => {
    await h.close();
  });

  it("a partner admin's subject named after the platform admin gives the platform admin nothing", async () => {
    const created = await subjectWithPolicy("acme", acmeAdmin, "root-admin");
    assert.equal(created.identity, "partner_token");
    const reply = await h.authorize(GET_CUSTOMERS, platformAdmin);
    assert.deepEqual([reply.status, reply.body.status, reply.body.reason], [403, "denied", "missing_policy"]);
  });

  it("another partner's agent (now or created later) never resolves to the squatting subject", async () => {
    await subjectWithPolicy("acme", acmeAdmin, "globex-agent");
    await subjectWithPolicy("acme", acmeAdmin, "future-agent");
    const globexAgent = await h.token("globex-agent", { partnerId: "globex" });
    const future = await h.token("future-agent", { partnerId: "globex" });
    // An agent whose issuer puts no partner claim in its tokens is not acme's either.
    const unclaimed = await h.token("future-agent");
    for (const token of [globexAgent, future, unclaimed]) {
      const reply = await h.authorize(GET_CUSTOMERS, token);
      assert.deepEqual([reply.status, reply.body.reason], [403, "missing_policy"]);
    }
    // Naming the subject explicitly changes nothing.
    const named = await h.authorize(
      { ...GET_CUSTOMERS, subject: { subject_id: "globex-agent" } },
      globexAgent,
    );
    assert.equal(named.body.status, "denied");
  });

  it("refuses what would let a partner admin reach beyond its partner", async () => {
    const vouch = await call("POST", "/partners/acme/users", acmeAdmin, {
      subject_id: "wants-vouching",
      subject_type: "agent",
      display_name: "x",
      identity: "platform_vouched",
    });
    assert.deepEqual([vouch.status, vouch.body.error], [403, "insufficient_role"]);
    const patch = await call("PATCH", "/partners/acme/users/root-admin", acmeAdmin, {
      identity: "platform_vouched",
    });
    assert.deepEqual([patch.status, patch.body.error], [403, "insufficient_role"]);
    // Ids derived for binding users are reserved to their mappings.
    const derived = await call("POST", "/partners/acme/users", acmeAdmin, {
      subject_id: "ext_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      subject_type: "agent",
      display_name: "x",
    });
    assert.deepEqual([derived.status, derived.body.error], [400, "invalid_request"]);
    const other = await call("POST", "/partners/globex/users", acmeAdmin, {
      subject_id: "x",
      subject_type: "agent",
      display_name: "x",
    });
    assert.equal(other.status, 403);
  });

  it("leaves the partner's own principals and platform-vouched subjects working", async () => {
    await subjectWithPolicy("acme", acmeAdmin, "acme-agent");
    const own = await h.authorize(GET_CUSTOMERS, await h.token("acme-agent", { partnerId: "acme" }));
    assert.deepEqual([own.status, own.body.status], [200, "allowed"], JSON.stringify(own.body));
    // The same sub from another partner (or without a claim) is not acme's agent.
    for (const token of [await h.token("acme-agent", { partnerId: "globex" }), await h.token("acme-agent")]) {
      assert.equal((await h.authorize(GET_CUSTOMERS, token)).body.reason, "missing_policy");
    }

    const vouched = await subjectWithPolicy("acme", platformAdmin, "platform-agent");
    assert.equal(vouched.identity, "platform_vouched");
    const bare = await h.authorize(GET_CUSTOMERS, await h.token("platform-agent"));
    assert.deepEqual([bare.status, bare.body.status], [200, "allowed"]);
    const claimed = await h.authorize(GET_CUSTOMERS, await h.token("platform-agent", { partnerId: "acme" }));
    assert.equal(claimed.body.status, "allowed");
    const foreign = await h.authorize(
      GET_CUSTOMERS,
      await h.token("platform-agent", { partnerId: "globex" }),
    );
    assert.equal(foreign.body.reason, "missing_policy");
  });

  it("lets the platform admin vouch for a partner's subject, and a partner admin narrow it again", async () => {
    await subjectWithPolicy("acme", acmeAdmin, "vouch-me");
    const token = await h.token("vouch-me");
    assert.equal((await h.authorize(GET_CUSTOMERS, token)).body.reason, "missing_policy");
    const vouched = await call("PATCH", "/partners/acme/users/vouch-me", platformAdmin, {
      identity: "platform_vouched",
    });
    assert.deepEqual([vouched.status, vouched.body.identity], [200, "platform_vouched"]);
    // Subject records are cached for record-cache-ms (1 s by default) on each replica.
    assert.equal(await settlesTo(token, "allowed"), true);
    const narrowed = await call("PATCH", "/partners/acme/users/vouch-me", acmeAdmin, {
      identity: "partner_token",
    });
    assert.deepEqual([narrowed.status, narrowed.body.identity], [200, "partner_token"]);
    assert.equal(await settlesTo(token, "denied"), true);
    assert.equal((await h.authorize(GET_CUSTOMERS, token)).body.reason, "missing_policy");
    // Both changes are in the admin audit, with who made them.
    assert.equal(await h.service.recorder.flush(5000), true);
    const changes = await h.get("/admin/audit?kind=policy_change&subject=vouch-me", platformAdmin);
    const identityChanges = (changes.body.items as { action: string; actor: string }[]).filter(
      (item) => item.action === "identity",
    );
    assert.deepEqual(
      identityChanges.map((item) => item.actor),
      ["root-admin", "acme-ops"],
    );
  });

  /** True once the token's answer is `status`, within the record cache's lifetime and some slack. */
  async function settlesTo(token: string, status: string): Promise<boolean> {
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline) {
      if ((await h.authorize(GET_CUSTOMERS, token)).body.status === status) return true;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return false;
  }
});
