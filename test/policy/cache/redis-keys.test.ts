import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  POLICY_CHANGES_CHANNEL,
  parsePolicyChange,
  policyEntryKey,
  policyHeadKey,
} from "../../../src/policy/cache/index.ts";

describe("Redis names and change messages", () => {
  test("the names the authority and the sidecars agree on", () => {
    assert.equal(POLICY_CHANGES_CHANNEL, "authority:policy-changes");
    assert.equal(policyHeadKey("agent-1"), "authority:policy-head:agent-1");
    assert.equal(policyEntryKey("agent-1"), "authority:sidecar:policy:agent-1");
  });

  test("change messages are parsed strictly; anything malformed is ignored", () => {
    assert.deepEqual(parsePolicyChange('{"subject_id":"a","head":3}'), { subject_id: "a", head: 3 });
    for (const text of [
      "",
      "{",
      "[]",
      '{"subject_id":"a"}',
      '{"subject_id":"","head":1}',
      '{"subject_id":"a","head":-1}',
      '{"subject_id":"a","head":1.5}',
      '{"subject_id":"a","head":"1"}',
    ]) {
      assert.equal(parsePolicyChange(text), undefined, text);
    }
  });
});
