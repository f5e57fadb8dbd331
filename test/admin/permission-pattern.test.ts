import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { isValidPermissionPattern, permissionPatternMatches } from "../../src/admin/permission-pattern.ts";

describe("permissionPatternMatches", () => {
  it("matches literally without stars", () => {
    assert.equal(permissionPatternMatches("orders:get:/orders", "orders:get:/orders"), true);
    assert.equal(permissionPatternMatches("orders:get:/orders", "orders:get:/orders/1"), false);
    assert.equal(permissionPatternMatches("orders:get:/orders", "orders:get:/order"), false);
  });

  it("lets * match any run, including ':' '/' and nothing", () => {
    assert.equal(permissionPatternMatches("orders:get:*", "orders:get:/orders/{id}"), true);
    assert.equal(permissionPatternMatches("orders:*:/orders/{id}", "orders:delete:/orders/{id}"), true);
    assert.equal(permissionPatternMatches("orders:*:/orders/{id}", "orders:delete:/orders/{id}/x"), false);
    assert.equal(permissionPatternMatches("*", ""), true);
    assert.equal(permissionPatternMatches("a*b*c", "abc"), true);
    assert.equal(permissionPatternMatches("a*b*c", "a-b-"), false);
    assert.equal(permissionPatternMatches("orders:get:*", "billing:get:/orders"), false);
  });

  it("treats regular-expression characters literally", () => {
    assert.equal(permissionPatternMatches("a.c", "abc"), false);
    assert.equal(permissionPatternMatches("x:get:/v1/{name}:cancel", "x:get:/v1/{name}:cancel"), true);
  });

  it("agrees with an escaped regular expression (property)", () => {
    const alphabet = fc.constantFrom("a", "b", ":", "/", "*");
    fc.assert(
      fc.property(
        fc.string({ unit: alphabet, maxLength: 12 }),
        fc.string({ unit: fc.constantFrom("a", "b", ":", "/"), maxLength: 16 }),
        (pattern, id) => {
          const regex = new RegExp(
            `^${pattern
              .split("*")
              .map((p) => p.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&"))
              .join(".*")}$`,
            "s",
          );
          assert.equal(permissionPatternMatches(pattern, id), regex.test(id));
        },
      ),
    );
  });

  it("stays fast on a pattern full of stars", () => {
    const pattern = `${"*a".repeat(500)}b`;
    assert.equal(permissionPatternMatches(pattern, "a".repeat(2000)), false);
  });

  it("validates patterns", () => {
    assert.equal(isValidPermissionPattern("orders:get:*"), true);
    assert.equal(isValidPermissionPattern(""), false);
    assert.equal(isValidPermissionPattern("has space"), false);
    assert.equal(isValidPermissionPattern("x".repeat(2049)), false);
    assert.equal(isValidPermissionPattern(42), false);
  });
});
