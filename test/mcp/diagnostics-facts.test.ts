import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { mcpFacts } from "../../src/mcp/diagnostics-facts.ts";

describe("MCP diagnostics facts", () => {
  it("reports MCP defaults from the public URL", () => {
    const facts = mcpFacts({ publicUrl: "https://authority.example.com/" });
    assert.equal(facts.endpoint, "https://authority.example.com/mcp");
    assert.deepEqual(facts.allowed_origins, ["https://authority.example.com"]);
    assert.equal(facts.upstream_timeout_ms, 10_000);
    assert.ok(facts.protocol_versions.length > 0);
    assert.equal(facts.latest_protocol_version, facts.protocol_versions[0]);
  });

  it("never shows a credential carried in the public URL", () => {
    const facts = mcpFacts({
      publicUrl: "https://user:S3cretPassw0rd@authority.example.com/?token=S3cretT0ken",
    });
    assert.equal(facts.endpoint, "https://authority.example.com/mcp");
    assert.ok(!JSON.stringify(facts).includes("S3cret"));
  });
});
