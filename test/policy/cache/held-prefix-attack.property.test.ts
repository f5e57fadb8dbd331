/**
 * Attack pass on the signed payload's SHA-512 continued from a held `apis` section (decision
 * 3181 on 3131's later part): through the verified-policy cache, after a genuine policy made a
 * section held, an answer for another subject whose signed payload is that subject's genuine one
 * changed anywhere (inside the held section, at its end, in its last 64 bytes, after it), cut,
 * extended, or replaced by another subject's payload — its record's document hash made to match
 * the changed text, so only the signature's payload digest can refuse it — must be refused, and
 * the genuine one verified, exactly as a verification that holds nothing decides.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import fc from "fast-check";
import { decodeSignedBlob, encodeSignedBlob, PayloadPrefix } from "../../../src/crypto/index.ts";
import { createVerifiedPolicyCache, type PolicyRecordFetcher } from "../../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import { entry } from "../../core/fixtures.ts";
import { POLICY_CACHE_SETTINGS } from "../../helpers/policy-cache-settings.ts";
import { protectedRecord, recordSource, sidecarOpener } from "./helpers.ts";

const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });
const sha256 = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}` as const;

describe("a signed payload's digest continued from a held section", () => {
  it("refuses every changed payload and verifies the genuine one, as a verification holding nothing does (property)", async () => {
    const source = recordSource(protector);
    const shared = [
      entry([["GET", "/users/{id}"]]),
      entry([["POST", "/invoices"]], { capabilityId: "invoices-api" }),
    ];
    for (const subjectId of ["held", "target", "other"])
      source.records.set(subjectId, await protectedRecord(protector, subjectId, 1, { apis: shared }));
    source.records.set(
      "apart",
      await protectedRecord(protector, "apart", 1, {
        apis: [entry([["GET", "/x/{id}"]], { capabilityId: "x-api" })],
      }),
    );
    const genuine = new Map<string, { blob: Buffer; payload: Buffer }>();
    for (const subjectId of source.records.keys()) {
      const found = await source.fetchPolicy(subjectId, {});
      assert.ok(found.status === "found" && typeof found.signedPolicy === "string");
      const blob = Buffer.from(found.signedPolicy, "base64");
      genuine.set(subjectId, { blob, payload: Buffer.from(decodeSignedBlob(blob).payload) });
    }
    const target = genuine.get("target");
    assert.ok(target !== undefined);
    const sectionEnd = target.payload.lastIndexOf('],"') + 1;
    const parts = decodeSignedBlob(target.blob);

    let prefixOffered = 0;
    const check = async (payload: Buffer, label: string) => {
      const forged = encodeSignedBlob(parts.document, parts.signature, payload);
      const answers: PolicyRecordFetcher = {
        async fetchPolicy(subjectId, options) {
          const result = await source.fetchPolicy(subjectId, options);
          if (result.status !== "found" || typeof result.signedPolicy !== "string") return result;
          if (subjectId !== "target")
            return { ...result, signedPolicy: Buffer.from(result.signedPolicy, "base64") };
          return {
            ...result,
            record: { ...result.record, document_hash: sha256(payload) },
            signedPolicy: new Uint8Array(forged),
          };
        },
      };
      const verifier = sidecarOpener(protector);
      const cache = createVerifiedPolicyCache({
        ...POLICY_CACHE_SETTINGS,
        source: answers,
        opener: {
          open: (artifact, context, options) => verifier.open(artifact, context, options),
          openSigned: (blob, context, options) => {
            if (options?.heldPrefix?.(decodeSignedBlob(blob).payload) instanceof PayloadPrefix)
              prefixOffered++;
            return (
              verifier.openSigned?.(blob, context, options) ?? Promise.reject(new Error("no openSigned"))
            );
          },
        },
      });
      assert.equal((await cache.get("held")).policy.load.ok, true);
      const load = (await cache.get("target")).policy.load;
      if (payload.equals(target.payload)) assert.equal(load.ok, true, label);
      else assert.deepEqual(load, { ok: false, reason: "policy_verification_failed" }, label);
    };

    await check(target.payload, "genuine");
    for (const [name, other] of genuine)
      if (name !== "target") await check(other.payload, `${name}'s payload`);
    // Every place the split and the look-up key look at, then anywhere (property).
    const places = [
      0,
      1,
      sectionEnd - 65,
      sectionEnd - 64,
      sectionEnd - 2,
      sectionEnd - 1,
      sectionEnd,
      sectionEnd + 1,
      target.payload.length - 1,
    ];
    for (const at of places) {
      const changed = Buffer.from(target.payload);
      changed[at] = (changed[at] ?? 0) ^ 1;
      await check(changed, `byte ${at}`);
    }
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.tuple(fc.constant("flip" as const), fc.nat(), fc.integer({ min: 1, max: 255 })),
          fc.tuple(fc.constant("cut" as const), fc.nat(), fc.integer({ min: 1, max: 8 })),
          fc.tuple(fc.constant("add" as const), fc.nat(), fc.integer({ min: 1, max: 255 })),
        ),
        async ([kind, at, n]) => {
          const index = at % target.payload.length;
          const payload =
            kind === "flip"
              ? Buffer.from(target.payload).fill(((target.payload[index] ?? 0) + n) & 0xff, index, index + 1)
              : kind === "cut"
                ? Buffer.concat([target.payload.subarray(0, index), target.payload.subarray(index + n)])
                : Buffer.concat([
                    target.payload.subarray(0, index),
                    Buffer.from([n]),
                    target.payload.subarray(index),
                  ]);
          await check(payload, `${kind} at ${index} (${n})`);
        },
      ),
      { numRuns: 60 },
    );
    assert.ok(prefixOffered > 0, "the held prefix was offered (the path under attack was reached)");
  });
});
