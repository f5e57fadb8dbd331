import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type DecisionInput, decide } from "../../src/core/decision.ts";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";
import { isAmbiguousSegmentValue, renderedRequestMatches } from "../../src/core/path-values.ts";
import type { PolicyDocument } from "../../src/core/policy-document.ts";
import { siblingSegments } from "../../src/core/segment-normalization.ts";
import { CAPABILITY_ID, capability, entry, NOW, pid, policyV1, snapshot } from "./fixtures.ts";

/** GET /things/{id} allowed; GET /things/me, DELETE /things/admin, GET /things/{id}/raw are its siblings. */
const thingsById = snapshot("GET", "/things/{id}");
const operations: OperationSnapshot[] = [
  thingsById,
  snapshot("GET", "/things/me"),
  snapshot("DELETE", "/things/admin"),
  snapshot("GET", "/things/{id}/raw"),
  snapshot("GET", "/things/{id}/raw/export"),
  snapshot("GET", "/stuff/{id}"),
];
const catalog = capability(operations);
const loaded = (document: PolicyDocument) => ({ ok: true as const, document });
const policy = policyV1([entry([["GET", "/things/{id}"]], { operations: [thingsById] })]);

function input(path: string, overrides: Partial<DecisionInput> = {}): DecisionInput {
  return {
    subjectId: "agent-7",
    capabilityId: CAPABILITY_ID,
    capability: catalog,
    policy: loaded(policy),
    method: "GET",
    path,
    now: NOW,
    ...overrides,
  };
}

const reasonOf = (path: string, overrides: Partial<DecisionInput> = {}): string => {
  const decision = decide(input(path, overrides));
  return decision.status === "denied" ? decision.reason : "allowed";
};

// The spellings of the issue: upstream frameworks route each of them to GET /things/me.
const routedToMe = [
  "/things/me;jsessionid=1",
  "/things/Me",
  "/things/ME",
  "/things/me.json",
  "/things/Me.JSON",
  "/things/me%20",
  "/things/me%09%20",
  "/things/me%2e",
  "/things/me.",
  "/things/me..",
  "/things/%EF%BD%8D%EF%BD%85", // full-width "ｍｅ"
  "/things/%EF%BC%AD%EF%BC%A5", // full-width "ＭＥ"
  "/things/me%252e", // "me%2e" once decoded: a second decode gives "me."
  "/things/m%E2%84%AF", // "mℯ" (script small e): NFKC "me"
  "/things/admin", // a sibling of any method (DELETE /things/admin)
  "/things/ADMIN%20",
  // Issue 26, item 8: what upstreams strip or map beside a literal sibling.
  "/things/me%E2%80%8B", // zero-width space
  "/things/m%C2%ADe", // soft hyphen
  "/things/me::$DATA", // NTFS alternate data stream
  "/things/me~",
  "/things/ME~1", // 8.3 short name
  "/things/me.json.bak", // a double extension
  "/things/adm%C4%B0n", // "admİn": Java equalsIgnoreCase
  "/things/%25C1%25ADe", // overlong "m" once decoded again
];

describe("path values: spellings another route could claim are ambiguous", () => {
  for (const path of routedToMe) {
    it(`denies ${path}`, () => {
      const reason = reasonOf(path);
      // Refused either by this rule or, earlier, by request-path normalization; never allowed.
      assert.ok(reason === "ambiguous_path" || reason === "unknown_operation", `${path}: ${reason}`);
      assert.notEqual(reason, "allowed");
    });
  }

  it("denies the issue's spellings with ambiguous_path itself", () => {
    for (const path of [
      "/things/me;jsessionid=1",
      "/things/Me",
      "/things/me.json",
      "/things/me%20",
      "/things/me%2e",
      "/things/%EF%BC%AD%EF%BC%A5",
    ]) {
      assert.equal(reasonOf(path), "ambiguous_path", path);
    }
  });

  it("denies separators, controls and dot segments inside a value, after one more decode too", () => {
    for (const path of [
      "/things/a;b",
      "/things/a%3Bb",
      "/things/a%253Bb",
      "/things/a%252Fb",
      "/things/a%253Fb",
      "/things/a%2523b",
      "/things/%252e%252e",
      "/things/%EF%BC%8E%EF%BC%8E", // full-width "．．": NFKC ".."
      "/things/a%EF%BC%8Fb", // full-width solidus: NFKC "/"
      "/things/...",
      "/things/%20",
    ]) {
      const reason = reasonOf(path);
      assert.ok(reason === "ambiguous_path" || reason === "unknown_operation", `${path}: ${reason}`);
    }
  });

  it("checks every parameter position against the siblings at that position", () => {
    // /things/{id}/raw vs nothing literal at position 1 of a 3-segment sibling: any id is fine.
    const rawPolicy = policyV1([
      entry([["GET", "/things/{id}/raw"]], { operations: [snapshot("GET", "/things/{id}/raw")] }),
    ]);
    assert.equal(reasonOf("/things/Me/raw", { policy: loaded(rawPolicy) }), "allowed");
    // /stuff/{id} has no literal sibling: "me" is an ordinary value there.
    const stuffPolicy = policyV1([
      entry([["GET", "/stuff/{id}"]], { operations: [snapshot("GET", "/stuff/{id}")] }),
    ]);
    assert.equal(reasonOf("/stuff/Me", { policy: loaded(stuffPolicy) }), "allowed");
    assert.equal(reasonOf("/stuff/me.json", { policy: loaded(stuffPolicy) }), "allowed");
  });
});

