import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import fc from "fast-check";
import { benchAssignment } from "../../../bench/policy.ts";
import { canonicalJson } from "../../../src/core/canonical-json.ts";
import { type PolicyDocument, parsePolicyDocument } from "../../../src/core/index.ts";
import { createPolicyInterner, heapBytes } from "../../../src/policy/cache/policy-interning.ts";
import { compilePolicyDocument } from "../../../src/policy/compile.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

function documentOf(subjectId: string, operations: number): PolicyDocument {
  return compilePolicyDocument({
    subject: { subject_id: subjectId, subject_type: "agent", display_name: subjectId },
    cryptoVersion: "subject_credentials_v1",
    assignments: [benchAssignment(operations)],
    expiresAt: "2099-01-01T00:00:00.000Z",
    revokedAt: null,
    now: new Date("2026-01-01T00:00:00.000Z"),
  });
}

/** Heap bytes per value of `count` values made by `make`, measured after full collections. */
function measuredBytes(count: number, make: (i: number) => unknown): number {
  gc();
  gc();
  const before = process.memoryUsage().heapUsed;
  const kept = Array.from({ length: count }, (_, i) => make(i));
  gc();
  gc();
  const after = process.memoryUsage().heapUsed;
  assert.equal(kept.length, count);
  return (after - before - 8 * count) / count;
}

describe("policy interning", () => {
  for (const operations of [5, 100]) {
    test(`heapBytes of a parsed ${operations}-operation policy is within 0.9–1.6× of the heap it takes`, () => {
      const text = JSON.stringify(documentOf("agent-1", operations));
      const estimate = heapBytes(JSON.parse(text));
      const measured = measuredBytes(200, () => JSON.parse(text));
      const ratio = estimate / measured;
      assert.ok(
        ratio >= 0.9 && ratio <= 1.6,
        `estimate ${estimate} vs measured ${measured} (${ratio.toFixed(2)}×)`,
      );
    });
  }

  // The lower bound leaves room for V8's in-object slack, which depends on what else the process
  // has loaded: the same 368-byte estimate measured 402 bytes alone and 413–472 in the runner.
  test("a section held with its bytes weighs them once, as a shared part of every holder", () => {
    const interner = createPolicyInterner();
    const parse = (subjectId: string) =>
      parsePolicyDocument(Buffer.from(canonicalJson(documentOf(subjectId, 5))), {
        heldApis: (bytes) => interner.heldApis(bytes),
      });
    const first = parse("agent-1");
    assert.ok(first.apisHash !== undefined && first.apisSection !== undefined);
    const held = interner.intern(first.document, first.apisHash, first.apisSection);
    const part = held.weight.shared.find((shared) => shared.key === `apis-bytes:${first.apisHash}`);
    assert.equal(part?.bytes, first.apisSection.bytes.byteLength);
    const second = parse("agent-2");
    assert.equal(second.apisSection, undefined, "found by its bytes, not filed again");
    assert.equal(interner.intern(second.document).weight.shared, held.weight.shared);
  });

  test("a subject's own share of an interned policy is what its heap grows by (within 0.8–2×)", () => {
    const interner = createPolicyInterner();
    const texts = Array.from({ length: 300 }, (_, i) => JSON.stringify(documentOf(`agent-${i}`, 100)));
    const first = interner.intern(JSON.parse(texts[0] ?? ""));
    const measured = measuredBytes(texts.length, (i) => interner.intern(JSON.parse(texts[i] ?? "")).document);
    const ratio = first.weight.ownBytes / measured;
    assert.ok(
      ratio >= 0.8 && ratio <= 2,
      `own ${first.weight.ownBytes} vs measured ${measured} (${ratio.toFixed(2)}×)`,
    );
    // The 100 operations are held once, not per subject.
    assert.ok(measured < (first.weight.shared[0]?.bytes ?? 0) / 20);
  });

  test("property: interning returns an equal document; equal entries become one instance, different ones never", () => {
    const interner = createPolicyInterner();
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 1, max: 6 }), fc.constantFrom("a", "b")), {
          minLength: 1,
          maxLength: 6,
        }),
        (shapes) => {
          const documents = shapes.map(([operations, subject]) => {
            const document = documentOf(`agent-${subject}`, operations);
            return {
              original: document,
              interned: interner.intern(JSON.parse(JSON.stringify(document))).document,
            };
          });
          for (const { original, interned } of documents) assert.deepEqual(interned, original);
          for (const one of documents)
            for (const other of documents) {
              const same = JSON.stringify(one.original.apis[0]) === JSON.stringify(other.original.apis[0]);
              assert.equal(one.interned.apis[0] === other.interned.apis[0], same);
            }
        },
      ),
    );
  });
});
