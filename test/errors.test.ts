import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { VerifyError } from "../src/bindings/verify.ts";
import { OpenApiImportError } from "../src/catalog/errors.ts";
import { CryptoClientError } from "../src/clients/crypto-service/client.ts";
import { CryptoServiceError } from "../src/clients/crypto-service/reasons.ts";
import { AuthorityError, denyReasons, errorCodes, isDenyReason, toAuthorityError } from "../src/errors.ts";
import { EgressDeniedError } from "../src/execute/egress.ts";
import { ManagedError } from "../src/servers/managed/errors.ts";

describe("error table", () => {
  it("has exactly the ten deny reasons of the spec and the documented additions", () => {
    assert.deepEqual(Object.keys(denyReasons).sort(), [
      "ambiguous_path",
      "missing_capability",
      "missing_policy",
      "missing_subject",
      "operation_not_allowed",
      "policy_expired",
      "policy_revoked",
      "policy_verification_failed",
      "subject_mismatch",
      "unknown_capability",
      "unknown_operation",
    ]);
    assert.ok(isDenyReason("policy_revoked"));
    assert.ok(!isDenyReason("internal"));
  });

  it("gives every code a 4xx/5xx status and a message", () => {
    for (const [code, spec] of Object.entries(errorCodes)) {
      assert.ok(spec.status >= 400 && spec.status < 600, code);
      assert.ok(spec.message.length > 0, code);
    }
  });

  it("serializes without the cause or a stack", () => {
    const error = toAuthorityError(new Error("secret connection string redis://:pw@host"));
    assert.equal(error.code, "internal");
    assert.equal(error.status, 500);
    const body = JSON.stringify(error);
    assert.ok(!body.includes("secret"));
    assert.ok(!body.includes("stack"));
    const unavailable = Object.assign(new Error("redis 10.0.0.1:6379 refused"), {
      authorityCode: "upstream_unavailable",
    });
    assert.equal(toAuthorityError(unavailable).status, 503);
    assert.ok(!JSON.stringify(toAuthorityError(unavailable)).includes("10.0.0.1"));
    const known = new AuthorityError("not_found", undefined, { details: { resource: "partner" } });
    assert.equal(toAuthorityError(known), known);
    assert.deepEqual(JSON.parse(JSON.stringify(known)), {
      error: "not_found",
      message: "The resource does not exist.",
      details: { resource: "partner" },
    });
  });
});

describe("one way onto the table: toAuthorityError", () => {
  it("answers a module error that names its entry with that entry, never 500 internal", () => {
    const reasoned = toAuthorityError(new CryptoServiceError("owner_not_found", { fields: ["owner"] }));
    assert.equal(reasoned.code, "not_found");
    assert.equal(reasoned.status, 404);
    assert.deepEqual(reasoned.details, { reason: "owner_not_found", fields: ["owner"] });

    const managed = toAuthorityError(new ManagedError("upstream_token_rejected"));
    assert.equal(managed.code, "internal");
    assert.equal(managed.callerFault, false);

    const problems = [{ pointer: "/paths", message: "missing" }];
    const imported = toAuthorityError(new OpenApiImportError(problems));
    assert.equal(imported.code, "invalid_request");
    assert.deepEqual(imported.details, { reason: "invalid_openapi", problems });

    const verify = toAuthorityError(new VerifyError("digest_mismatch"));
    assert.equal(verify.code, "digest_mismatch");
    assert.equal(verify.status, errorCodes.digest_mismatch.status);

    const client = toAuthorityError(new CryptoClientError("invalid_credentials"));
    assert.equal(client.code, "insufficient_role");
    assert.deepEqual(client.details, { reason: "invalid_credentials" });
  });

  it("keeps the cause for logs and the table's message for a code-only module error", () => {
    const cause = new EgressDeniedError("private");
    const error = toAuthorityError(cause);
    assert.equal(error.code, "egress_denied");
    assert.equal(error.message, errorCodes.egress_denied.message);
    assert.equal(error.cause, cause);
    assert.equal(toAuthorityError(new Error("boom")).code, "internal");
    assert.equal(toAuthorityError({ authorityCode: "no_such_code" }).code, "internal");
  });
});
