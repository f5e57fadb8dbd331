import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { displayUrl } from "../../src/admin/platform-diagnostics.ts";

const secretArb = fc.stringMatching(/^[A-Za-z0-9]{12,24}$/).map((s) => `S3cr${s}`);

describe("platform diagnostics", () => {
  it("never shows the userinfo, query or fragment of a URL", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("http", "https", "redis", "rediss", "postgres"),
        fc.domain(),
        fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }),
        secretArb,
        secretArb,
        secretArb,
        (scheme, host, port, user, password, token) => {
          const raw = `${scheme}://${user}:${password}@${host}${port === undefined ? "" : `:${port}`}/db?token=${token}#${token}`;
          const shown = displayUrl(raw);
          assert.ok(shown !== null);
          for (const secret of [user, password, token])
            assert.ok(!shown.includes(secret), `${shown} shows ${secret}`);
          assert.ok(shown.includes(host.toLowerCase()) || shown.includes(host));
        },
      ),
    );
  });

  it("shows a URL without credentials exactly as configured", () => {
    for (const url of ["https://idp.example.com", "http://127.0.0.1:8083/realms/a", "redis://redis:6379/0"]) {
      assert.equal(displayUrl(url), url);
    }
    assert.equal(displayUrl("not a url"), null);
  });
});
