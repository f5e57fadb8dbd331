/**
 * Attacks on `apis` sections shared by their verified bytes (decision 3031), through the
 * sidecar's real interner (knownEntry and knownApis both from it, every accepted document
 * interned under the apisHash its parse reported, as the verified-policy cache does): whatever
 * bytes arrive, in whatever order and for whichever subjects, each result must be what
 * JSON.parse + validatePolicyDocument make of them, and the authority side's string path must
 * decide the same.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import fc from "fast-check";
import { canonicalJson } from "../../../src/core/canonical-json.ts";
import {
  type PolicyApiEntry,
  type PolicyDocument,
  type PolicyValidationOptions,
  parsePolicyDocument,
  validatePolicyDocument,
} from "../../../src/core/policy-document.ts";
import { PayloadPrefix, payloadDigest } from "../../../src/crypto/signed-blob.ts";
import { createPolicyInterner } from "../../../src/policy/cache/policy-interning.ts";
import { entry, outcomeOf, policyV1, policyV2, snapshot } from "../../core/fixtures.ts";

/** Loads that took a held section (the property must reach that path, not only the parse). */
let sectionsTaken = 0;
/** Loads offered a held SHA-512 prefix. */
let prefixesOffered = 0;
const sha256 = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

function sidecarLike() {
  const interner = createPolicyInterner();
  const options: PolicyValidationOptions = {
    knownEntry: (value) => interner.knownEntry(value),
    knownApis: (hash) => {
      const known = interner.knownApis(hash);
      if (known !== undefined) sectionsTaken++;
      return known;
    },
    heldApis: (bytes) => {
      const held = interner.heldApis(bytes);
      if (held !== undefined) sectionsTaken++;
      return held;
    },
  };
  /** Documents held, as the cache holds them (a held section lives while one holds it). */
  const holders: PolicyDocument[] = [];
  const load = (bytes: Uint8Array): PolicyDocument => {
    // The signature's payload digest from the section held for these bytes, if any: SHA-512 of them.
    const prefix = interner.heldPrefix(bytes);
    if (prefix !== undefined) prefixesOffered++;
    assert.deepEqual(PayloadPrefix.digest(bytes, prefix), payloadDigest(bytes));
    const parsed = parsePolicyDocument(bytes, options);
    assert.equal(parsed.textHash, sha256(bytes));
    const { document } = interner.intern(parsed.document, parsed.apisHash, parsed.apisSection);
    holders.push(document);
    return document;
  };
  return { interner, options, holders, load };
}

const billing = entry([
  ["GET", "/users/{id}"],
  ["POST", "/invoices"],
]);
const payments = entry([["GET", "/payments/{id}"]], { capabilityId: "payments-api" });
/** Strings ending right before the section's last `]` with a multi-byte character, or with `],`. */
const wide = {
  ...entry([["GET", "/wide/{id}"]], { capabilityId: "wide-api" }),
  auth_profile_ref: "ref-𝄞",
};
const bracketed = {
  ...entry([["GET", "/b/{id}"]], {
    capabilityId: "bracket-api",
    operations: [snapshot("GET", "/b/{id}", { auth_profile_ref: '],"apis":[]' })],
  }),
  auth_profile_ref: "x],",
};
const pool: PolicyApiEntry[] = [billing, payments, wide, bracketed];

/** Names that look like the split, JSON, or put multi-byte characters next to it. */
const stringArb = fc.oneof(
  fc.string({ maxLength: 8 }),
  fc.constantFrom("x],", '],"apis":[]', '"],"expires_at":"x', "é", "☃],", "𝄞", "\u2028", "\\", "}]"),
);

const documentArb = fc
  .record({
    v2: fc.boolean(),
    // a few sections, so that most loads find one held
    picks: fc.oneof(
      fc.constantFrom<number[]>([0, 1], [2, 3], [3], []),
      fc.uniqueArray(fc.integer({ min: 0, max: pool.length - 1 }), { maxLength: 4 }),
    ),
    subjectId: fc.constantFrom("agent-1", "agent-2", "agent-3", "x],"),
    name: stringArb,
    revoked: fc.option(fc.constant("2026-01-01T00:00:00Z")),
    expired: fc.boolean(),
  })
  .map(({ v2, picks, subjectId, name, revoked, expired }): PolicyDocument => {
    const apis = picks.map((i) => pool[i] as PolicyApiEntry);
    const extra = { revoked_at: revoked, ...(expired ? { expires_at: "2020-01-01T00:00:00Z" } : {}) };
    return v2
      ? policyV2(apis, {
          ...extra,
          subject_id: subjectId,
          subject: { subject_id: subjectId, subject_type: "external", display_name: name },
        })
      : policyV1(apis, {
          ...extra,
          subject: { subject_id: subjectId, subject_type: "agent", display_name: name },
        });
  });

