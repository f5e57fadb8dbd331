import assert from "node:assert/strict";
import { test } from "node:test";
import {
  allowResponse,
  denyResponse,
  rpcCodeFor,
  validateDecision,
} from "../../../../src/servers/sidecar/grpc/check-response.ts";

test("HTTP status and google.rpc code pair as documented", () => {
  assert.equal(rpcCodeFor(401, "invalid_token"), 16);
  assert.equal(rpcCodeFor(403, "policy_revoked"), 7);
  assert.equal(rpcCodeFor(400, "missing_capability"), 3);
  assert.equal(rpcCodeFor(429, "rate_limited"), 8);
  assert.equal(rpcCodeFor(503, "upstream_unavailable"), 14);
  assert.equal(rpcCodeFor(504, "upstream_timeout"), 4);
  assert.equal(rpcCodeFor(404, "not_found"), 5);
  // A reason whose table status differs from the decision's status: the status decides.
  assert.equal(rpcCodeFor(403, "internal"), 7);
  assert.equal(rpcCodeFor(418 as number, "teapot"), 7);
  assert.equal(rpcCodeFor(507, "storage"), 14);
});

test("validateDecision normalizes header names and copies, and rejects anything else", () => {
  const decision = validateDecision({
    allow: true,
    headersToSet: { "X-Up": "v" },
    headersToRemove: ["Authorization"],
    dynamicMetadata: { a: 1 },
  });
  assert.deepEqual(decision, {
    allow: true,
    headersToSet: { "x-up": "v" },
    headersToRemove: ["authorization"],
    dynamicMetadata: { a: 1 },
  });
  assert.equal(validateDecision({ allow: 1 }), null);
  assert.equal(
    validateDecision({ allow: true, headersToSet: {}, headersToRemove: ["bad name"], dynamicMetadata: {} }),
    null,
  );
  assert.equal(validateDecision({ allow: false, httpStatus: 403, reason: "x", requestId: 5 }), null);
  assert.equal(validateDecision({ allow: false, httpStatus: 302, reason: "x", requestId: "r" }), null);
});

test("allow and deny responses have exactly one member of the http_response oneof", () => {
  const allow = allowResponse({ allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} });
  assert.equal("ok_response" in allow && !("denied_response" in allow), true);
  assert.equal(allow.status.code, 0);
  const deny = denyResponse({ allow: false, httpStatus: 403, reason: "policy_expired", requestId: "r1" });
  assert.equal("denied_response" in deny && !("ok_response" in deny), true);
  assert.notEqual(deny.status.code, 0);
});
