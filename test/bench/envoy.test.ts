import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { benchEnvoy, type ColumnFigures, DECISION_REQUESTS, envoyTables } from "../../bench/envoy.ts";
import { machineFacts, renderReport } from "../../bench/report.ts";
import { BENCH_MODULES, ENVOY_QUICK } from "../../bench/run.ts";
import { projectTool } from "../helpers/peer-process.ts";

/**
 * The Envoy comparison of `make bench` in its smoke form (run.ts ENVOY_QUICK: 100 req/s for
 * half a second, one round) through the real Envoy, the real `authority sidecar` process and
 * the load generator: every figure the report carries is there and finite, every request was
 * answered 2xx (a bench that measured denials or errors would report nonsense silently), and
 * the rendered page carries them. The figures themselves are meaningless at these counts.
 */

const positive = (value: number, what: string) =>
  assert.ok(Number.isFinite(value) && value > 0, `${what} is ${value}`);

function assertMeasured(figures: ColumnFigures, withServer: boolean): void {
  const what = `${figures.name} (${figures.request})`;
  assert.ok(figures.requests > 0, `${what}: no request answered 2xx`);
  assert.equal(
    figures.failed,
    0,
    `${what}: ${figures.failed} requests failed or were not 2xx (by status: ${JSON.stringify(figures.statuses)})`,
  );
  positive(figures.p50Ms, `${what} p50`);
  positive(figures.p99Ms, `${what} p99`);
  assert.ok(figures.p99Ms >= figures.p50Ms, `${what}: p99 below p50`);
  positive(figures.reqPerSec, `${what} req/s`);
  positive(figures.envoyCpuUsPerRequest, `${what} Envoy CPU per request`);
  positive(figures.envoyRssMb, `${what} Envoy RSS`);
  if (withServer) {
    positive(figures.authzCpuUsPerRequest, `${what} sidecar CPU per request`);
    positive(figures.authzRssMb, `${what} sidecar RSS`);
  } else {
    assert.ok(Number.isNaN(figures.authzCpuUsPerRequest), `${what}: no ext_authz server, yet CPU counted`);
  }
}

describe("make bench: Envoy alone vs Envoy's jwt_authn + rbac vs Envoy + sidecar (smoke counts)", () => {
  it("measures every column through one Envoy and renders every figure", { timeout: 120_000 }, async () => {
    assert.ok(
      BENCH_MODULES.some((module) => module.name === "envoy" && module.quick === true),
      "the Envoy module is in `make bench` and its --quick run",
    );
    const result = await benchEnvoy(ENVOY_QUICK);
    assert.match(result.envoyVersion, /^1\.40\./);
    assertMeasured(result.alone, false);
    // Envoy's own jwt_authn + rbac, the floor: measured like Envoy alone (no server beside it).
    assertMeasured(result.inProxy, false);
    // Every authorizing setup gave the policy's answer to every request of the decision set.
    assert.deepEqual(Object.keys(result.decisions.allowedBy), ["in_proxy", "sidecar"]);
    const policy = DECISION_REQUESTS.map((request) => request.allowed);
    assert.ok(policy.includes(true) && policy.includes(false), "the set holds allows and denies");
    for (const [setup, answers] of Object.entries(result.decisions.allowedBy))
      assert.deepEqual(answers, policy, `${setup} decides the decision set like the policy`);
    assert.deepEqual(
      result.columns.map((column) => column.name),
      ["Envoy + authority sidecar"],
    );
    for (const column of result.columns) assertMeasured(column, true);
    assertMeasured(result.extraChecks.checked, true);
    assertMeasured(result.extraChecks.plain, true);
    // The checked request's bytes to the operation without rules: allowed too, measured alike.
    assertMeasured(result.extraChecks.bare, true);
    assert.ok(Number.isFinite(result.extraChecks.cpuUsPerCheck), "the extra checks' cost is a number");
    const { paired } = result.extraChecks;
    assert.equal(paired.differencesUs.length, ENVOY_QUICK.checkPairs, "one difference per pair");
    for (const value of [paired.medianUs, paired.meanUs, paired.standardErrorUs, ...paired.differencesUs])
      assert.ok(Number.isFinite(value), `a paired figure is ${value}`);
    assert.ok(Number.isFinite(result.extraChecks.rulesCpuUsPerCheck), "the rules' cost is a number");

    const tables = envoyTables(result);
    assert.equal(tables.length, 5);
    const page = renderReport(
      { ...machineFacts(projectTool("envoy")), loadAtEnd: [0, 0, 0] },
      [{ name: "envoy", title: "Envoy", tables, seconds: 1 }],
      "make bench --quick",
    );
    for (const text of [
      "Envoy alone",
      "Envoy + jwt_authn + rbac (in-proxy)",
      "Envoy + authority sidecar",
      "Against the floor",
      "Same decisions",
      "added p50 (ms)",
      "(µs)",
      "Envoy 1.40.",
    ])
      assert.ok(page.includes(text), `the page lacks "${text}"`);
    for (const junk of ["NaN", "undefined", "Infinity", "null"])
      assert.ok(!page.includes(junk), `the page carries "${junk}"`);
  });
});
