import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { checkBoundary } from "../../src/admin/boundary-check.ts";
import type { BoundaryRecord } from "../../src/store/model.ts";

const boundary: BoundaryRecord = {
  partner_id: "acme",
  boundary_id: "b",
  name: "B",
  allowed_capabilities: ["orders"],
  allowed_permission_patterns: ["orders:get:*"],
  max_policy_ttl_seconds: 600,
  updated_at: "2026-01-01T00:00:00.000Z",
};

describe("checkBoundary", () => {
  it("accepts an assignment inside the boundary", () => {
    assert.equal(
      checkBoundary(boundary, {
        capabilityId: "orders",
        permissionIds: ["orders:get:/orders"],
        ttlSeconds: 600,
      }),
      undefined,
    );
  });

  it("lists the capability and every permission id outside", () => {
    assert.deepEqual(
      checkBoundary(boundary, {
        capabilityId: "billing",
        permissionIds: ["billing:get:/x", "billing:post:/x"],
        ttlSeconds: 60,
      }),
      {
        reason: "boundary_violation",
        boundary_id: "b",
        outside: ["billing", "billing:get:/x", "billing:post:/x"],
      },
    );
  });

  it("reports a lifetime above the boundary's maximum", () => {
    assert.deepEqual(
      checkBoundary(boundary, {
        capabilityId: "orders",
        permissionIds: ["orders:get:/orders"],
        ttlSeconds: 600.5,
      }),
      {
        reason: "boundary_violation",
        boundary_id: "b",
        outside: [],
        max_policy_ttl_seconds: 600,
        requested_ttl_seconds: 601,
      },
    );
  });

  it("has no lifetime limit when the maximum is null", () => {
    const open = { ...boundary, max_policy_ttl_seconds: null };
    assert.equal(
      checkBoundary(open, { capabilityId: "orders", permissionIds: [], ttlSeconds: 10 ** 9 }),
      undefined,
    );
  });
});
