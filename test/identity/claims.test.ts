import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  parseScopeString,
  readAudience,
  readClientId,
  readRoles,
  readScopes,
} from "../../src/identity/claims.ts";

describe("claim readers", () => {
  it("reads scope strings, scope arrays and scp", () => {
    assert.deepEqual(readScopes({ scope: "a b  a" }), ["a", "b"]);
    assert.deepEqual(readScopes({ scope: ["x", "y"] }), ["x", "y"]);
    assert.deepEqual(readScopes({ scp: "x" }), ["x"]);
    assert.deepEqual(readScopes({}), []);
    assert.equal(readScopes({ scope: 7 }), undefined);
    assert.equal(readScopes({ scope: 'a "b"' }), undefined);
    assert.equal(parseScopeString("a\\b"), undefined);
  });

  it("reads roles only as an array of strings", () => {
    assert.deepEqual(readRoles({ roles: ["admin", "admin", "viewer"] }), ["admin", "viewer"]);
    assert.deepEqual(readRoles({}), []);
    assert.equal(readRoles({ roles: "admin" }), undefined);
    assert.equal(readRoles({ roles: [1] }), undefined);
  });

  it("reads audience and client id", () => {
    assert.deepEqual(readAudience({ aud: "a" }), ["a"]);
    assert.deepEqual(readAudience({ aud: ["a", "b"] }), ["a", "b"]);
    assert.deepEqual(readAudience({}), []);
    assert.equal(readClientId({ client_id: "c", azp: "z" }), "c");
    assert.equal(readClientId({ azp: "z" }), "z");
    assert.equal(readClientId({}), undefined);
    // Present but not one client id: the token is refused, not read as having none.
    assert.throws(() => readClientId({ client_id: "" }), { code: "token_malformed" });
    assert.throws(() => readClientId({ client_id: ["c"], azp: "z" }), { code: "token_malformed" });
  });
});
