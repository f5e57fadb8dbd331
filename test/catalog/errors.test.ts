import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { OpenApiImportError, ProblemList, sanitizeMessage, WarningList } from "../../src/catalog/errors.ts";
import { importLimits } from "../../src/catalog/limits.ts";

describe("import errors", () => {
  it("keeps the first line of a message and blanks local paths, not document pointers", () => {
    assert.equal(
      sanitizeMessage("Error opening file /work/main/schemas/x.yaml\n    at readFile (node:fs:1:1)"),
      "Error opening file <path>",
    );
    assert.equal(sanitizeMessage("cannot read file:///etc/passwd now"), "cannot read <path> now");
    assert.equal(sanitizeMessage("C:\\Users\\me\\spec.yaml missing"), "<path> missing");
    assert.equal(
      sanitizeMessage("`/paths/var/{id}/get` has a path parameter named `id`"),
      "`/paths/var/{id}/get` has a path parameter named `id`",
    );
    assert.equal(sanitizeMessage(""), "invalid document");
    assert.equal(sanitizeMessage("x".repeat(600)).length, 500);
  });

  it("collects problems once each, up to the limit", () => {
    const list = new ProblemList();
    list.add("/a", "bad");
    list.add("/a", "bad");
    assert.equal(list.size, 1);
    for (let i = 0; i < importLimits.maxProblems + 3; i++) list.add(`/p${i}`, "bad");
    const problems = list.toArray();
    assert.equal(problems.length, importLimits.maxProblems + 1);
    assert.deepEqual(problems.at(-1), { pointer: "", message: "... and 4 more problem(s)" });
    assert.throws(() => list.throwIfAny(), OpenApiImportError);
    assert.doesNotThrow(() => new ProblemList().throwIfAny());
  });

  it("deduplicates warnings and caps them", () => {
    const list = new WarningList();
    for (let i = 0; i < importLimits.maxWarnings + 2; i++) {
      list.add(`w${i}`);
      list.add(`w${i}`);
    }
    const warnings = list.toArray();
    assert.equal(warnings.length, importLimits.maxWarnings + 1);
    assert.equal(warnings.at(-1), "... and 2 more warning(s)");
  });

  it("carries frozen problems and no cause or stack in its JSON form", () => {
    const error = new OpenApiImportError([{ pointer: "/paths", message: "missing" }]);
    assert.ok(Object.isFrozen(error.problems));
    assert.equal(error.message, "The OpenAPI document is invalid. 1 problem(s).");
    const json = JSON.stringify(error);
    assert.doesNotMatch(json, /stack|at file:/);
  });
});
