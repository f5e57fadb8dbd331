import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, it } from "node:test";
import { compareWithOpa } from "../../bench/authorize.ts";
import { INVOCATION_DECISIONS, OPA_VERSION } from "../../bench/lib/opa.ts";
import { projectTool } from "../helpers/peer-process.ts";

/**
 * `make bench`'s peer of authorize-invocation: OPA's REST server (the real `opa run --server`,
 * .tools/bin/opa, built by scripts/ensure-test-peers.sh) with bench/opa/authorize.rego. Its
 * figures mean something only if it makes our decisions: here both servers answer the whole
 * decision set — allows, denies by path, method, capability, subject and token — and each
 * answer must equal the policy's (compareWithOpa throws, naming the request, when one differs).
 */
describe("make bench: OPA's REST server decides like authorize-invocation", () => {
  it("is the pinned build", () => {
    const version = execFileSync(projectTool("opa"), ["version"], { encoding: "utf8" });
    assert.match(version, new RegExp(`^Version: ${OPA_VERSION.slice(1).replaceAll(".", "\\.")}$`, "m"));
  });

  it("answers every request of the decision set as the authority does", { timeout: 120_000 }, async () => {
    const decisions = await compareWithOpa();
    const policy = INVOCATION_DECISIONS.map((request) => request.allowed);
    assert.ok(policy.filter(Boolean).length >= 3 && policy.filter((allowed) => !allowed).length >= 10);
    assert.deepEqual(decisions.authority, policy, "the authority decides the set as the policy says");
    assert.deepEqual(decisions.opa, decisions.authority, "OPA decides the set as the authority does");
  });
});
