/**
 * parsePolicyDocument with a holder of `apis` sections (the sidecar's interner, in effect): a
 * section is filed only under the hash a parse reported for the bytes it parsed, and a later
 * text takes it only when its own bytes hash the same. Whatever the text, the result must be
 * what JSON.parse + validatePolicyDocument make of it (the same document, or a refusal).
 */
import assert from "node:assert/strict";
import { createHash, type Hash } from "node:crypto";
import { describe, it } from "node:test";
import fc from "fast-check";
import { canonicalJson } from "../../src/core/canonical-json.ts";
import {
  computePolicyHash,
  type KnownApis,
  POLICY_SCHEMA_V2,
  type PolicyApiEntry,
  type PolicyDocument,
  type PolicyValidationOptions,
  parsePolicyDocument,
  validatePolicyDocument,
} from "../../src/core/policy-document.ts";
import { entry, outcomeOf, policyV1, policyV2, snapshot } from "./fixtures.ts";

function sectionHolder() {
  const held = new Map<string, KnownApis>();
  /** The bytes each held section was parsed from, and SHA-256 run over them (heldApis). */
  const heldBytes: { readonly copy: Buffer; readonly sha256: Hash; readonly known: KnownApis }[] = [];
  const asked: string[] = [];
  const options: PolicyValidationOptions = {
    knownApis: (hash) => {
      asked.push(hash);
      return held.get(hash);
    },
    heldApis: (bytes) => {
      const found = heldBytes.find(({ copy }) => copy.equals(bytes));
      return found === undefined ? undefined : { ...found.known, sha256: found.sha256 };
    },
  };
  /** The exact bytes a verifier hands over (a string as its UTF-8). */
  const parse = (text: string | Uint8Array) => {
    const parsed = parsePolicyDocument(typeof text === "string" ? Buffer.from(text) : text, options);
    const { document, apisHash, apisSection } = parsed;
    if (apisHash !== undefined && !held.has(apisHash)) {
      const known = {
        apis: document.apis,
        ...(document.schema_version === POLICY_SCHEMA_V2 ? { policyHash: document.policy_hash } : {}),
      };
      held.set(apisHash, known);
      assert.ok(apisSection !== undefined, "a section filed under its hash comes with its bytes");
      heldBytes.push({ copy: Buffer.from(apisSection.bytes), sha256: apisSection.sha256, known });
    }
    return parsed;
  };
  return { held, asked, parse };
}

const sha256 = (text: string | Uint8Array) => `sha256:${createHash("sha256").update(text).digest("hex")}`;

const billing = entry([
  ["GET", "/users/{id}"],
  ["POST", "/invoices"],
]);
const payments = entry([["GET", "/payments/{id}"]], { capabilityId: "payments-api" });
/** The same capability and operation names as `billing`, other bytes (another upstream). */
const billingElsewhere = entry([["GET", "/users/{id}"]], {
  operations: [snapshot("GET", "/users/{id}", { upstream_url_template: "https://evil.example/users/{id}" })],
});

