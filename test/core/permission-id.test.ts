import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { HTTP_METHODS } from "../../src/core/http-method.ts";
import {
  buildPermissionId,
  isValidPermissionId,
  PermissionIdError,
  parsePermissionId,
} from "../../src/core/permission-id.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof PermissionIdError && error.code === expected;

describe("permission ids", () => {
  it("builds <capability_id>:<lowercase method>:<path template> with braces kept", () => {
    assert.equal(buildPermissionId("billing-api", "GET", "/users/{id}"), "billing-api:get:/users/{id}");
    assert.equal(buildPermissionId("cap_1", "Patch", "/a/{b}.{c}"), "cap_1:patch:/a/{b}.{c}");
  });

  it("parses at the first two colons, so templates may hold ':'", () => {
    assert.deepEqual(parsePermissionId("billing:post:/v1/{name}:cancel"), {
      capabilityId: "billing",
      method: "POST",
      pathTemplate: "/v1/{name}:cancel",
    });
  });

  it("rejects bad parts with distinct codes", () => {
    assert.throws(() => buildPermissionId("a:b", "GET", "/x"), code("capability_id_invalid"));
    assert.throws(() => buildPermissionId("", "GET", "/x"), code("capability_id_invalid"));
    assert.throws(() => buildPermissionId("a b", "GET", "/x"), code("capability_id_invalid"));
    assert.throws(() => buildPermissionId("cap", "FETCH", "/x"), code("method_invalid"));
    assert.throws(() => buildPermissionId("cap", "GET", "x"), code("path_template_invalid"));
    assert.throws(() => buildPermissionId("cap", "GET", "/users/{id"), code("path_template_invalid"));
    assert.throws(() => buildPermissionId("cap", "GET", "/a?b=1"), code("path_template_invalid"));
    assert.throws(() => parsePermissionId("cap"), code("permission_id_invalid"));
    assert.throws(() => parsePermissionId("cap:get"), code("permission_id_invalid"));
    assert.throws(() => parsePermissionId("cap:GET:/x"), code("method_invalid"));
    assert.throws(() => parsePermissionId(":get:/x"), code("capability_id_invalid"));
    assert.throws(() => parsePermissionId("cap:get:x"), code("path_template_invalid"));
    assert.throws(() => parsePermissionId(`cap:get:/${"a".repeat(3000)}`), code("permission_id_invalid"));
    assert.equal(isValidPermissionId("cap:get:/x"), true);
    assert.equal(isValidPermissionId("cap:get:/../x"), false);
    assert.equal(isValidPermissionId(42), false);
  });

  it("property: parse(build(x)) gives x back and build(parse(id)) gives id back", () => {
    const capabilityId = fc.stringMatching(/^[A-Za-z0-9_][A-Za-z0-9._~@+-]{0,30}$/);
    const segment = fc.oneof(
      fc.stringMatching(/^[A-Za-z0-9_~-]{1,12}$/).filter((s) => s !== "." && s !== ".."),
      fc.stringMatching(/^[A-Za-z][A-Za-z0-9_]{0,8}$/).map((name) => `{${name}}`),
      fc.stringMatching(/^[a-z]{1,5}$/).map((name) => `{${name}}:cancel`),
    );
    const template = fc
      .array(segment, { maxLength: 6 })
      .filter((segments) => {
        const names = segments.flatMap((s) => [...s.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]));
        return new Set(names).size === names.length;
      })
      .map((segments) => `/${segments.join("/")}`);
    fc.assert(
      fc.property(capabilityId, fc.constantFrom(...HTTP_METHODS), template, (cap, method, path) => {
        const id = buildPermissionId(cap, method, path);
        assert.deepEqual(parsePermissionId(id), { capabilityId: cap, method, pathTemplate: path });
        const parsed = parsePermissionId(id);
        assert.equal(buildPermissionId(parsed.capabilityId, parsed.method, parsed.pathTemplate), id);
      }),
      { numRuns: 500 },
    );
  });
});
