import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { assignmentExpiry, MAX_POLICY_TTL_SECONDS } from "../../src/admin/assignment-expiry.ts";
import { AuthorityError } from "../../src/errors.ts";

const now = new Date("2026-01-01T00:00:00.000Z");

function refused(input: Parameters<typeof assignmentExpiry>[0], message: RegExp): void {
  assert.throws(
    () => assignmentExpiry(input, now),
    (error: unknown) =>
      error instanceof AuthorityError && error.code === "invalid_request" && message.test(error.message),
  );
}

describe("assignmentExpiry (admin assignments and binding assignments)", () => {
  it("takes exactly one of expires_at and ttl_seconds", () => {
    refused({}, /exactly one/);
    refused({ expires_at: "2026-02-01T00:00:00.000Z", ttl_seconds: 60 }, /exactly one/);
  });

  it("refuses a timestamp that does not parse, the past and now", () => {
    refused({ expires_at: "tomorrow" }, /ISO 8601/);
    refused({ expires_at: "" }, /ISO 8601/);
    refused({ expires_at: "2025-12-31T23:59:59.000Z" }, /future/);
    refused({ ttl_seconds: 0 }, /future/);
    refused({ ttl_seconds: -1 }, /future/);
  });

  it("refuses more than the longest lifetime, by either form", () => {
    refused({ ttl_seconds: MAX_POLICY_TTL_SECONDS + 1 }, /at most/);
    refused(
      { expires_at: new Date(now.getTime() + (MAX_POLICY_TTL_SECONDS + 1) * 1000).toISOString() },
      /at most/,
    );
    assert.equal(
      assignmentExpiry({ ttl_seconds: MAX_POLICY_TTL_SECONDS }, now).getTime(),
      now.getTime() + MAX_POLICY_TTL_SECONDS * 1000,
    );
  });

  it("any ttl within the bounds expires exactly that many seconds from now", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: MAX_POLICY_TTL_SECONDS }), (ttl) => {
        assert.equal(assignmentExpiry({ ttl_seconds: ttl }, now).getTime(), now.getTime() + ttl * 1000);
      }),
    );
  });

  it("any expires_at string either gives a future date within the bounds or is refused", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
        ),
        (text) => {
          let at: Date;
          try {
            at = assignmentExpiry({ expires_at: text }, now);
          } catch (error) {
            assert.ok(error instanceof AuthorityError && error.code === "invalid_request");
            return;
          }
          assert.ok(at.getTime() > now.getTime());
          assert.ok(at.getTime() - now.getTime() <= MAX_POLICY_TTL_SECONDS * 1000);
        },
      ),
    );
  });
});
