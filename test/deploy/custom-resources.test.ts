import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Ajv } from "ajv";
import { customResourceErrors, loadCrdRegistry, structuralSchema } from "./crd-schemas.ts";
import { isObj, listRepoDir, loadYaml, loadYamlDocuments, type Obj } from "./helpers.ts";

/**
 * The custom resources the repo ships outside the chart — deploy/istio's Istio objects and
 * deploy/prometheus's rules as a PrometheusRule — against the CRDs of Istio and the
 * Prometheus operator, with unknown fields refused (crd-schemas.ts); and the structural reading
 * of a CRD schema itself. The chart's rendered custom resources are checked in helm.test.ts.
 */

const crds = loadCrdRegistry();
const istioDocs = listRepoDir("deploy/istio")
  .filter((f) => f.endsWith(".yaml"))
  .flatMap((f) => loadYamlDocuments(`deploy/istio/${f}`).map((doc) => ({ f, doc })));

/** istioctl reads an IstioOperator file itself; it is not a resource of the API server. */
const notApiResources = new Set(["install.istio.io/v1alpha1/IstioOperator"]);

const alertsAsPrometheusRule = (): Obj => ({
  apiVersion: "monitoring.coreos.com/v1",
  kind: "PrometheusRule",
  metadata: { name: "authority-sidecar", namespace: "monitoring" },
  spec: loadYaml("deploy/prometheus/alerts.yaml"),
});

const label = (doc: Obj): string => `${String(doc.apiVersion)}/${String(doc.kind)}`;

describe("deploy/istio against Istio's CRDs (istio.io/api)", () => {
  it("every Istio resource validates, with no unknown field", () => {
    const checked = istioDocs.filter(({ doc }) => !notApiResources.has(label(doc)));
    assert.deepEqual(checked.map(({ doc }) => doc.kind).sort(), ["AuthorizationPolicy", "ServiceEntry"]);
    for (const { f, doc } of checked) assert.deepEqual(customResourceErrors(crds, doc), [], f);
  });

  it("refuses an unknown field in each kind, at the top of spec and deep inside it", () => {
    for (const { f, doc } of istioDocs.filter(({ doc }) => !notApiResources.has(label(doc)))) {
      const top = structuredClone(doc) as { spec: Obj };
      top.spec.unknownField = 1;
      assert.ok(
        customResourceErrors(crds, top as unknown as Obj).includes('/spec: unknown field "unknownField"'),
        f,
      );
    }
    const policy = structuredClone(istioDocs.find(({ doc }) => doc.kind === "AuthorizationPolicy")?.doc) as {
      spec: { rules: Array<{ to: Array<{ operation: Obj }> }> };
    };
    const operation = policy.spec.rules[0]?.to[0]?.operation;
    assert.ok(operation);
    operation.notPath = ["/healthz"]; // a typo of notPaths: the API server would refuse it
    assert.deepEqual(customResourceErrors(crds, policy as unknown as Obj), [
      '/spec/rules/0/to/0/operation: unknown field "notPath"',
    ]);
    const entry = structuredClone(istioDocs.find(({ doc }) => doc.kind === "ServiceEntry")?.doc) as {
      spec: { ports: Obj[]; resolution: string };
    };
    entry.spec.resolution = "STATICALLY";
    assert.ok(
      customResourceErrors(crds, entry as unknown as Obj).some((e) => e.startsWith("/spec/resolution:")),
    );
  });

  it("a kind no CRD defines is named, not passed", () => {
    assert.deepEqual(
      customResourceErrors(crds, {
        apiVersion: "security.istio.io/v1",
        kind: "AuthorisationPolicy",
        spec: {},
      }),
      ["no CRD defines security.istio.io/v1 AuthorisationPolicy"],
    );
  });
});

describe("deploy/prometheus/alerts.yaml as a PrometheusRule (prometheus-operator's CRD)", () => {
  it("validates, with no unknown field", () => {
    assert.deepEqual(customResourceErrors(crds, alertsAsPrometheusRule()), []);
  });

  it("refuses an unknown field in a rule", () => {
    const rule = alertsAsPrometheusRule() as { spec: { groups: Array<{ rules: Obj[] }> } };
    const first = rule.spec.groups[0]?.rules[0];
    assert.ok(first);
    first.severity = "critical"; // belongs under labels
    assert.deepEqual(customResourceErrors(crds, rule as unknown as Obj), [
      '/spec/groups/0/rules/0: unknown field "severity"',
    ]);
  });
});

describe("a CRD schema read as a structural schema", () => {
  const crd = {
    type: "object",
    properties: {
      spec: {
        type: "object",
        properties: {
          port: { "x-kubernetes-int-or-string": true },
          labels: { type: "object", additionalProperties: { type: "string" } },
          config: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
          template: {
            type: "object",
            "x-kubernetes-embedded-resource": true,
            properties: { spec: { type: "object", properties: { replicas: { type: "integer" } } } },
          },
          empty: { type: "object" },
        },
      },
    },
  };
  const validate = new Ajv({ strict: false }).compile(structuralSchema(crd, true));
  const valid = (spec: Obj): boolean =>
    validate({ apiVersion: "x/v1", kind: "X", metadata: { name: "n" }, spec });

  it("declared fields pass; an unknown one is refused at the root, in spec and in an embedded object", () => {
    assert.equal(valid({ port: 80, labels: { a: "b" } }), true);
    assert.equal(validate({ apiVersion: "x/v1", kind: "X", spec: {}, extra: 1 }), false);
    assert.equal(valid({ prot: 80 }), false);
    assert.equal(
      valid({ template: { apiVersion: "v1", kind: "Pod", metadata: {}, spec: { replicas: 1 } } }),
      true,
    );
    assert.equal(valid({ template: { spec: { replicas: 1, replica: 1 } } }), false);
  });

  it("an object with no declared fields keeps none (pruned, so refused)", () => {
    assert.equal(valid({ empty: {} }), true);
    assert.equal(valid({ empty: { anything: 1 } }), false);
  });

  it("honours x-kubernetes-preserve-unknown-fields, maps and x-kubernetes-int-or-string", () => {
    assert.equal(valid({ config: { anything: { nested: [1, "two"] } } }), true);
    assert.equal(valid({ labels: { "any.key/name": "v" } }), true);
    assert.equal(valid({ labels: { k: 1 } }), false);
    assert.equal(valid({ port: "http" }), true);
    assert.equal(valid({ port: 8080 }), true);
    assert.equal(valid({ port: true }), false);
  });

  it("keeps no Kubernetes extension keyword for ajv to ignore silently", () => {
    const text = JSON.stringify(structuralSchema(crd, true));
    assert.doesNotMatch(text, /x-kubernetes-/);
    assert.ok(isObj(JSON.parse(text)));
  });
});
