import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConfigError } from "../../src/core/config-error.ts";
import { environmentLogLevel, logLevels } from "../../src/observability/log-level.ts";

describe("the environment's log level", () => {
  it("is info when AUTHORITY_LOG_LEVEL is unset or empty", () => {
    assert.equal(environmentLogLevel({}), "info");
    assert.equal(environmentLogLevel({ AUTHORITY_LOG_LEVEL: "" }), "info");
  });

  it("takes every level the log-level setting takes, trimmed as settings are", () => {
    for (const level of logLevels)
      assert.equal(environmentLogLevel({ AUTHORITY_LOG_LEVEL: ` ${level} ` }), level);
  });

  it("refuses another value with a configuration error that does not echo it", () => {
    assert.throws(
      () => environmentLogLevel({ AUTHORITY_LOG_LEVEL: "verbose-S3cretCanary" }),
      (error: unknown) =>
        error instanceof ConfigError &&
        error.message.startsWith("AUTHORITY_LOG_LEVEL must be one of") &&
        !error.message.includes("S3cretCanary"),
    );
  });
});
