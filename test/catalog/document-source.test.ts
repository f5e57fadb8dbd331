import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { readDocumentSource } from "../../src/catalog/document-source.ts";
import { OpenApiImportError } from "../../src/catalog/errors.ts";

function problemsOf(input: unknown, format?: "json" | "yaml") {
  try {
    readDocumentSource(input, format);
  } catch (error) {
    assert.ok(error instanceof OpenApiImportError);
    return error.problems;
  }
  assert.fail("expected a failure");
}

describe("reading document text", () => {
  it("detects JSON by its first character and YAML otherwise", () => {
    assert.deepEqual(readDocumentSource('  {"a": 1}', undefined), { a: 1 });
    assert.deepEqual(readDocumentSource("a: 1\nb: [x]\n", undefined), { a: 1, b: ["x"] });
    assert.deepEqual(readDocumentSource('{"a": 1}', "yaml"), { a: 1 });
  });

  it("reads YAML 1.2 core types only: no dates, no yes/no booleans, string keys", () => {
    assert.deepEqual(readDocumentSource("d: 2024-01-01\nflag: yes\n200: ok\nn: .inf\n", undefined), {
      d: "2024-01-01",
      flag: "yes",
      "200": "ok",
      n: null,
    });
  });

  it("reports YAML errors with their line", () => {
    assert.deepEqual(problemsOf("a: [1, 2\nb: 3\n"), [
      {
        pointer: "",
        message:
          "the document is not valid YAML (line 2, column 1): Flow sequence in block collection must be sufficiently indented and end with a ]",
      },
    ]);
  });

  it("allows a few YAML aliases and refuses merge keys", () => {
    assert.deepEqual(readDocumentSource("a: &x [1]\nb: *x\n", undefined), { a: [1], b: [1] });
    const merged = readDocumentSource("base: &b {x: 1}\nc:\n  <<: *b\n", undefined);
    assert.deepEqual(merged.c, { "<<": { x: 1 } });
  });

  it("points at duplicate keys inside nested JSON objects and arrays", () => {
    const text = '{"a": [{"k": 1}, {"k": 2, "k": 3}], "b~/c": {"x": 1, "x": 2}}';
    assert.deepEqual(problemsOf(text), [
      { pointer: "/a/1/k", message: 'duplicate key "k"' },
      { pointer: "/b~0~1c/x", message: 'duplicate key "x"' },
    ]);
    assert.deepEqual(readDocumentSource('{"s": "a\\"b{,}", "t": {"s": 1}}', undefined), {
      s: 'a"b{,}',
      t: { s: 1 },
    });
  });
});