/** Byte-level changes around the split (`end`: just after the section's last `]`). */
const variants = [
  "canonical",
  "invalid-before-split",
  "lead-byte-before-split",
  "lead-byte-after-split",
  "truncated-at-split",
  "section-of-other",
  "bom",
  "trailing-space",
] as const;

/** Mostly canonical bytes, so that sections are filed and taken; the others in between. */
const variantArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant("canonical" as const) },
  { weight: 6, arbitrary: fc.constantFrom(...variants) },
);

function bytesOf(
  document: PolicyDocument,
  variant: (typeof variants)[number],
  other: PolicyDocument,
): Buffer {
  const text = canonicalJson(document);
  const bytes = Buffer.from(text);
  const end = bytes.lastIndexOf('],"') + 1;
  const at = (index: number, inserted: number[]) =>
    Buffer.concat([bytes.subarray(0, index), Buffer.from(inserted), bytes.subarray(index)]);
  switch (variant) {
    case "invalid-before-split":
      return at(end - 1, [0xff]);
    case "lead-byte-before-split":
      return at(end - 2, [0xe2, 0x82]);
    case "lead-byte-after-split":
      return at(end + 2, [0xf0]);
    case "truncated-at-split":
      return bytes.subarray(0, end);
    case "section-of-other": {
      // this document's rest after another document's section
      const otherBytes = Buffer.from(canonicalJson(other));
      const otherEnd = otherBytes.lastIndexOf('],"') + 1;
      return Buffer.concat([otherBytes.subarray(0, otherEnd), bytes.subarray(end)]);
    }
    case "bom":
      return Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes]);
    case "trailing-space":
      return Buffer.concat([bytes, Buffer.from(" ")]);
    default:
      return bytes;
  }
}

