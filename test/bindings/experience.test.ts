import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { experienceDenial, experiencePermits } from "../../src/bindings/experience.ts";
import type { ExperienceRecord } from "../../src/store/binding-model.ts";

const capabilityIds = ["customers", "orders", "billing"] as const;
const permissionIds = [
  "customers:get:/customers",
  "customers:get:/customers/{customerId}",
  "customers:delete:/customers/{customerId}",
  "orders:get:/orders",
  "orders:post:/orders",
  "billing:get:/invoices",
] as const;
const capabilityOf = (permissionId: string) => permissionId.slice(0, permissionId.indexOf(":"));

const experienceArb: fc.Arbitrary<ExperienceRecord> = fc
  .record({
    enabled: fc.boolean(),
    capabilities: fc.uniqueArray(fc.constantFrom(...capabilityIds)).chain((ids) =>
      fc.tuple(
        ...ids.map((capability_id) =>
          fc.record({
            capability_id: fc.constant(capability_id),
            tools: fc.option(
              fc
                .subarray(permissionIds.filter((id) => capabilityOf(id) === capability_id))
                .map((ids) =>
                  ids.map((permission_id) => ({ permission_id, display_name: null, description: null })),
                ),
              { nil: null },
            ),
          }),
        ),
      ),
    ),
  })
  .map(({ enabled, capabilities }) => ({
    binding_id: "b",
    partner_id: "p",
    enabled,
    display_name: null,
    capabilities,
    consent: null,
    revision: 1,
    created_at: "",
    updated_at: "",
  }));

describe("binding experience filter", () => {
  it("admits a permission only when enabled and listed (capability, and tool when there is a list)", () => {
    fc.assert(
      fc.property(experienceArb, fc.constantFrom(...permissionIds), (experience, permissionId) => {
        const entry = experience.capabilities.find((c) => c.capability_id === capabilityOf(permissionId));
        const expected =
          experience.enabled &&
          entry !== undefined &&
          (entry.tools === null || entry.tools.some((tool) => tool.permission_id === permissionId));
        assert.equal(experiencePermits(experience)(permissionId), expected);
        // The check before decryption never admits what the permission filter refuses by capability.
        if (experienceDenial(experience, capabilityOf(permissionId)) === undefined) {
          assert.ok(experience.enabled && entry !== undefined);
        } else
          assert.equal(experienceDenial(experience, capabilityOf(permissionId)), "operation_not_allowed");
      }),
    );
  });

  it("refuses anything that is not a permission id, and a disabled experience refuses everything", () => {
    fc.assert(
      fc.property(experienceArb, fc.string(), (experience, junk) => {
        fc.pre(!(permissionIds as readonly string[]).includes(junk));
        const permits = experiencePermits(experience);
        // A string that parses to a listed capability's id may be admitted only with tools: null.
        if (permits(junk)) {
          const entry = experience.capabilities.find((c) => c.capability_id === capabilityOf(junk));
          assert.ok(experience.enabled && entry?.tools === null);
        }
        const disabled = { ...experience, enabled: false };
        assert.equal(experiencePermits(disabled)(junk), false);
        for (const id of permissionIds) assert.equal(experiencePermits(disabled)(id), false);
      }),
    );
  });

  it("no experience denies nothing before decryption", () => {
    assert.equal(experienceDenial(undefined, "customers"), undefined);
  });
});
