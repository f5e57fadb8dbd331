import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

/**
 * docs/request-paths.md against the code: every step's file exists and defines the named
 * function, its layer is its folder's, and each path's counts are those of its list.
 */

const repo = new URL("../../", import.meta.url).pathname;
const markdown = readFileSync(join(repo, "docs/request-paths.md"), "utf8");

interface Step {
  readonly file: string;
  readonly name: string;
  readonly layer: string;
}

interface RequestPath {
  readonly title: string;
  readonly steps: Step[];
  files?: number;
  crossings?: number;
  folderChanges?: number;
}

const STEP = /^\d+\. `(src\/[^`]+\.ts)` · `([A-Za-z_$][\w$]*)` · (entry|core|application [a-z-]+) — /;
const COUNTS = /^Files: (\d+)\. Layer crossings: (\d+)\. Folder changes: (\d+)\.$/;

function requestPaths(text: string): RequestPath[] {
  const paths: RequestPath[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("## ")) paths.push({ title: line.slice(3), steps: [] });
    const current = paths.at(-1);
    if (current === undefined) continue;
    const step = STEP.exec(line);
    if (step !== null) current.steps.push({ file: step[1] ?? "", name: step[2] ?? "", layer: step[3] ?? "" });
    else if (/^\d+\. /.test(line)) assert.fail(`a step not in the form file · function · layer: ${line}`);
    const counts = COUNTS.exec(line);
    if (counts !== null) {
      current.files = Number(counts[1]);
      current.crossings = Number(counts[2]);
      current.folderChanges = Number(counts[3]);
    }
  }
  return paths;
}

/** The layer of a file of src/, from its folder (CONTRIBUTING.md, "Layers"). */
function layerOf(file: string): string {
  const folder = file.split("/")[1] ?? "";
  if (["servers", "cli", "dev"].includes(folder)) return "entry";
  if (folder === "core") return "core";
  return `application ${folder}`;
}

function escaped(name: string): string {
  return name.replace(/\$/g, "\\$");
}

/** An exported or local function, a const, or an object method of that name. */
function defines(source: string, name: string): boolean {
  const n = escaped(name);
  return new RegExp(
    `(function\\s+${n}\\b|(const|let)\\s+${n}\\s*[=:]|^\\s*(async\\s+)?${n}\\s*\\([^)]*\\)[^;{]*\\{)`,
    "m",
  ).test(source);
}

const paths = requestPaths(markdown);

describe("docs/request-paths.md", () => {
  test("traces the ext_authz Check and the binding invoke", () => {
    assert.deepEqual(
      paths.map((path) => path.title),
      ["ext_authz Check (sidecar, gRPC)", "Binding invoke (authority, HTTP)"],
    );
    for (const path of paths) assert.ok(path.steps.length > 5, `${path.title} has its steps`);
  });

  for (const path of paths) {
    test(`${path.title}: every file defines the named function in the named layer`, () => {
      for (const step of path.steps) {
        const file = join(repo, step.file);
        assert.ok(existsSync(file), `${step.file} exists`);
        assert.ok(defines(readFileSync(file, "utf8"), step.name), `${step.file} defines ${step.name}`);
        assert.equal(step.layer, layerOf(step.file), `${step.file} is in layer ${layerOf(step.file)}`);
      }
    });

    test(`${path.title}: the counts are those of the list`, () => {
      const files = new Set(path.steps.map((step) => step.file)).size;
      const changes = (of: (step: Step) => string) =>
        path.steps.filter((step, i) => i > 0 && of(step) !== of(path.steps[i - 1] as Step)).length;
      const crossings = changes((step) => step.layer.split(" ")[0] ?? "");
      const folderChanges = changes((step) => step.layer);
      assert.deepEqual(
        { files: path.files, crossings: path.crossings, folderChanges: path.folderChanges },
        { files, crossings, folderChanges },
      );
    });
  }

  test("a Check runs the decision stages every path runs and its record step, in the application layer, crossing no more than it does", () => {
    const check = paths.find((path) => path.title.startsWith("ext_authz Check"));
    const invoke = paths.find((path) => path.title.startsWith("Binding invoke"));
    const named = (path: RequestPath | undefined) =>
      new Set(path?.steps.map((step) => `${step.file}#${step.name}`));
    // The one stage order (decision 2701): the same function on both paths.
    for (const shared of ["src/pipeline/decision.ts#decisionStages", "src/pipeline/decision.ts#decideStage"])
      assert.ok(named(check).has(shared) && named(invoke).has(shared), `both paths run ${shared}`);
    // Recording after the outcome is a step of the trace (decision 2701): made in the pipeline,
    // written ahead by the transport's journal.
    for (const step of [
      "src/pipeline/check-record.ts#auditedEngine",
      "src/pipeline/check-record.ts#shippedDecision",
      "src/servers/sidecar/decision-journal.ts#openDecisionJournal",
    ])
      assert.ok(named(check).has(step), `a Check lists ${step}`);
    // Issue 29 counted about 20 files and 8 crossings for a Check (decisions 2703, 2901): the
    // ceilings are today's counts, so neither grows back unnoticed.
    assert.ok((check?.crossings ?? Number.POSITIVE_INFINITY) <= 4, `crossings ${check?.crossings}`);
    assert.ok((check?.files ?? Number.POSITIVE_INFINITY) <= 19, `files ${check?.files}`);
  });

  test("the checker refuses a name the file does not define", () => {
    const source = "export function real() {}\nconst local = () => 1;\n  method(a) {\n";
    assert.ok(defines(source, "real") && defines(source, "local") && defines(source, "method"));
    assert.ok(!defines(source, "missing") && !defines(source, "rea"));
  });
});
