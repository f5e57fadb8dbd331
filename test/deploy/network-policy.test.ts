import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { isObj, type Obj } from "./helpers.ts";
import { renderChart } from "./rendered-pod.ts";

/**
 * The chart's NetworkPolicies read as the API server's network plugin reads them: does a
 * connection from a pod (its labels, its namespace's labels) to a pod of the release, on a
 * port, get in? The documented scrape — Prometheus in its own namespace, reaching the
 * authority's /metrics on 8080 — must, and nothing else may ride on it.
 */

type Labels = Record<string, string>;
interface Pod {
  readonly namespace: string;
  readonly labels: Labels;
}

const RELEASE_NAMESPACE = "authority-system";
const namespaceLabels: Record<string, Labels> = {
  [RELEASE_NAMESPACE]: {},
  monitoring: {},
  observability: { team: "sre" },
  shop: { "authority-injection": "enabled" },
};
const ns = (name: string): Labels => ({ "kubernetes.io/metadata.name": name, ...namespaceLabels[name] });

function selects(selector: unknown, labels: Labels): boolean {
  if (!isObj(selector)) return false;
  const matchLabels = (selector.matchLabels ?? {}) as Labels;
  const expressions = (selector.matchExpressions ?? []) as Array<{
    key: string;
    operator: string;
    values?: string[];
  }>;
  return (
    Object.entries(matchLabels).every(([k, v]) => labels[k] === v) &&
    expressions.every(({ key, operator, values = [] }) => {
      const value = labels[key];
      if (operator === "In") return value !== undefined && values.includes(value);
      if (operator === "NotIn") return value === undefined || !values.includes(value);
      if (operator === "Exists") return value !== undefined;
      if (operator === "DoesNotExist") return value === undefined;
      throw new Error(`operator ${operator}`);
    })
  );
}

function peerAdmits(peer: Obj, from: Pod): boolean {
  if (peer.ipBlock !== undefined) return false; // pod traffic here, not addresses
  const inNamespace =
    peer.namespaceSelector === undefined
      ? from.namespace === RELEASE_NAMESPACE
      : selects(peer.namespaceSelector, ns(from.namespace));
  const podMatches = peer.podSelector === undefined || selects(peer.podSelector, from.labels);
  return inNamespace && podMatches;
}

/** Whether the policies admit `from` to a pod with `targetLabels` in the release namespace on `port`. */
function admits(objects: readonly Obj[], targetLabels: Labels, port: number, from: Pod): boolean {
  const policies = objects.filter(
    (o) => o.kind === "NetworkPolicy" && isObj(o.spec) && selects(o.spec.podSelector, targetLabels),
  );
  assert.ok(policies.length > 0, "the target is isolated by some policy");
  return policies.some((policy) =>
    (((policy.spec as Obj).ingress ?? []) as Obj[]).some((rule) => {
      const ports = (rule.ports ?? []) as Array<{ port?: number }>;
      const from_ = (rule.from ?? []) as Obj[];
      return (
        (ports.length === 0 || ports.some((p) => p.port === port)) &&
        (from_.length === 0 || from_.some((peer) => peerAdmits(peer, from)))
      );
    }),
  );
}

const component = (name: string): Labels => ({
  "app.kubernetes.io/name": "authority",
  "app.kubernetes.io/instance": "authority",
  "app.kubernetes.io/component": name,
});
const server = component("server");
const prometheus: Pod = { namespace: "monitoring", labels: { "app.kubernetes.io/name": "prometheus" } };

describe("NetworkPolicy and the Prometheus scrape", () => {
  it("admits the default scrape: Prometheus in namespace monitoring to the authority's metrics port", async () => {
    const objects = await renderChart(["--set", "redis.enabled=true"]);
    assert.equal(admits(objects, server, 8080, prometheus), true);
    // the rest of the default policy stands: the release namespace and injected namespaces
    assert.equal(admits(objects, server, 8080, { namespace: RELEASE_NAMESPACE, labels: {} }), true);
    assert.equal(admits(objects, server, 8080, { namespace: "shop", labels: {} }), true);
  });

  it("admits nothing else through the scrape rule", async () => {
    const objects = await renderChart(["--set", "redis.enabled=true"]);
    // another pod of the monitoring namespace, Prometheus in another namespace, another port
    assert.equal(admits(objects, server, 8080, { namespace: "monitoring", labels: { app: "x" } }), false);
    assert.equal(admits(objects, server, 8080, { ...prometheus, namespace: "observability" }), false);
    assert.equal(admits(objects, server, 9090, prometheus), false);
    assert.equal(admits(objects, component("redis"), 6379, prometheus), false);
  });

  it("takes the scrape source from networkPolicy.scrapeFrom", async () => {
    const objects = await renderChart([
      "--set-json",
      'networkPolicy.scrapeFrom=[{"namespaceSelector":{"matchLabels":{"team":"sre"}},"podSelector":{"matchExpressions":[{"key":"app","operator":"In","values":["vmagent","prometheus"]}]}}]',
    ]);
    assert.equal(
      admits(objects, server, 8080, { namespace: "observability", labels: { app: "vmagent" } }),
      true,
    );
    assert.equal(admits(objects, server, 8080, prometheus), false);
  });

  it("admits no scrape with scrapeFrom empty, and refuses a peer that is not one", async () => {
    const objects = await renderChart(["--set-json", "networkPolicy.scrapeFrom=[]"]);
    assert.equal(admits(objects, server, 8080, prometheus), false);
    const policy = objects.find(
      (o) => o.kind === "NetworkPolicy" && selects((o.spec as Obj).podSelector, server),
    );
    assert.ok(policy !== undefined && isObj(policy.spec));
    assert.equal((policy.spec.ingress as Obj[]).length, 1);
    const error = await renderChart(["--set-json", 'networkPolicy.scrapeFrom=[{"podSelecter":{}}]']).then(
      () => "rendered",
      (e: { stderr?: string }) => String(e.stderr),
    );
    assert.match(error, /scrapeFrom/);
  });
});
