import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  base32,
  deriveExternalSubject,
  deriveSubjectId,
  externalSubjectHash,
  issuerHash,
  newEvidenceId,
} from "../../src/bindings/derive.ts";

describe("derive", () => {
  it("encodes base32 as RFC 4648 (lower case, no padding)", () => {
    const vectors: Array<[string, string]> = [
      ["", ""],
      ["f", "my"],
      ["fo", "mzxq"],
      ["foo", "mzxw6"],
      ["foob", "mzxw6yq"],
      ["fooba", "mzxw6ytb"],
      ["foobar", "mzxw6ytboi"],
    ];
    for (const [input, expected] of vectors) assert.equal(base32(Buffer.from(input)), expected);
  });

  it("derives one stable subject id per (binding, issuer, subject)", () => {
    const id = deriveSubjectId("b1", "https://idp.example", "user-1");
    assert.match(id, /^ext_[a-z2-7]{32}$/);
    assert.equal(deriveSubjectId("b1", "https://idp.example", "user-1"), id);
    const others = new Set([
      deriveSubjectId("b2", "https://idp.example", "user-1"),
      deriveSubjectId("b1", "https://idp.example/", "user-1"),
      deriveSubjectId("b1", "https://idp.example", "user-2"),
      // Parts cannot be shifted into one another.
      deriveSubjectId("b1\n", "https://idp.example", "user-1"),
    ]);
    assert.equal(others.size, 4);
    assert.ok(!others.has(id));
  });

  it("hashes issuer and external subject as sha256 references", () => {
    assert.equal(
      issuerHash("abc"),
      "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    assert.equal(externalSubjectHash("abc"), issuerHash("abc"));
  });

  it("builds the v2 context from the binding and the verified token only", () => {
    const derived = deriveExternalSubject(
      { binding_id: "b1", partner_id: "p1", mapping_version: "7" },
      "https://idp.example",
      "user-1",
    );
    assert.deepEqual(derived.context, {
      partnerId: "p1",
      bindingId: "b1",
      issuerHash: issuerHash("https://idp.example"),
      externalSubjectHash: externalSubjectHash("user-1"),
      mappingVersion: "7",
    });
    assert.equal(derived.subjectId, deriveSubjectId("b1", "https://idp.example", "user-1"));
  });

  it("makes evidence ids that sort by time", () => {
    const a = newEvidenceId(new Date(1_000));
    const b = newEvidenceId(new Date(2_000_000_000_000));
    assert.match(a, /^ev_[0-9a-z]{10}[0-9a-f]{16}$/);
    assert.ok(a < b);
  });
});
