import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { egressAllowSetting } from "../../../../src/config/settings.ts";
import { createEgressPolicy, type Resolver } from "../../../../src/execute/egress.ts";
import { collections } from "../../../../src/store/model.ts";
import { cast, type Harness, smallApi, startHarness } from "./harness.ts";

/** A resolver seam: these names, and nothing else, resolve (no DNS in the test). */
const names: Record<string, string[]> = {
  "internal-orders.test": ["127.0.0.1"],
  "cluster-db.test": ["10.96.0.12"],
  "half-internal.test": ["93.184.216.34", "169.254.169.254"],
  "orders.public.test": ["93.184.216.34"],
};
const resolve: Resolver = async (hostname) => {
  const found = names[hostname.toLowerCase()];
  if (found === undefined) throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
  return found.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
};

const withServer = (url: string): Record<string, unknown> => ({ ...smallApi(), servers: [{ url }] });

describe("admin API: the egress policy at import", () => {
  // As `authority serve --egress-allow 127.0.0.1:18080` builds it (its own port added once bound).
  const egress = createEgressPolicy({
    allow: egressAllowSetting.parse("127.0.0.1:18080", "egress-allow"),
    resolve,
  });
  let h: Harness;
  let t: Awaited<ReturnType<typeof cast>>;
  let capabilityCount = 0;

  before(async () => {
    h = await startHarness({ egress });
    egress.addPlatformEndpoints({ host: "127.0.0.1", port: Number(new URL(h.url).port) });
    t = await cast(h);
    const created = await h.call("POST", "/partners", {
      token: t.admin,
      body: { partner_id: "acme", name: "Acme" },
    });
    assert.equal(created.status, 201);
    capabilityCount = await h.store.count(collections.capabilities);
  });
  after(async () => {
    await h.close();
    await egress.close();
  });

  const importWith = (document: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: t.acmeAdmin,
      body: { capability_id: "orders", name: "Orders", document, auth_profile_ref: "orders-key", ...extra },
    });

  const refusedWith = (reply: Awaited<ReturnType<typeof importWith>>, rule: string): string => {
    assert.equal(reply.status, 400, reply.text);
    assert.equal(reply.body.error, "invalid_request");
    assert.equal(reply.body.details.reason, "egress_denied");
    const message: string = reply.body.details.problems.map((p: { message: string }) => p.message).join("; ");
    assert.ok(message.includes(rule), message);
    return message;
  };

  it("refuses a server at the authority service's own port", async () => {
    refusedWith(await importWith(withServer(h.url)), "a service of the platform itself");
    assert.equal(await h.store.count(collections.capabilities), capabilityCount);
  });

  it("refuses loopback, link-local, metadata, unspecified and private servers, in every spelling", async () => {
    const cases: Array<[string, string]> = [
      ["http://127.0.0.1:9/v1", "a loopback address"],
      ["http://[::1]:8080", "a loopback address"],
      ["http://[::ffff:127.0.0.1]:8080", "a loopback address"],
      ["http://0x7f.1:8080", "a loopback address"],
      ["http://2130706433/", "a loopback address"],
      ["http://169.254.169.254/latest", "a cloud metadata address"],
      ["http://[fd00:ec2::254]/", "a cloud metadata address"],
      ["http://metadata.google.internal/computeMetadata/v1", "a cloud metadata address"],
      ["http://169.254.7.7/", "a link-local address"],
      ["http://[fe80::1]/", "a link-local address"],
      ["http://0.0.0.0:8080/", "the unspecified address"],
      ["http://10.0.0.5/", "a private-network address"],
      ["http://[fd12::5]/", "a unique-local IPv6 address"],
    ];
    for (const [url, rule] of cases) {
      refusedWith(await importWith(withServer(url)), rule);
    }
    assert.equal(await h.store.count(collections.capabilities), capabilityCount);
  });

  it("refuses a name that resolves to a refused address, without naming the address", async () => {
    const loop = refusedWith(
      await importWith(withServer("http://internal-orders.test:8080/v1")),
      "its host name resolves to a loopback address",
    );
    assert.ok(!loop.includes("127.0.0.1"), loop);
    const cluster = refusedWith(
      await importWith(withServer("https://cluster-db.test/")),
      "its host name resolves to a private-network address",
    );
    assert.ok(!cluster.includes("10.96.0.12"), cluster);
    // One internal answer among public ones is enough to refuse.
    refusedWith(await importWith(withServer("https://half-internal.test/")), "a cloud metadata address");
  });

  it("checks the upstream_base_url override and the preview the same way", async () => {
    refusedWith(
      await importWith(smallApi(), { upstream_base_url: "http://127.0.0.1:6379" }),
      "a loopback address",
    );
    const preview = await h.call("POST", "/admin/apis/preview-openapi", {
      token: t.acmeAdmin,
      body: { document: withServer("http://169.254.169.254/") },
    });
    refusedWith(preview, "a cloud metadata address");
  });

  it("allows public servers, the configured address:port, and names that do not resolve yet (with a warning)", async () => {
    const allowed = await importWith(withServer("http://127.0.0.1:18080/v1"));
    assert.equal(allowed.status, 201, allowed.text);
    const publicName = await importWith(withServer("https://orders.public.test/v1"));
    assert.equal(publicName.status, 201, publicName.text);
    const unresolved = await importWith(withServer("https://not-yet.test/v1"));
    assert.equal(unresolved.status, 201, unresolved.text);
    assert.ok(
      unresolved.body.warnings.some((w: string) => w.includes("does not resolve")),
      JSON.stringify(unresolved.body.warnings),
    );
    // Another port of the allowed address is still loopback.
    refusedWith(await importWith(withServer("http://127.0.0.1:18081/v1")), "a loopback address");
  });

  it("names the setting that would open a refused class, and none for a class nothing opens", async () => {
    for (const url of ["http://127.0.0.1:19090/", "http://10.96.0.15:8080/"]) {
      const reply = await importWith(withServer(url));
      const message = refusedWith(reply, "address");
      assert.equal(reply.body.details.setting, "egress-allow");
      assert.ok(message.includes("egress-allow setting (AUTHORITY_EGRESS_ALLOW"), message);
    }
    for (const url of ["http://169.254.169.254/", "http://0.0.0.0:8080/", h.url]) {
      const reply = await importWith(withServer(url));
      const message = refusedWith(reply, "");
      assert.equal(reply.body.details.setting, undefined, url);
      assert.ok(!message.includes("egress-allow"), message);
    }
  });

  it("a partner admin cannot widen the policy: no import option or admin setting carries it", async () => {
    const before = JSON.stringify(egress.allow);
    for (const extra of [
      { egress_allow: "127.0.0.0/8" },
      { "egress-allow": ["127.0.0.0/8"] },
      { egressAllow: ["127.0.0.0/8"] },
      { allow_internal: true },
    ]) {
      const reply = await importWith(withServer("http://127.0.0.1:9/"), extra);
      assert.equal(reply.status, 400, reply.text);
      assert.equal(reply.body.error, "invalid_request");
    }
    // Nor the document itself (extensions are the partner's too), nor an auth profile.
    refusedWith(
      await importWith({
        ...withServer("http://127.0.0.1:9/"),
        "x-authority-egress-allow": ["127.0.0.0/8"],
        "x-egress-allow": "127.0.0.0/8",
      }),
      "a loopback address",
    );
    await h.call("PUT", "/partners/acme/auth-profiles/wide", {
      token: t.acmeAdmin,
      body: { type: "static", kind: "bearer", secret: "s3cret-value", egress_allow: "127.0.0.0/8" },
    });
    refusedWith(await importWith(withServer("http://127.0.0.1:9/")), "a loopback address");
    assert.equal(JSON.stringify(egress.allow), before);
    assert.ok(Object.isFrozen(egress.allow));
    // Refused for the platform admin too: the allow list is configuration, not an API.
    const asAdmin = await h.call("POST", "/partners/acme/api-specs/import-openapi", {
      token: t.admin,
      body: {
        capability_id: "orders",
        name: "Orders",
        document: withServer("http://127.0.0.1:9/"),
        auth_profile_ref: "orders-key",
      },
    });
    refusedWith(asAdmin, "a loopback address");
  });
});
