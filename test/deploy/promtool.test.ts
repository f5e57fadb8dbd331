import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { statSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { stringify } from "yaml";
import { createMetricsRegistry } from "../../src/observability/metrics.ts";
import { parseSidecarSettings } from "../../src/servers/inject/settings.ts";
import { createWebhookServer } from "../../src/servers/inject/webhook-server.ts";
import { makeTempDir } from "../helpers/temp-dir.ts";
import { loadReview } from "../servers/inject/fixtures.ts";
import { httpsRequest, selfSignedCert } from "../servers/inject/tls.ts";
import { eventually, type SidecarHandle, startWorld, type World } from "../servers/sidecar/world.ts";
import { isObj, listRepoDir, loadYamlDocuments, repoPath } from "./helpers.ts";

/**
 * promtool (Debian's prometheus package; scripts/ensure-test-peers.sh installs it) on what the
 * project ships for Prometheus: every rules file, the alerts' unit tests
 * (alerts.promtool-test.yaml), and the metrics a real sidecar exposes.
 * The sidecar's and the authority service's /metrics are read from running servers.
 */

function promtool(args: string[], stdin?: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("promtool", args, { stdio: ["pipe", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    child.on("error", (error) =>
      reject(
        new Error(
          `promtool (Debian package prometheus) is not installed: run scripts/ensure-test-peers.sh (${error.message})`,
        ),
      ),
    );
    child.on("close", (code) => resolve({ code: code ?? -1, output }));
    child.stdin.end(stdin ?? "");
  });
}

/** Every YAML file under deploy/ and charts/ (not templates) that is a Prometheus rules file. */
function rulesFiles(): string[] {
  const walk = (dir: string): string[] =>
    listRepoDir(dir).flatMap((entry) => {
      const path = `${dir}/${entry}`;
      if (statSync(repoPath(path)).isDirectory()) return entry === "templates" ? [] : walk(path);
      return /\.ya?ml$/.test(entry) ? [path] : [];
    });
  return [...walk("deploy"), ...walk("charts")].filter((file) =>
    loadYamlDocuments(file).some((doc) => isObj(doc) && Array.isArray(doc.groups)),
  );
}

describe("promtool check rules", () => {
  it("passes for every rules file under deploy/ and charts/", async () => {
    const files = rulesFiles();
    assert.ok(files.includes("deploy/prometheus/alerts.yaml"), files.join(", "));
    for (const file of files) {
      const { code, output } = await promtool(["check", "rules", repoPath(file)]);
      assert.equal(code, 0, output);
      assert.match(output, /SUCCESS: [1-9]\d* rules found/, file);
    }
  });

  it("fails on a broken rule (so the check above is not vacuous)", async () => {
    const { code } = await promtool(
      ["check", "rules", "/dev/stdin"],
      "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: rate(x[5m]\n",
    );
    assert.notEqual(code, 0);
  });
});

describe("promtool test rules", () => {
  it("passes test/deploy/alerts.promtool-test.yaml: guarded alerts stay silent on a few events and fire on failures", async () => {
    const { code, output } = await promtool([
      "test",
      "rules",
      repoPath("test/deploy/alerts.promtool-test.yaml"),
    ]);
    assert.equal(code, 0, output);
    assert.match(output, /SUCCESS/);
  });

  it("fails when an expected alert does not fire (so the test above is not vacuous)", async () => {
    const dir = await makeTempDir("promtool-test-");
    try {
      const file = join(dir.path, "t.yaml");
      await writeFile(
        file,
        stringify({
          rule_files: [repoPath("charts/authority/files/alerts.yaml")],
          tests: [
            {
              interval: "1m",
              input_series: [{ series: 'up{job="authority-injector"}', values: "1x10" }],
              alert_rule_test: [
                {
                  eval_time: "5m",
                  alertname: "AuthorityInjectorDown",
                  exp_alerts: [{ exp_labels: { severity: "critical" } }],
                },
              ],
            },
          ],
        }),
      );
      const { code, output } = await promtool(["test", "rules", file]);
      assert.notEqual(code, 0);
      assert.match(output, /AuthorityInjectorDown/);
    } finally {
      await dir.cleanup();
    }
  });
});

describe("promtool check metrics", () => {
  let world: World;
  let sidecar: SidecarHandle;

  before(async () => {
    world = await startWorld({ redis: true });
    // the registry the sidecar builds when started by `authority sidecar`: process defaults included
    sidecar = await world.startSidecar({ registry: createMetricsRegistry() });
    // series with labels exist only once requests were decided: an allow and a deny
    // (a first Check on a loaded machine can miss its decision deadline: the series are what matters)
    assert.ok(await eventually(async () => (await sidecar.check({})).http_response === "ok_response"));
    assert.equal((await sidecar.check({ token: null })).http_response, "denied_response");
  });
  after(() => world?.close());

  it("passes on the sidecar's real /metrics output", async () => {
    const text = await sidecar.metricsText();
    assert.match(text, /^authority_sidecar_/m);
    assert.match(text, /^process_resident_memory_bytes /m);
    const { code, output } = await promtool(["check", "metrics"], text);
    assert.equal(output.trim(), "");
    assert.equal(code, 0);
  });

  it("passes on the authority service's real /metrics output", async () => {
    // a few requests first, so the per-route series exist
    await fetch(`${world.authorityUrl}/healthz`).then((r) => r.arrayBuffer());
    await fetch(`${world.authorityUrl}/partners`).then((r) => r.arrayBuffer());
    const text = await fetch(`${world.authorityUrl}/metrics`).then((r) => r.text());
    assert.match(text, /^authority_/m);
    const { code, output } = await promtool(["check", "metrics"], text);
    assert.equal(output.trim(), "");
    assert.equal(code, 0);
  });

  it("passes on the injector's real /metrics output", async () => {
    const tls = await selfSignedCert();
    const webhook = createWebhookServer({
      tls,
      settings: parseSidecarSettings({}, { version: "0.1.0" }),
      metrics: createMetricsRegistry(),
    });
    try {
      const { url } = await webhook.listen("127.0.0.1", 0);
      const body = JSON.stringify(loadReview("plain-pod"));
      assert.equal((await httpsRequest(`${url}/mutate`, { ca: tls.cert, method: "POST", body })).status, 200);
      const text = (await httpsRequest(`${url}/metrics`, { ca: tls.cert })).body;
      assert.match(text, /^authority_injector_admission_reviews_total\{/m);
      const { code, output } = await promtool(["check", "metrics"], text);
      assert.equal(output.trim(), "");
      assert.equal(code, 0);
    } finally {
      await webhook.close();
    }
  });

  it("fails on a gauge named like a counter (so the check above is not vacuous)", async () => {
    const { code, output } = await promtool(
      ["check", "metrics"],
      "# HELP x_total a gauge\n# TYPE x_total gauge\nx_total 1\n",
    );
    assert.notEqual(code, 0);
    assert.match(output, /_total/);
  });
});
