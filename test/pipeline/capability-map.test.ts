import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createCapabilityMap, parseCapabilityMap } from "../../src/pipeline/capability-map.ts";

describe("capability map (AUTHORITY_SIDECAR_CAPABILITY_MAP)", () => {
  const map = parseCapabilityMap(
    JSON.stringify({
      "orders.internal": "orders",
      "api.example.com/v2": "api-v2",
      "api.example.com": "api",
      "/billing": "billing",
      "/billing/admin": "billing-admin",
      "legacy.internal:8443": "legacy",
    }),
  );

  test("host keys match the host on any port, case-insensitively", () => {
    assert.equal(map.resolve("orders.internal", "/orders/1"), "orders");
    assert.equal(map.resolve("ORDERS.internal:8080", "/"), "orders");
  });

  test("a key with a port matches only that port", () => {
    assert.equal(map.resolve("legacy.internal:8443", "/x"), "legacy");
    assert.equal(map.resolve("legacy.internal:80", "/x"), undefined);
  });

  test("the longest prefix wins; prefixes match whole segments; the query is ignored", () => {
    assert.equal(map.resolve("api.example.com", "/v2/items?x=/v2"), "api-v2");
    assert.equal(map.resolve("api.example.com", "/v2"), "api-v2");
    assert.equal(map.resolve("api.example.com", "/v20/items"), "api");
    assert.equal(map.resolve("any.host", "/billing/admin/x"), "billing-admin");
    assert.equal(map.resolve("any.host", "/billing"), "billing");
    assert.equal(map.resolve("any.host", "/billingx"), undefined);
  });

  test("a path prefix beats a host-only key; a host-bound key beats an equal hostless one", () => {
    assert.equal(map.resolve("orders.internal", "/billing/1"), "billing");
    const tie = createCapabilityMap({ "/a": "hostless", "h.example/a": "bound" });
    assert.equal(tie.resolve("h.example", "/a/b"), "bound");
    assert.equal(tie.resolve("other.example", "/a/b"), "hostless");
  });

  test("empty or absent configuration maps nothing", () => {
    assert.equal(parseCapabilityMap(undefined).resolve("h", "/"), undefined);
    assert.equal(parseCapabilityMap("  ").size, 0);
  });

  test("bad configuration is refused at start", () => {
    for (const text of [
      "[]",
      "nope",
      '{"h":"bad id with spaces"}',
      '{"h":3}',
      '{"bad host!/x":"c"}',
      '{"/a//b":"c"}',
      '{"":"c"}',
    ]) {
      assert.throws(() => parseCapabilityMap(text), { code: "config_invalid" }, text);
    }
  });
});