describe("path values: legitimate values still pass", () => {
  for (const path of [
    "/things/cus_00000001",
    "/things/john.doe",
    "/things/42",
    "/things/meh",
    "/things/me-too",
    "/things/mine.json",
    "/things/Jos%C3%A9",
    "/things/%E6%97%A5%E6%9C%AC", // 日本
    "/things/a%20b",
    "/things/user@example.com",
    "/things/100%25",
    "/things/~tilde",
  ]) {
    it(`allows ${path}`, () => assert.equal(reasonOf(path), "allowed"));
  }

  it("maps the literal sibling itself to its own operation (not allowed here)", () => {
    assert.equal(reasonOf("/things/me"), "operation_not_allowed");
  });
});

describe("path values: the snapshot's declared schema applies to concrete paths", () => {
  const constrained = snapshot("GET", "/things/{id}", {
    input_schema: {
      path: {
        type: "object",
        properties: { id: { type: "string", pattern: "^cus_[0-9]{8}$", maxLength: 12 } },
        required: ["id"],
      },
      query: { type: "object" },
      headers: { type: "object" },
      body: null,
    },
  });
  const constrainedPolicy = loaded(
    policyV1([entry([["GET", "/things/{id}"]], { operations: [constrained] })]),
  );

  it("allows a value that matches the pattern and denies one that does not", () => {
    assert.equal(reasonOf("/things/cus_00000001", { policy: constrainedPolicy }), "allowed");
    for (const path of ["/things/admin", "/things/cus_1", "/things/cus_000000011", "/things/CUS_00000001"]) {
      assert.equal(reasonOf(path, { policy: constrainedPolicy }), "ambiguous_path", path);
    }
  });

  it("treats the template's own placeholder as unrendered when the caller names the template", () => {
    assert.equal(reasonOf("/things/{id}", { policy: constrainedPolicy, pathIsTemplate: true }), "allowed");
    // A concrete request path that spells the placeholder is just a value, and fails the pattern.
    assert.equal(reasonOf("/things/{id}", { policy: constrainedPolicy }), "ambiguous_path");
    assert.equal(reasonOf("/things/%7Bid%7D", { policy: constrainedPolicy }), "ambiguous_path");
  });

  it("applies enum, const, integer type, bounds and uuid format", () => {
    const cases: Array<[Record<string, unknown>, string[], string[]]> = [
      [{ enum: ["red", "green"] }, ["red", "green"], ["blue", "Red"]],
      [{ const: 7 }, ["7"], ["8", "07"]],
      [{ type: "integer", minimum: 1, maximum: 100 }, ["1", "100"], ["0", "101", "1.5", "x"]],
      [
        { type: "string", format: "uuid" },
        ["3f1c6a70-8d3b-4c55-9a51-2e0f6b8f1a22"],
        ["3f1c6a70", "not-a-uuid"],
      ],
      [{ type: "string", minLength: 3 }, ["abc"], ["ab"]],
      // A pattern that does not compile makes the operation unusable: decision.test.ts.
    ];
    for (const [schema, good, bad] of cases) {
      const op = snapshot("GET", "/stuff/{id}", {
        input_schema: {
          path: { type: "object", properties: { id: schema } },
          query: { type: "object" },
          headers: { type: "object" },
          body: null,
        },
      });
      const p = loaded(policyV1([entry([["GET", "/stuff/{id}"]], { operations: [op] })]));
      for (const value of good) assert.equal(reasonOf(`/stuff/${value}`, { policy: p }), "allowed", value);
      for (const value of bad)
        assert.equal(reasonOf(`/stuff/${value}`, { policy: p }), "ambiguous_path", value);
    }
  });
});

