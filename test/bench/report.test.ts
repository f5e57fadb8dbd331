import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MachineFacts, pageSections, renderReport, type SectionReport } from "../../bench/report.ts";

const facts: MachineFacts = {
  date: "2026-11-29T00:00:00.000Z",
  cores: 2,
  cpuModel: "test",
  memoryGb: 1,
  kernel: "6",
  node: "v24",
  envoy: "1.40.0",
  loadAtStart: [1, 1, 1],
  loadAtEnd: [1, 1, 1],
};

const section = (name: string, value: number, measuredAt: string): SectionReport => ({
  name,
  title: `Module ${name}`,
  tables: [{ rows: [{ name: "row", p50Ms: value }] }],
  seconds: 1,
  measuredAt,
  loadAtStart: 0.5,
  cpuProbeMs: [16.7, 17.2],
});

describe("bench report: sections replaced one module at a time (make bench UPDATE=1)", () => {
  const order = ["alpha", "beta", "gamma"];
  const first = renderReport(
    facts,
    [section("alpha", 1, "2026-11-28T00:00:00Z"), section("beta", 2, "2026-11-28T00:00:00Z")],
    "make bench",
    { order },
  );

  it("marks every section with its module and lists modules never measured", () => {
    assert.deepEqual([...pageSections(first).keys()], ["alpha", "beta"]);
    assert.match(first, /Not measured yet: gamma/);
    assert.match(first, /measured 2026-11-28T00:00:00Z, load 0.5, CPU probe 16.7 → 17.2 ms/);
  });

  it("replaces the measured sections, keeps the others in module order", () => {
    const second = renderReport(
      facts,
      [section("gamma", 3, "2026-11-29T00:00:00Z"), section("alpha", 9, "2026-11-29T00:00:00Z")],
      "make bench",
      { order, previous: first },
    );
    const sections = pageSections(second);
    assert.deepEqual([...sections.keys()], ["alpha", "beta", "gamma"]);
    assert.match(sections.get("alpha") ?? "", /\| 9 /);
    assert.doesNotMatch(second, /\| 1 /);
    assert.equal(sections.get("beta"), pageSections(first).get("beta"));
    assert.doesNotMatch(second, /Not measured yet/);
  });
});
