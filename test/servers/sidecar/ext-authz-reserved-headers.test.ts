import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { callerReservedHeaders } from "../../../src/servers/sidecar/ext-authz.ts";

/** An allow removes every x-authority-* header the caller sent that it does not itself set. */
describe("callerReservedHeaders", () => {
  it("names the caller's x-authority-* headers, in any case, except those the allow sets", () => {
    const removed = callerReservedHeaders(
      {
        "X-Authority-Subject": "root-admin",
        "x-authority-capability": "other",
        "x-authority-request-id": "forged",
        "x-authorityless": "kept",
        accept: "*/*",
      },
      { "x-authority-request-id": "req-1", "X-Authority-Permission-Id": "orders:get:/orders" },
    );
    assert.deepEqual(removed.sort(), ["x-authority-capability", "x-authority-subject"]);
  });

  it("never leaves a caller-chosen x-authority-* name that the allow does not overwrite", () => {
    const name = fc.stringMatching(/^[A-Za-z0-9-]{0,20}$/).map((tail) => tail);
    fc.assert(
      fc.property(
        fc.dictionary(
          name.map((t) => `x-Authority-${t}`),
          fc.string(),
        ),
        fc.dictionary(name, fc.string()),
        (caller, set) => {
          const removed = new Set(callerReservedHeaders(caller, set));
          const setNames = new Set(Object.keys(set).map((n) => n.toLowerCase()));
          for (const header of Object.keys(caller)) {
            const lower = header.toLowerCase();
            assert.ok(removed.has(lower) || setNames.has(lower), header);
          }
        },
      ),
    );
  });
});