describe("parsePolicyDocument: an apis section known by its exact bytes", () => {
  it("a second document with a byte-identical section takes the held one without parsing it", () => {
    const holder = sectionHolder();
    const first = holder.parse(canonicalJson(policyV1([billing, payments])));
    assert.ok(first.apisHash !== undefined);
    const text = canonicalJson(
      policyV1([billing, payments], {
        subject: { subject_id: "agent-8", subject_type: "agent", display_name: "Other bot" },
      }),
    );
    const parsedTexts: string[] = [];
    const parse = JSON.parse;
    JSON.parse = (source: string, reviver?: Parameters<typeof parse>[1]) => {
      parsedTexts.push(source);
      return parse(source, reviver);
    };
    let second: ReturnType<typeof parsePolicyDocument>;
    holder.asked.length = 0;
    try {
      second = holder.parse(text);
    } finally {
      JSON.parse = parse;
    }
    // Found by its bytes: the section was not hashed (its hash never asked for) nor parsed.
    assert.deepEqual(holder.asked, []);
    assert.equal(second.document.apis, first.document.apis);
    assert.equal(second.document.subject.subject_id, "agent-8");
    assert.deepEqual(second.document, validatePolicyDocument(JSON.parse(text)));
    assert.equal(second.textHash, sha256(text));
    // Only the document around the section was parsed: no operation's bytes.
    assert.ok(parsedTexts.length > 0);
    assert.ok(!parsedTexts.some((parsed) => parsed.includes('"operations"')), parsedTexts.join("\n"));
  });

  it("is asked only for the hash of the text's own bytes: never a name, an id or a hash the document claims", () => {
    const holder = sectionHolder();
    const text = canonicalJson(policyV2([billing]));
    holder.parse(text);
    const end = text.lastIndexOf('],"') + 1;
    assert.deepEqual(holder.asked, [sha256(text.slice(0, end))]);
    const claimed = policyV2([billing]).policy_hash;
    assert.ok(!holder.asked.includes(claimed));
  });

  it("the same capability and operation names in other bytes are another section, decided by their own bytes", () => {
    const holder = sectionHolder();
    const known = holder.parse(canonicalJson(policyV1([billing])));
    const other = holder.parse(canonicalJson(policyV1([billingElsewhere])));
    assert.notEqual(other.document.apis, known.document.apis);
    assert.equal(
      other.document.apis[0]?.operations[0]?.upstream_url_template,
      "https://evil.example/users/{id}",
    );
    assert.equal(other.document.apis[0]?.allowed_permission_ids.length, 1);
  });

  it("a v2 document claiming a held section's policy_hash over other apis is refused", () => {
    const holder = sectionHolder();
    const known = holder.parse(canonicalJson(policyV2([billing])));
    assert.ok(known.document.schema_version === POLICY_SCHEMA_V2);
    const claiming = policyV2([billingElsewhere], { policy_hash: known.document.policy_hash });
    assert.throws(() => holder.parse(canonicalJson(claiming)), /policy_hash/);
    // And the held section with a wrong policy_hash is refused too.
    const wrong = policyV2([billing], { policy_hash: computePolicyHash([billingElsewhere]) });
    assert.throws(() => holder.parse(canonicalJson(wrong)), /policy_hash/);
  });

  it("a held section followed by a second `apis` key is read as JSON.parse reads it: the last one", () => {
    const holder = sectionHolder();
    holder.parse(canonicalJson(policyV1([billing])));
    const canonical = canonicalJson(policyV1([billing]));
    const text = `${canonical.slice(0, -1)},"apis":${canonicalJson([billingElsewhere])}}`;
    const parsed = holder.parse(text);
    assert.deepEqual(parsed.document, validatePolicyDocument(JSON.parse(text)));
    assert.equal(
      parsed.document.apis[0]?.operations[0]?.upstream_url_template,
      "https://evil.example/users/{id}",
    );
  });

  it("gives what JSON.parse and validatePolicyDocument give, for any sequence of texts (property)", () => {
    const entries: PolicyApiEntry[] = [billing, payments, billingElsewhere];
    const apisArb = fc
      .uniqueArray(fc.integer({ min: 0, max: entries.length - 1 }), { maxLength: 3 })
      .map((picks) => picks.map((i) => entries[i] as PolicyApiEntry));
    // Subject names that look like the split the parser looks for, or like JSON.
    const nameArb = fc.oneof(
      fc.string(),
      fc.constantFrom('],"apis":[]', '"],"expires_at":"x', "\\", "}", "é ☃ 𝄞"),
    );
    const documentArb = fc
      .tuple(fc.boolean(), apisArb, nameArb, fc.option(fc.constant("2026-01-01T00:00:00Z")))
      .map(([v2, apis, name, revokedAt]) => {
        const subject = { subject_id: "agent-1", subject_type: "agent", display_name: name };
        return v2
          ? policyV2(apis, { subject: { ...subject, subject_id: "ext-subject-1" }, revoked_at: revokedAt })
          : policyV1(apis, { subject, revoked_at: revokedAt });
      });
    const variantArb = fc.constantFrom(
      "canonical",
      "invalid-utf8",
      "spaced",
      "reordered",
      "second-apis",
      "flipped-byte",
      "wrong-hash",
      "array-after",
    );
    const textOf = (document: PolicyDocument, variant: string, seed: number): Buffer => {
      const text = textVariant(document, variant, seed);
      const bytes = Buffer.from(text);
      if (variant === "invalid-utf8") bytes[9 + (seed % Math.max(1, bytes.length - 10))] = 0xff;
      return bytes;
    };
    const textVariant = (document: PolicyDocument, variant: string, seed: number): string => {
      const canonical = canonicalJson(document);
      switch (variant) {
        case "spaced":
          return JSON.stringify(document, null, 1);
        case "reordered": {
          const { apis, ...rest } = document;
          return JSON.stringify({ ...rest, apis });
        }
        case "second-apis":
          return `${canonical.slice(0, -1)},"apis":${canonicalJson(entries.slice(seed % 3, 3))}}`;
        case "flipped-byte": {
          const at = 9 + (seed % Math.max(1, canonical.length - 10));
          const swapped = canonical[at] === "a" ? "b" : canonical[at] === "b" ? "a" : canonical[at];
          return canonical.slice(0, at) + swapped + canonical.slice(at + 1);
        }
        case "wrong-hash":
          return canonicalJson({ ...document, policy_hash: computePolicyHash(entries.slice(seed % 3)) });
        case "array-after":
          return `${canonical.slice(0, -1)},"extra":[1]}`;
        default:
          return canonical;
      }
    };
    fc.assert(
      fc.property(
        fc.array(fc.tuple(documentArb, variantArb, fc.nat()), { minLength: 1, maxLength: 8 }),
        (texts) => {
          const holder = sectionHolder();
          for (const [document, variant, seed] of texts) {
            const text = textOf(document, variant, seed);
            const expected = outcomeOf(() => validatePolicyDocument(JSON.parse(text.toString("utf8"))));
            let hash: string | undefined;
            const actual = outcomeOf(() => {
              const parsed = holder.parse(text);
              hash = parsed.textHash;
              return parsed.document;
            });
            assert.equal(actual.ok, expected.ok, `${variant}: ${text.toString("utf8", 0, 200)}`);
            if (actual.ok && expected.ok) {
              assert.deepEqual(actual.document, expected.document);
              assert.equal(hash, sha256(text));
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