describe("path values: mixed sibling segments", () => {
  const files = snapshot("GET", "/files/{id}");
  const mixedCatalog = capability([
    files,
    snapshot("GET", "/files/{name}.pdf"),
    snapshot("GET", "/files/v{n}"),
  ]);
  const filesPolicy = loaded(policyV1([entry([["GET", "/files/{id}"]], { operations: [files] })]));
  const reason = (path: string) => reasonOf(path, { capability: mixedCatalog, policy: filesPolicy });

  it("denies spellings a case-folding upstream routes to the mixed sibling", () => {
    for (const path of [
      "/files/report.PDF",
      "/files/V2",
      "/files/report.%EF%BD%90df",
      "/files/report.pdf%20",
    ]) {
      assert.equal(reason(path), "ambiguous_path", path);
    }
  });
  it("leaves the exact spellings to the mixed sibling's own permission and other values alone", () => {
    assert.equal(reason("/files/report.pdf"), "operation_not_allowed");
    assert.equal(reason("/files/readme"), "allowed");
    assert.equal(reason("/files/report.txt"), "allowed");
  });

  // Two mixed siblings: our matcher ranks them by literal characters, an upstream by its own
  // order, so a value that either could take (exactly or once reduced) is ambiguous.
  const versioned = snapshot("GET", "/files/v{n}");
  const versionedPolicy = loaded(policyV1([entry([["GET", "/files/v{n}"]], { operations: [versioned] })]));
  const versionedReason = (path: string) =>
    reasonOf(path, { capability: mixedCatalog, policy: versionedPolicy });
  it("denies a value a mixed sibling could take once an upstream strips an extension", () => {
    assert.equal(versionedReason("/files/v2.pdf.bak"), "ambiguous_path");
    assert.equal(versionedReason("/files/v2.pdf"), "operation_not_allowed"); // the sibling's own
    assert.equal(versionedReason("/files/v2"), "allowed");
    assert.equal(versionedReason("/files/v2.txt"), "allowed");
  });
});

describe("isAmbiguousSegmentValue", () => {
  const literals = siblingSegments(["me", "admin", "dž", "kit"]);
  it("folds case both ways and compatibility forms", () => {
    for (const value of [
      "ME",
      "mE",
      "Ǆ",
      "ǅ",
      "ǆ",
      "\u212Ait",
      "ＡＤＭＩＮ",
      "ADMIN",
      "adm\u0130n",
      "ad\u200Bmin",
    ]) {
      assert.ok(isAmbiguousSegmentValue(value, literals), value);
    }
  });
  it("never accepts an empty value", () => assert.ok(isAmbiguousSegmentValue("")));
  it("accepts ordinary values with no sibling at all", () => {
    for (const value of ["me", "ME", "me.json", "x y", "José"]) assert.ok(!isAmbiguousSegmentValue(value));
  });
});

describe("renderedRequestMatches", () => {
  const base = { capability: catalog, permissionId: pid("GET", "/things/{id}"), operation: thingsById };
  it("is true only when the rendered path maps back to the allowed permission with clean values", () => {
    assert.ok(renderedRequestMatches({ ...base, method: "GET", path: "/things/cus_00000001" }));
    assert.ok(!renderedRequestMatches({ ...base, method: "GET", path: "/things/me" }));
    assert.ok(!renderedRequestMatches({ ...base, method: "GET", path: "/things/Me" }));
    assert.ok(!renderedRequestMatches({ ...base, method: "GET", path: "/things/a%2Fb" }));
    assert.ok(!renderedRequestMatches({ ...base, method: "GET", path: "/things/x/raw" }));
    assert.ok(!renderedRequestMatches({ ...base, method: "POST", path: "/things/x" }));
  });
});