describe("shared apis sections under attack (the real interner)", () => {
  it("every load equals JSON.parse + validatePolicyDocument, and the string path decides the same (property)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(documentArb, variantArb, documentArb), { minLength: 1, maxLength: 10 }),
        (loads) => {
          const sidecar = sidecarLike();
          const authority = createPolicyInterner();
          for (const [document, variant, other] of loads) {
            const bytes = bytesOf(document, variant, other);
            const text = bytes.toString("utf8");
            const expected = outcomeOf(() => validatePolicyDocument(JSON.parse(text)));
            const actual = outcomeOf(() => sidecar.load(bytes));
            const fromString = outcomeOf(
              () =>
                parsePolicyDocument(text, { knownEntry: (value) => authority.knownEntry(value) }).document,
            );
            const where = `${variant}: ${text.slice(0, 400)}`;
            assert.equal(actual.ok, expected.ok, where);
            assert.equal(fromString.ok, expected.ok, where);
            if (actual.ok && expected.ok && fromString.ok) {
              assert.deepEqual(actual.document, expected.document, where);
              assert.deepEqual(fromString.document, expected.document, where);
              // A record's document_hash binds the same text on both sides; only bytes that are
              // not UTF-8 (which no signer here writes) hash apart: the sidecar binds them as signed.
              if (Buffer.from(text).equals(bytes))
                assert.equal(parsePolicyDocument(text).textHash, sha256(bytes), where);
            }
          }
        },
      ),
      { numRuns: 400 },
    );
    assert.ok(sectionsTaken > 40, `held sections taken: ${sectionsTaken}`);
    assert.ok(prefixesOffered > 40, `held prefixes offered: ${prefixesOffered}`);
  });

  it("refuses what JSON.parse + validation refuse with the same error, short or deep texts too (property)", () => {
    const errorOf = (run: () => unknown): string => {
      try {
        run();
        return "none";
      } catch (error) {
        return error instanceof Error ? error.constructor.name : typeof error;
      }
    };
    const { options } = sidecarLike();
    const bytesArb = fc.oneof(
      fc
        .constantFrom("", "{", "{}", "[]", "1", '{"apis"', '{"apis":', '{"apis":[', '{"apis":[],"')
        .map((text) => Buffer.from(text)),
      fc.uint8Array({ maxLength: 12 }).map((bytes) => Buffer.from(bytes)),
      // nested past what a recursive walk (JSON.stringify of an entry looked up) can take
      fc
        .constantFrom(
          `{"apis":[${"[".repeat(1e5)}${"]".repeat(1e5)}],"schema_version":"authority-user-policy-v1"}`,
        )
        .map((text) => Buffer.from(text)),
    );
    fc.assert(
      fc.property(bytesArb, (bytes) => {
        const expected = errorOf(() => validatePolicyDocument(JSON.parse(bytes.toString("utf8"))));
        assert.equal(
          errorOf(() => parsePolicyDocument(bytes, options)),
          expected,
          JSON.stringify(bytes.toString()),
        );
      }),
      { numRuns: 300 },
    );
  });

  it("a held section is deep-frozen: one holder cannot change what another subject's decision reads", () => {
    const sidecar = sidecarLike();
    const first = sidecar.load(Buffer.from(canonicalJson(policyV1([billing, payments]))));
    const second = sidecar.load(
      Buffer.from(
        canonicalJson(
          policyV2([billing, payments], {
            subject_id: "agent-9",
            subject: { subject_id: "agent-9", subject_type: "external", display_name: "" },
          }),
        ),
      ),
    );
    assert.equal(second.apis, first.apis, "the section is shared");
    const apis = first.apis as PolicyApiEntry[];
    const held = apis[0] as { -readonly [K in keyof PolicyApiEntry]: PolicyApiEntry[K] };
    assert.throws(() => apis.push(payments), TypeError);
    assert.throws(() => {
      held.auth_profile_ref = "stolen";
    }, TypeError);
    assert.throws(() => {
      (held.allowed_permission_ids as string[]).push("billing-api:DELETE:/users/{id}");
    }, TypeError);
    assert.throws(() => {
      (held.operations[0] as { upstream_url_template: string }).upstream_url_template =
        "https://evil.example";
    }, TypeError);
    assert.deepEqual(second.apis, validatePolicyDocument(policyV1([billing, payments])).apis);
  });

  it("a section of the held one's length and last bytes, other bytes before, is decided by its own bytes", () => {
    const sidecar = sidecarLike();
    const upstream = (host: string) =>
      entry([["GET", "/users/{id}"]], {
        operations: [snapshot("GET", "/users/{id}", { upstream_url_template: `https://${host}/users/{id}` })],
      });
    const held = Buffer.from(canonicalJson(policyV1([upstream("api.example"), payments])));
    const other = Buffer.from(
      canonicalJson(
        policyV1([upstream("evl.example"), payments], {
          subject: { subject_id: "agent-2", subject_type: "agent", display_name: "" },
        }),
      ),
    );
    const end = held.lastIndexOf('],"') + 1;
    // The two sections: same length, same last 64 bytes, one byte apart well before them.
    assert.equal(other.lastIndexOf('],"') + 1, end);
    assert.ok(held.subarray(end - 64, end).equals(other.subarray(end - 64, end)));
    assert.ok(!held.subarray(0, end).equals(other.subarray(0, end)));
    sidecar.load(held);
    assert.ok(sidecar.interner.heldApis(held.subarray(0, end)) !== undefined);
    assert.equal(sidecar.interner.heldApis(other.subarray(0, end)), undefined);
    // The same look-up key offers the held SHA-512 prefix for the other bytes: src/crypto compares them.
    const prefix = sidecar.interner.heldPrefix(other);
    assert.ok(prefix !== undefined);
    assert.deepEqual(PayloadPrefix.digest(other, prefix), payloadDigest(other));
    assert.notDeepEqual(PayloadPrefix.digest(other, prefix), PayloadPrefix.digest(held, prefix));
    const loaded = sidecar.load(other);
    assert.deepEqual(loaded, validatePolicyDocument(JSON.parse(other.toString())));
    assert.equal(loaded.apis[0]?.operations[0]?.upstream_url_template, "https://evl.example/users/{id}");
  });

  it("a section collected and filed again is still decided by its own bytes", async () => {
    const gc = exposedGc();
    const sidecar = sidecarLike();
    const bytes = Buffer.from(canonicalJson(policyV1([billing])));
    const end = bytes.lastIndexOf('],"') + 1;
    const apisHash = sha256(bytes.subarray(0, end)) as `sha256:${string}`;
    sidecar.load(bytes);
    assert.ok(sidecar.interner.knownApis(apisHash) !== undefined);
    sidecar.holders.length = 0;
    for (let round = 0; round < 20 && sidecar.interner.knownApis(apisHash) !== undefined; round++) {
      await new Promise((resolve) => setImmediate(resolve));
      gc();
    }
    assert.equal(sidecar.interner.knownApis(apisHash), undefined, "collected once no document holds it");
    // filed again by a v2 document, then taken by a v1 one and a v2 one with a wrong policy_hash
    const v2 = policyV2([billing], {
      subject_id: "agent-2",
      subject: { subject_id: "agent-2", subject_type: "external", display_name: "" },
    });
    const again = sidecar.load(Buffer.from(canonicalJson(v2)));
    assert.equal(sidecar.interner.knownApis(apisHash)?.apis, again.apis);
    assert.deepEqual(sidecar.load(bytes), validatePolicyDocument(JSON.parse(bytes.toString())));
    const lying = canonicalJson({ ...v2, policy_hash: policyV2([payments]).policy_hash });
    assert.throws(() => sidecar.load(Buffer.from(lying)), /policy_hash/);
  });
});

/** V8's `gc` for this test: exposed through a fresh context (the flag is read when one is made). */
function exposedGc(): () => void {
  const global = globalThis as { gc?: () => void };
  if (typeof global.gc === "function") return global.gc;
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}
