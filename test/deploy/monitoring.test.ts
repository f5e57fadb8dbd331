import assert from "node:assert/strict";
import { readlinkSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";
import { createMetricsRegistry } from "../../src/observability/metrics.ts";
import { type PeerProcess, startPeerProcess } from "../helpers/peer-process.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { loadReview } from "../servers/inject/fixtures.ts";
import { httpsRequest, selfSignedCert } from "../servers/inject/tls.ts";
import { type SidecarHandle, startWorld, type World } from "../servers/sidecar/world.ts";
import { at, isObj, type Obj, readRepoFile } from "./helpers.ts";
import { exportedSeries, grafanaQuerySelectors, type Selector, selectorsOf } from "./promql.ts";
import { renderChart } from "./rendered-pod.ts";

/**
 * What the monitoring the project ships (files/alerts.yaml, also deploy/prometheus/alerts.yaml
 * and the chart's PrometheusRule; files/grafana-dashboard.json, the chart's dashboard
 * ConfigMap) asks of Prometheus is what the processes export: every series selector of every
 * rule and every dashboard query names a series read from the /metrics of a started sidecar,
 * authority service and `authority inject` process, with label matchers on labels that series
 * carries (or the scrape's own job, namespace, pod, instance), job values the scrape configs
 * set, and route values the processes report. promtool.test.ts runs promtool on the rules.
 */

const bin = fileURLToPath(new URL("../../bin/authority.ts", import.meta.url));
const JOBS = ["authority-service", "authority-injector", "authority-sidecars"];
/** Labels the scrape adds (deploy/prometheus/scrape.yaml's relabelings, the Operator's monitors). */
const TARGET_LABELS = new Set(["job", "instance", "namespace", "pod"]);

type Exported = Map<string, Map<string, Set<string>>>;

const alerts = parse(readRepoFile("charts/authority/files/alerts.yaml")) as {
  groups: Array<{ name: string; rules: Obj[] }>;
};
const rules = alerts.groups.flatMap((group) => group.rules);
const dashboardText = readRepoFile("charts/authority/files/grafana-dashboard.json");
const dashboard = JSON.parse(dashboardText) as Obj;

/** Every PromQL query of the dashboard: panel targets and templating variables. */
function dashboardQueries(): Array<{ where: string; selectors: Selector[] }> {
  const panels = (dashboard.panels ?? []) as Obj[];
  const fromPanels = panels.flatMap((panel) =>
    ((panel.targets ?? []) as Obj[]).map((target) => ({
      where: `panel "${String(panel.title)}"`,
      selectors: selectorsOf(String(target.expr)),
    })),
  );
  const variables = (at(dashboard, ["templating", "list"]) ?? []) as Obj[];
  const fromVariables = variables
    .filter((v) => v.type === "query")
    .map((v) => ({
      where: `variable ${String(v.name)}`,
      selectors: grafanaQuerySelectors(String(isObj(v.query) ? v.query.query : v.query)),
    }));
  return [...fromPanels, ...fromVariables];
}

const ruleQueries = (): Array<{ where: string; selectors: Selector[] }> =>
  rules.map((rule) => ({ where: `alert ${String(rule.alert)}`, selectors: selectorsOf(String(rule.expr)) }));

/** The problems of one query's selectors against what the processes export ([] when none). */
function problems(where: string, selectors: readonly Selector[], exported: Exported): string[] {
  const out: string[] = [];
  for (const { metric, matchers } of selectors) {
    const labels = metric === "up" ? new Map<string, Set<string>>() : exported.get(metric);
    if (labels === undefined) {
      out.push(`${where}: ${metric} is not exported`);
      continue;
    }
    for (const { label, op, value } of matchers) {
      if (!labels.has(label) && !TARGET_LABELS.has(label)) {
        out.push(`${where}: ${metric} has no label ${label}`);
        continue;
      }
      // Literal alternatives of a job or route matcher must be values that exist.
      const literal = /^[-/:a-z0-9_]+(\|[-/:a-z0-9_]+)*$/i.test(value) && op !== "!=" && op !== "=";
      const alternatives = op === "=" || op === "!=" ? [value] : literal ? value.split("|") : [];
      if (label === "job") {
        for (const job of alternatives) if (!JOBS.includes(job)) out.push(`${where}: no scrape job ${job}`);
      } else if (label === "route") {
        const seen = labels.get("route") ?? new Set();
        for (const route of alternatives)
          if (!seen.has(route)) out.push(`${where}: ${metric} has no route ${route}`);
      }
    }
  }
  return out;
}

describe("alerts and dashboard against the /metrics of started processes", () => {
  let world: World;
  let sidecar: SidecarHandle;
  let injector: PeerProcess;
  let dir: TempDir;
  const exported: Exported = new Map();

  const merge = (text: string): void => {
    for (const [name, labels] of exportedSeries(text)) {
      const into = exported.get(name) ?? new Map<string, Set<string>>();
      for (const [label, values] of labels) into.set(label, new Set([...(into.get(label) ?? []), ...values]));
      exported.set(name, into);
    }
  };

  before(async () => {
    dir = await makeTempDir("monitoring-");
    world = await startWorld({ redis: true });
    // the registry `authority sidecar` builds: process defaults included
    sidecar = await world.startSidecar({ registry: createMetricsRegistry() });
    assert.equal((await sidecar.check({})).http_response, "ok_response");
    assert.equal((await sidecar.check({ token: null })).http_response, "denied_response");
    // a labelled series shows its labels once it has a sample: wait for the records' delivery
    let text = await sidecar.metricsText();
    while (!/^authority_sidecar_audit_records_total\{/m.test(text)) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      text = await sidecar.metricsText();
    }
    merge(text);

    // the authority service, after a request on each route the rules name
    for (const path of [
      "/healthz",
      "/v1/sidecar/decisions",
      "/v1/bindings/b/invoke",
      "/v1/broker/execute",
      "/mcp",
    ]) {
      await fetch(`${world.authorityUrl}${path}`, { method: path === "/healthz" ? "GET" : "POST" }).then(
        (r) => r.arrayBuffer(),
      );
    }
    merge(await fetch(`${world.authorityUrl}/metrics`).then((r) => r.text()));

    // `authority inject` as the chart runs it, after an admission review on each webhook path
    const tls = await selfSignedCert();
    await writeFile(join(dir.path, "tls.crt"), tls.cert);
    await writeFile(join(dir.path, "tls.key"), tls.key, { mode: 0o600 });
    injector = startPeerProcess({
      command: process.execPath,
      args: [bin, "inject", "--listen", "127.0.0.1:0", "--sidecar-image", "registry.example.com/authority:1"],
      env: {
        PATH: process.env.PATH ?? "",
        AUTHORITY_TLS_CERT_FILE: join(dir.path, "tls.crt"),
        AUTHORITY_TLS_KEY_FILE: join(dir.path, "tls.key"),
      },
    });
    const url = await listeningUrl(injector);
    for (const path of ["/mutate", "/mutate/istio-namespace"]) {
      const answer = await httpsRequest(`${url}${path}`, {
        ca: tls.cert,
        method: "POST",
        body: JSON.stringify(loadReview("plain-pod")),
      });
      assert.equal(answer.status, 200);
    }
    const scraped = await httpsRequest(`${url}/metrics`, { ca: tls.cert });
    assert.equal(scraped.status, 200);
    merge(scraped.body);
  });
  after(async () => {
    await injector?.stop();
    await world?.close();
    await dir?.cleanup();
  });

  it("scraped every process: sidecar, authority service and injector series", () => {
    for (const name of [
      "authority_sidecar_decisions_total",
      "authority_http_requests_total",
      "authority_injector_http_requests_total",
      "authority_injector_admission_reviews_total",
      "authority_injector_tls_certificate_expiry_timestamp_seconds",
      "process_start_time_seconds",
    ]) {
      assert.ok(exported.has(name), name);
    }
    assert.deepEqual(
      [...(exported.get("authority_injector_admission_reviews_total")?.get("result") ?? [])],
      ["injected"],
    );
  });

  it("every alert names only exported series, labels, jobs and routes", () => {
    assert.ok(rules.length >= 14);
    const found = ruleQueries().flatMap(({ where, selectors }) => {
      assert.ok(selectors.length > 0, where);
      return problems(where, selectors, exported);
    });
    assert.deepEqual(found, []);
    // the authority service and the injector have alerts of their own, not only the sidecar
    const named = new Set(ruleQueries().flatMap(({ selectors }) => selectors.map((s) => s.metric)));
    for (const prefix of ["authority_sidecar_", "authority_http_", "authority_injector_"]) {
      assert.ok(
        [...named].some((name) => name.startsWith(prefix)),
        prefix,
      );
    }
  });

  it("every dashboard query names only exported series, labels, jobs and routes", () => {
    const queries = dashboardQueries();
    assert.ok(queries.length >= 15);
    const found = queries.flatMap(({ where, selectors }) => {
      assert.ok(selectors.length > 0, where);
      return problems(where, selectors, exported);
    });
    assert.deepEqual(found, []);
  });

  it("finds a misspelt series, a label a series lacks, an unknown job and an unknown route (the check is not vacuous)", () => {
    const check = (expr: string): string[] => problems("q", selectorsOf(expr), exported);
    assert.deepEqual(check("rate(authority_sidecar_decision_total[5m])"), [
      "q: authority_sidecar_decision_total is not exported",
    ]);
    assert.deepEqual(check('authority_sidecar_decisions_total{result="error"}'), [
      "q: authority_sidecar_decisions_total has no label result",
    ]);
    assert.deepEqual(check('up{job="authority-sidecar"} == 0'), ["q: no scrape job authority-sidecar"]);
    assert.deepEqual(check('authority_http_requests_total{route!~"/mcp|/v1/invoke"}'), [
      "q: authority_http_requests_total has no route /v1/invoke",
    ]);
    assert.throws(() => selectorsOf('sum(rate({__name__="x"}[5m]))'), /without a metric name/);
  });
});

describe("one source for the alerts and the dashboard", () => {
  it("deploy/prometheus/alerts.yaml is the chart's files/alerts.yaml (a link, not a copy)", () => {
    assert.equal(
      readlinkSync(fileURLToPath(new URL("../../deploy/prometheus/alerts.yaml", import.meta.url))),
      "../../charts/authority/files/alerts.yaml",
    );
  });

  it("the chart's PrometheusRule is the file, and its dashboard ConfigMap holds the JSON", async () => {
    const objects = await renderChart([
      "--set",
      "metrics.prometheusRule.enabled=true",
      "--set",
      "metrics.grafanaDashboard.enabled=true",
    ]);
    const rule = objects.find((o) => o.kind === "PrometheusRule");
    assert.ok(rule !== undefined);
    assert.deepEqual(rule.spec, alerts);
    const map = objects.find(
      (o) => o.kind === "ConfigMap" && at(o, ["metadata", "labels", "grafana_dashboard"]) === "1",
    );
    assert.ok(map !== undefined);
    assert.deepEqual(JSON.parse(String(at(map, ["data", "authority.json"]))), dashboard);
  });

  it("renders neither by default", async () => {
    const objects = await renderChart([]);
    assert.equal(
      objects.some(
        (o) =>
          o.kind === "PrometheusRule" || at(o, ["metadata", "labels", "grafana_dashboard"]) !== undefined,
      ),
      false,
    );
  });

  it("every scrape sets one of the jobs the alerts name", async () => {
    const objects = await renderChart([
      "--set",
      "metrics.serviceMonitor.enabled=true",
      "--set",
      "metrics.podMonitor.enabled=true",
    ]);
    const monitors = objects.filter((o) => o.kind === "ServiceMonitor" || o.kind === "PodMonitor");
    const jobs = monitors.map((monitor) => {
      const endpoints = (at(monitor, ["spec", "endpoints"]) ??
        at(monitor, ["spec", "podMetricsEndpoints"])) as Obj[];
      const relabel = ((endpoints[0]?.relabelings ?? []) as Obj[]).find((r) => r.targetLabel === "job");
      return String(relabel?.replacement);
    });
    assert.deepEqual(jobs.sort(), [...JOBS].sort());
    const scrape = parse(readRepoFile("deploy/prometheus/scrape.yaml")) as { scrape_configs: Obj[] };
    assert.deepEqual(scrape.scrape_configs.map((job) => String(job.job_name)).sort(), [...JOBS].sort());
  });
});

/** The injector's URL from its "injector listening" log line. */
async function listeningUrl(peer: PeerProcess): Promise<string> {
  for (;;) {
    const match =
      /"url":"(https:\/\/[^"]+)"[^\n]*"msg":"injector listening"|"msg":"injector listening"[^\n]*"url":"(https:\/\/[^"]+)"/.exec(
        peer.output(),
      );
    const url = match?.[1] ?? match?.[2];
    if (url !== undefined) return url;
    if (!peer.running) throw new Error(`the injector exited: ${peer.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
