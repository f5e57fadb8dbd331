import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { toAuthorityError } from "../../../src/errors.ts";
import { ManagedError } from "../../../src/servers/managed/errors.ts";
import { parseManagedRequest } from "../../../src/servers/managed/request.ts";

const headers = {
  username: "svc",
  password: "pw-value-123",
  api_key: "apk_value",
  access_key: "ak_value",
  secret_key: "sk_value",
};

function failure(run: () => unknown): ManagedError {
  try {
    run();
  } catch (error) {
    assert.ok(error instanceof ManagedError);
    return error;
  }
  assert.fail("expected a ManagedError");
}

describe("managed request parsing", () => {
  it("reads the five headers and the operation's field", () => {
    const parsed = parseManagedRequest(headers, { data: "x", ignored: 1 }, "data");
    assert.deepEqual(parsed, {
      credentials: {
        username: "svc",
        password: "pw-value-123",
        apiKey: "apk_value",
        accessKey: "ak_value",
        secretKey: "sk_value",
      },
      value: "x",
      purpose: undefined,
      signedBlob: undefined,
    });
  });

  it("names every missing item at once, headers first, and never a value", () => {
    const error = failure(() =>
      parseManagedRequest({ ...headers, password: "", api_key: undefined }, {}, "encrypted_data"),
    );
    assert.equal(error.reason, "missing_field");
    assert.deepEqual(error.fields, ["password", "api_key", "encrypted_data"]);
    assert.equal(
      error.message,
      "Missing or empty header(s) password, api_key and body field encrypted_data.",
    );
    assert.equal(toAuthorityError(error).status, 400);
  });

  it("refuses repeated headers, oversized values and non-string fields", () => {
    assert.deepEqual(
      failure(() => parseManagedRequest({ ...headers, username: ["a", "b"] }, { data: "x" }, "data")).fields,
      ["username"],
    );
    assert.deepEqual(
      failure(() => parseManagedRequest({ ...headers, secret_key: "s".repeat(513) }, { data: "x" }, "data"))
        .fields,
      ["secret_key"],
    );
    const wrongType = failure(() => parseManagedRequest(headers, { data: ["x"] }, "data"));
    assert.equal(wrongType.reason, "invalid_field");
    assert.deepEqual(wrongType.fields, ["data"]);
    assert.deepEqual(failure(() => parseManagedRequest(headers, "data=x", "data")).fields, ["data"]);
  });
});
