import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { sha256Hex } from "../../src/core/canonical-json.ts";
import { buildPermissionId } from "../../src/core/permission-id.ts";
import { MAX_TOOL_NAME_LENGTH, toolNameFor } from "../../src/core/tool-name.ts";

const VALID = /^[A-Za-z0-9_-]{1,64}$/;

describe("toolNameFor", () => {
  it("derives a readable base from method and path, plus a hash suffix of the permission id", () => {
    const id = "billing-api:get:/users/{id}/invoices";
    assert.equal(toolNameFor(id), `get_users_id_invoices_${sha256Hex(id).slice(0, 8)}`);
  });

  it("uses a preferred base when it has usable characters", () => {
    const id = "billing-api:post:/invoices";
    assert.equal(toolNameFor(id, "createInvoice"), `createInvoice_${sha256Hex(id).slice(0, 8)}`);
    assert.equal(toolNameFor(id, "create invoice (v2)!"), `create_invoice_v2_${sha256Hex(id).slice(0, 8)}`);
    assert.equal(toolNameFor(id, "!!!"), toolNameFor(id));
    assert.equal(toolNameFor(id, "ünïcödé"), `n_c_d_${sha256Hex(id).slice(0, 8)}`);
  });

  it("caps names at 64 characters including the suffix", () => {
    const id = `cap:get:/${"very-long-segment/".repeat(20)}{id}`;
    const name = toolNameFor(id);
    assert.equal(name.length, MAX_TOOL_NAME_LENGTH);
    assert.match(name, VALID);
    assert.ok(name.endsWith(`_${sha256Hex(id).slice(0, 8)}`));
    assert.match(toolNameFor(id, "x".repeat(200)), /^x{55}_[0-9a-f]{8}$/);
  });

  it("is deterministic", () => {
    assert.equal(toolNameFor("a:get:/x"), toolNameFor("a:get:/x"));
    assert.equal(toolNameFor("a:get:/x", "base"), toolNameFor("a:get:/x", "base"));
  });

  it("stays unique across 1,000 long, similar paths that share a cut base", () => {
    const names = new Set<string>();
    const prefix = "/organizations/{orgId}/projects/{projectId}/environments/{environmentId}/deployments";
    for (let i = 0; i < 1000; i++) {
      const id = buildPermissionId("platform-api", i % 2 === 0 ? "GET" : "DELETE", `${prefix}/item${i}`);
      const name = toolNameFor(id);
      assert.match(name, VALID);
      names.add(name);
    }
    assert.equal(names.size, 1000);
  });

  it("property: always valid MCP names of at most 64 characters", () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 300 }),
        fc.option(fc.string({ maxLength: 300 }), { nil: undefined }),
        (id, base) => {
          assert.match(toolNameFor(id, base), VALID);
        },
      ),
    );
  });
});
