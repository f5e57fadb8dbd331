/**
 * Attack: subject ids were global and first come, so partner B could pre-create a subject
 * under the `sub` partner A's identity provider issues to A's user. B gained nothing (0701),
 * but A could no longer create its own subject of that id: A's user was locked out. Subject
 * ids are now unique per partner: A gets its subject (in its namespace, `acme~<sub>`), A's
 * user reaches A's policy and nothing of B's, and B's principals reach only B's.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { type Harness, startHarness } from "./harness.ts";

describe("subject ids are unique per partner: a pre-claimed sub takes nothing from its partner", () => {
  let h: Harness;
  let platformAdmin: string;
  const admins: Record<string, string> = {};
  const GET_CUSTOMERS = { capability_id: "customers", method: "GET", path: "/customers" };
  const GET_ONE = { capability_id: "customers", method: "GET", path: "/customers/cus_00000001" };

  async function call(method: string, path: string, token: string, body?: unknown) {
    const response = await fetch(`${h.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return {
      status: response.status,
      body: (text === "" ? {} : JSON.parse(text)) as Record<string, unknown>,
    };
  }

  async function createUser(partner: string, subjectId: string) {
    return call("POST", `/partners/${partner}/users`, admins[partner] ?? "", {
      subject_id: subjectId,
      subject_type: "user",
      display_name: subjectId,
    });
  }

  async function assign(partner: string, subjectId: string, permission: string) {
    return call(
      "PUT",
      `/partners/${partner}/caab/subjects/${subjectId}/policies/customers`,
      admins[partner] ?? "",
      {
        allowed_permission_ids: [permission],
        ttl_seconds: 3600,
      },
    );
  }

  before(async () => {
    // The sample catalog's operations carry signed constraints: both partners are in their rollout.
    h = await startHarness({
      settings: { "parameter-scoping": "true", "parameter-scoping-partners": "acme,globex" },
    });
    platformAdmin = await h.token("root-admin", { roles: ["admin"] });
    const document = await readFile(
      new URL("../../../../examples/openapi/customers.yaml", import.meta.url),
      "utf8",
    );
    for (const partner of ["acme", "globex"]) {
      const created = await call("POST", "/partners", platformAdmin, { partner_id: partner, name: partner });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      admins[partner] = await h.token(`${partner}-ops`, { roles: ["partner_admin"], partnerId: partner });
      const profile = await call(
        "PUT",
        `/partners/${partner}/caab/auth-profiles/customers-key`,
        admins[partner] ?? "",
        {
          type: "static",
          kind: "api_key",
          in: "header",
          name: "x-api-key",
          secret: `upstream-key-${partner}-0123456789`,
        },
      );
      assert.equal(profile.status, 201, JSON.stringify(profile.body));
      const imported = await call(
        "POST",
        `/partners/${partner}/api-specs/import-openapi`,
        admins[partner] ?? "",
        {
          capability_id: "customers",
          name: "Customer records",
          document,
          format: "yaml",
          upstream_base_url: "https://customers.example.com",
          auth_profile_ref: "customers-key",
        },
      );
      assert.equal(imported.status, 201, JSON.stringify(imported.body));
    }
  });
  after(async () => {
    await h.close();
  });

  it("partner B pre-creates the sub A's IdP will issue; A's user is unaffected and B gains nothing", async () => {
    // B squats "alice" and gives it a policy of its own.
    const squat = await createUser("globex", "alice");
    assert.equal(squat.status, 201, JSON.stringify(squat.body));
    assert.equal(squat.body.subject_id, "alice");
    assert.equal((await assign("globex", "alice", "customers:get:/customers")).status, 200);

    // A creates the subject its user "alice" stands for: not refused, in A's namespace.
    const own = await createUser("acme", "alice");
    assert.equal(own.status, 201, JSON.stringify(own.body));
    assert.equal(own.body.subject_id, "acme~alice");
    assert.equal(own.body.partner_id, "acme");
    // A's admin names it as it asked for it.
    const assigned = await assign("acme", "alice", "customers:get:/customers/{customerId}");
    assert.equal(assigned.status, 200, JSON.stringify(assigned.body));
    assert.equal(
      (await call("GET", "/partners/acme/users/alice", admins.acme ?? "")).body.subject_id,
      "acme~alice",
    );

    // A's user: exactly A's policy.
    const acmeAlice = await h.token("alice", { partnerId: "acme" });
    const allowed = await h.authorize(GET_ONE, acmeAlice);
    assert.deepEqual([allowed.status, allowed.body.status], [200, "allowed"], JSON.stringify(allowed.body));
    const notGranted = await h.authorize(GET_CUSTOMERS, acmeAlice);
    assert.deepEqual([notGranted.body.status, notGranted.body.reason], ["denied", "operation_not_allowed"]);

    // B's user: exactly B's policy, nothing of A's.
    const globexAlice = await h.token("alice", { partnerId: "globex" });
    assert.equal((await h.authorize(GET_CUSTOMERS, globexAlice)).body.status, "allowed");
    assert.equal((await h.authorize(GET_ONE, globexAlice)).body.reason, "operation_not_allowed");

    // A token without a partner claim, or of a third partner, is neither subject.
    for (const token of [await h.token("alice"), await h.token("alice", { partnerId: "initech" })]) {
      for (const body of [GET_ONE, GET_CUSTOMERS]) {
        assert.equal((await h.authorize(body, token)).body.reason, "missing_policy");
      }
    }
    // B's admin cannot see or change A's subject, by either name.
    for (const name of ["acme~alice"]) {
      assert.equal((await call("GET", `/partners/globex/users/${name}`, admins.globex ?? "")).status, 404);
      assert.equal((await assign("globex", name, "customers:get:/customers")).status, 404);
    }
    assert.equal((await call("GET", "/partners/acme/users/alice", admins.globex ?? "")).status, 403);
  });

  it("one partner still has one subject per id, whichever namespace it landed in", async () => {
    for (const partner of ["acme", "globex"]) {
      const again = await createUser(partner, "alice");
      assert.deepEqual([again.status, again.body.error], [409, "conflict"], partner);
    }
  });

  it("a subject the platform vouched for keeps the global id; a partner's namespaced one cannot be vouched into it", async () => {
    const vouch = await call("PATCH", "/partners/acme/users/alice", platformAdmin, {
      identity: "platform_vouched",
    });
    assert.deepEqual([vouch.status, vouch.body.error], [409, "conflict"]);
    const taken = await call("POST", "/partners/acme/users", platformAdmin, {
      subject_id: "alice",
      subject_type: "agent",
      display_name: "alice",
      identity: "platform_vouched",
    });
    assert.equal(taken.status, 409);
  });
});
