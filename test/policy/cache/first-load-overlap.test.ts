import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { PublicKeyRingJson } from "../../../src/crypto/index.ts";
import type { PolicyFetchResult, PolicyRecordFetcher } from "../../../src/policy/cache/index.ts";
import { createVerifiedPolicyCache } from "../../../src/policy/cache/verified-policy-cache.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import { createSignedPolicyVerifier } from "../../../src/policy/signed-policy.ts";
import { POLICY_CACHE_SETTINGS } from "../../helpers/policy-cache-settings.ts";
import { protectedRecord, recordSource } from "./helpers.ts";

/**
 * A subject's first lookup (decision 2871): the signer's public keys are fetched while the
 * policy is on its way — their owner follows from the subject — not after it arrives; what is
 * fetched early only verifies the policy it belongs to, and a failed fetch still fails closed.
 */
describe("a subject's first policy load", () => {
  const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });

  /** The authority's record route, each answer held until `release` (a round trip in flight). */
  async function heldSource(subjectId: string) {
    const inner = recordSource(protector);
    inner.records.set(subjectId, await protectedRecord(protector, subjectId, 1));
    let release = (): void => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const source: PolicyRecordFetcher = {
      async fetchPolicy(id, options): Promise<PolicyFetchResult> {
        const answer = await inner.fetchPolicy(id, options);
        await held;
        return answer;
      },
    };
    return { source, release };
  }

  /** The sidecar's key route: `down` fails it; every owner asked is logged. */
  function keySource() {
    const state = { down: false, asked: [] as string[] };
    const fetchPolicyKeys = async (owner: string): Promise<PublicKeyRingJson | undefined> => {
      state.asked.push(owner);
      if (state.down) throw new Error("authority unreachable");
      if (protector.signerKeys === undefined) throw new Error("no signer keys");
      return protector.signerKeys(owner);
    };
    return { state, fetchPolicyKeys };
  }

  test("the signer's keys are asked for while the policy is still on its way", async () => {
    const { source, release } = await heldSource("first-1");
    const keys = keySource();
    const opener = createSignedPolicyVerifier({ serviceIdentity: "t", source: keys });
    const cache = createVerifiedPolicyCache({ ...POLICY_CACHE_SETTINGS, source, opener });
    const lookup = cache.get("first-1");
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(keys.state.asked, ["subject:first-1"], "keys asked before the policy arrived");
    release();
    const { policy } = await lookup;
    assert.equal(policy.load.ok, true);
    assert.deepEqual(keys.state.asked, ["subject:first-1"], "one fetch of the keys, shared");
    cache.close();
  });

  test("keys that cannot be fetched fail the lookup closed, and it recovers", async () => {
    const { source, release } = await heldSource("first-2");
    const keys = keySource();
    keys.state.down = true;
    const opener = createSignedPolicyVerifier({ serviceIdentity: "t", source: keys });
    const cache = createVerifiedPolicyCache({ ...POLICY_CACHE_SETTINGS, source, opener });
    const lookup = cache.get("first-2");
    await new Promise((resolve) => setImmediate(resolve));
    release();
    await assert.rejects(lookup, { code: "source_unavailable" });
    keys.state.down = false;
    assert.equal((await cache.get("first-2")).policy.load.ok, true);
    cache.close();
  });

  test("keys fetched early for one subject never verify another owner's policy", async () => {
    // The authority files a policy signed for `first-4` under `first-3` (with first-3's facts):
    // first-3's keys, fetched early, do not make it verify.
    const { source, release } = await heldSource("first-3");
    const forged = await protectedRecord(protector, "first-4", 1);
    const inner = source.fetchPolicy.bind(source);
    const swapping: PolicyRecordFetcher = {
      async fetchPolicy(id, options) {
        const answer = await inner(id, options);
        if (answer.status !== "found") return answer;
        const other = recordSource(protector);
        other.records.set("first-4", forged);
        const theirs = await other.fetchPolicy("first-4", {});
        return theirs.status === "found" ? { ...answer, signedPolicy: theirs.signedPolicy } : answer;
      },
    };
    const keys = keySource();
    const cache = createVerifiedPolicyCache({
      ...POLICY_CACHE_SETTINGS,
      source: swapping,
      opener: createSignedPolicyVerifier({ serviceIdentity: "t", source: keys }),
    });
    const lookup = cache.get("first-3");
    await new Promise((resolve) => setImmediate(resolve));
    release();
    assert.deepEqual((await lookup).policy.load, { ok: false, reason: "policy_verification_failed" });
    cache.close();
  });
});
