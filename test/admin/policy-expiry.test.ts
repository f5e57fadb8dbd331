import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { policyExpiry } from "../../src/admin/policy-writer.ts";
import type { AssignmentRecord } from "../../src/store/model.ts";

const assignment = (capability_id: string, expires_at: string): AssignmentRecord => ({
  partner_id: "p",
  subject_id: "s",
  capability_id,
  catalog_version: "1",
  allowed_permission_ids: [],
  auth_profile_ref: "k",
  operations: [],
  response_redactions: {},
  expires_at,
  assigned_by: "a",
  assigned_at: "2026-01-01T00:00:00.000Z",
});

describe("policyExpiry", () => {
  it("is the earliest assignment expiry", () => {
    const now = new Date("2026-01-01T00:00:00.000Z");
    assert.equal(
      policyExpiry(
        [assignment("a", "2026-03-01T00:00:00.000Z"), assignment("b", "2026-02-01T00:00:00.000Z")],
        now,
      ),
      "2026-02-01T00:00:00.000Z",
    );
  });

  it("is now without assignments", () => {
    const now = new Date("2026-01-01T00:00:00.000Z");
    assert.equal(policyExpiry([], now), now.toISOString());
  });
});
