import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  CapabilityError,
  catalogMatcher,
  catalogPermissionIds,
  validateCapability,
} from "../../src/core/capability.ts";
import { capability, snapshot } from "./fixtures.ts";

describe("capabilities", () => {
  it("lists the permission id of every catalog operation", () => {
    assert.deepEqual(catalogPermissionIds(capability()), [
      "billing-api:get:/users/{id}",
      "billing-api:get:/users/me",
      "billing-api:delete:/users/{id}",
      "billing-api:post:/invoices",
      "billing-api:get:/invoices/{invoiceId}/lines/{lineId}",
    ]);
  });

  it("validates catalogs", () => {
    const valid = capability();
    assert.equal(validateCapability(valid), valid);
    const refuse = (value: unknown) =>
      assert.throws(
        () => validateCapability(value),
        (e: unknown) => e instanceof CapabilityError && e.code === "capability_invalid",
      );
    refuse({ ...valid, capability_id: "a:b" });
    refuse({ ...valid, extra: 1 });
    refuse(capability([snapshot("GET", "/users/{id}"), snapshot("GET", "/users/{name}")]));
    refuse(capability([snapshot("GET", "/users/{id}"), snapshot("GET", "/users/{id}")]));
    refuse(capability([snapshot("GET", "/users/{id")]));
  });

  it("caches one matcher per capability object", () => {
    const cap = capability();
    assert.equal(catalogMatcher(cap), catalogMatcher(cap));
    assert.equal(catalogMatcher(cap).match("GET", "/users/me")?.index, 1);
    assert.equal(catalogMatcher(cap).match("DELETE", "/users/me")?.index, 2);
  });
});
