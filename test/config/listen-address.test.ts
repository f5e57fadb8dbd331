import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { parseListenAddress } from "../../src/config/listen-address.ts";
import { ConfigError } from "../../src/core/config-error.ts";

describe("parseListenAddress", () => {
  it("reads host:port and [ipv6]:port", () => {
    assert.deepEqual(parseListenAddress("127.0.0.1:8080"), { host: "127.0.0.1", port: 8080 });
    assert.deepEqual(parseListenAddress("[::1]:0"), { host: "::1", port: 0 });
    assert.deepEqual(parseListenAddress("authority.local:65535"), { host: "authority.local", port: 65535 });
  });

  it("says which part is wrong: the shape, or the port's range", () => {
    assert.throws(
      () => parseListenAddress("127.0.0.1:99999", "--listen"),
      new ConfigError("--listen: port 99999 is out of range (0-65535)"),
    );
    for (const bad of ["8080", "host:", ":80", "::1:80", "a b:80", "[zz]:80", "h:-1"]) {
      assert.throws(() => parseListenAddress(bad, "--listen"), /--listen must be host:port or \[ipv6\]:port/);
    }
  });

  it("accepts every port in range and refuses every port above it", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 65535 }), (port) => {
        assert.equal(parseListenAddress(`0.0.0.0:${port}`).port, port);
      }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 65536, max: Number.MAX_SAFE_INTEGER }), (port) => {
        assert.throws(() => parseListenAddress(`0.0.0.0:${port}`), /out of range/);
      }),
    );
  });
});
