import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { extractBearer, hasAnyRole, hasRole, hasScope } from "../../src/identity/bearer.ts";
import { TokenVerificationError } from "../../src/identity/errors.ts";

const code = (fn: () => unknown): string => {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof TokenVerificationError);
    return error.code;
  }
  return "no error";
};

describe("extractBearer", () => {
  it("returns the token for a well-formed header, scheme in any case", () => {
    assert.equal(extractBearer("Bearer abc.def-ghi_jkl"), "abc.def-ghi_jkl");
    assert.equal(extractBearer("bearer abc"), "abc");
    assert.equal(extractBearer("BEARER a+b/c=="), "a+b/c==");
  });

  it("returns undefined when no credential was sent", () => {
    assert.equal(extractBearer(undefined), undefined);
    assert.equal(extractBearer(""), undefined);
  });

  it("rejects other schemes, extra spaces, extra tokens and bad characters", () => {
    for (const header of [
      "Basic abc",
      "Bearer",
      "Bearer ",
      "Bearer  abc",
      " Bearer abc",
      "Bearer abc def",
      "Bearer abc ",
      "Bearer\tabc",
      "Bearerabc",
      "Bearer a,b",
      "Bearer =abc",
      "Bearer abc\r\n",
      "Token abc",
    ]) {
      assert.equal(
        code(() => extractBearer(header)),
        "token_malformed",
        JSON.stringify(header),
      );
    }
    assert.equal(
      code(() => extractBearer(["Bearer a", "Bearer b"])),
      "token_malformed",
    );
  });

  it("bounds the header size", () => {
    assert.equal(
      code(() => extractBearer(`Bearer ${"a".repeat(9000)}`)),
      "token_too_large",
    );
    assert.equal(
      code(() => extractBearer("Bearer abcdef", 10)),
      "token_too_large",
    );
    assert.equal(extractBearer(`Bearer ${"a".repeat(8192)}`), "a".repeat(8192));
  });
});

describe("hasScope / hasRole", () => {
  const token = { scopes: ["authority/authority.broker.execute", "read"], roles: ["admin"] };
  it("checks exact membership", () => {
    assert.ok(hasScope(token, "authority/authority.broker.execute"));
    assert.ok(!hasScope(token, "authority"));
    assert.ok(hasRole(token, "admin"));
    assert.ok(!hasRole(token, "Admin"));
    assert.ok(hasAnyRole(token, ["viewer", "admin"]));
    assert.ok(!hasAnyRole(token, []));
  });
});
