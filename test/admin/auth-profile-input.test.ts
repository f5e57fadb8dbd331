import assert from "node:assert/strict";
import { test } from "node:test";
import { parseAuthProfileInput } from "../../src/admin/auth-profile-input.ts";
import { AuthorityError } from "../../src/errors.ts";

test("an auth profile type naming an Object.prototype member is invalid_request, never a crash", () => {
  for (const type of ["__proto__", "constructor", "toString", "hasOwnProperty"]) {
    assert.throws(
      () => parseAuthProfileInput({ type }),
      (error: unknown) => error instanceof AuthorityError && error.code === "invalid_request",
      type,
    );
  }
  assert.throws(
    () => parseAuthProfileInput({ type: "static", kind: "__proto__" }),
    (error: unknown) => error instanceof AuthorityError && error.code === "invalid_request",
  );
});
