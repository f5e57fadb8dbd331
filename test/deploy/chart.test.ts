import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Ajv } from "ajv";
import { sidecarSettingsSchema } from "../../src/servers/inject/settings.ts";
import { at, isObj, listRepoDir, loadYaml, mergeValues, readRepoFile } from "./helpers.ts";

/**
 * What can be checked about the chart without a helm binary: values against the schema,
 * template names and .Values paths against their definitions, block balance, and that the
 * settings the injector ConfigMap renders are the ones the injector accepts.
 */

const chart = "charts/authority";
const templateFiles = listRepoDir(`${chart}/templates`).filter((f) => /\.(ya?ml|tpl|txt)$/.test(f));
const templates = templateFiles.map((f) => ({ file: f, text: readRepoFile(`${chart}/templates/${f}`) }));
const defaults = loadYaml(`${chart}/values.yaml`);
const schema = JSON.parse(readRepoFile(`${chart}/values.schema.json`)) as Record<string, unknown>;
const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, strictTypes: false });
const validate = ajv.compile(schema);
const ciFiles = listRepoDir(`${chart}/ci`).filter((f) => f.endsWith("-values.yaml"));

const errorsOf = (values: unknown): string[] =>
  validate(values) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ""}`);
const withOverride = (override: unknown): unknown => mergeValues(structuredClone(defaults), override);

describe("Chart.yaml", () => {
  it("is a v2 application chart with an appVersion", () => {
    const meta = loadYaml(`${chart}/Chart.yaml`);
    assert.equal(at(meta, ["apiVersion"]), "v2");
    assert.equal(at(meta, ["name"]), "authority");
    assert.equal(at(meta, ["type"]), "application");
    assert.match(String(at(meta, ["version"])), /^\d+\.\d+\.\d+$/);
    const pkg = JSON.parse(readRepoFile("package.json")) as { version: string };
    assert.equal(at(meta, ["appVersion"]), pkg.version);
  });
});

describe("values.schema.json", () => {
  it("accepts values.yaml", () => {
    assert.deepEqual(errorsOf(defaults), []);
  });

  it("has the ci/ variants the brief lists", () => {
    for (const name of [
      "default",
      "bundled-redis",
      "cert-manager",
      "external-redis",
      "postgres",
      "crypto-custody",
      "managed-custody",
    ]) {
      assert.ok(ciFiles.includes(`${name}-values.yaml`), name);
    }
  });

  for (const file of ciFiles) {
    it(`accepts values.yaml merged with ci/${file}`, () => {
      assert.deepEqual(errorsOf(withOverride(loadYaml(`${chart}/ci/${file}`))), []);
    });
  }

  const invalid: Array<[string, unknown]> = [
    ["an unknown top-level key", { replicas: 3 }],
    ["an unknown nested key", { injector: { failurPolicy: "Fail" } }],
    ["a failurePolicy Kubernetes does not know", { injector: { failurePolicy: "Maybe" } }],
    ["a webhook timeout over 30 seconds", { injector: { timeoutSeconds: 31 } }],
    ["running as root", { containerSecurityContext: { runAsNonRoot: false } }],
    ["a writable root filesystem", { containerSecurityContext: { readOnlyRootFilesystem: false } }],
    [
      "added capabilities",
      { containerSecurityContext: { capabilities: { drop: ["ALL"], add: ["NET_ADMIN"] } } },
    ],
    ["several replicas on SQLite", { authority: { replicaCount: 3 } }],
    [
      "several embedded replicas on Redis without a shared KEK",
      {
        authority: { replicaCount: 2, store: { backend: "redis" }, policyProtection: { mode: "embedded" } },
        redis: { enabled: true },
      },
    ],
    [
      "several crypto-mode replicas on SQLite",
      { authority: { replicaCount: 2, policyProtection: { mode: "crypto", credentialsSecret: "c" } } },
    ],
    ["a policy protection mode that does not exist", { authority: { policyProtection: { mode: "kms" } } }],
    ["an unknown policy protection key", { authority: { policyProtection: { kekSecret: "k" } } }],
    ["the redis store without any Redis", { authority: { store: { backend: "redis" } } }],
    ["bundled and external Redis together", { redis: { enabled: true, externalUrl: "redis://r:6379/0" } }],
    ["an external Redis Secret the sidecars cannot read", { redis: { existingSecret: "authority-redis" } }],
    ["no cert-manager and no TLS Secret", { injector: { certManager: { enabled: false } } }],
    ["a sidecar port out of range", { sidecar: { ports: { grpc: 0 } } }],
    ["a non-http authority URL", { sidecar: { authorityUrl: "ftp://authority" } }],
    ["an Istio mode that does not exist", { sidecar: { istio: { mode: "sometimes" } } }],
    ["a bad image digest", { image: { digest: "latest" } }],
    ["an invalid resource quantity", { sidecar: { resources: { limits: { memory: "lots" } } } }],
    ["a repository with a tag in it", { image: { repository: "registry.example.com/authority:1.0" } }],
    ["an issuer that is not a URL", { authority: { issuer: "login.example.com" } }],
    ["a Redis volume size that is not a quantity", { redis: { persistence: { size: "big" } } }],
    [
      "a scrape source that is not a NetworkPolicyPeer",
      { networkPolicy: { scrapeFrom: [{ podSelecter: {} }] } },
    ],
    ["an empty scrape source peer (it would admit everything)", { networkPolicy: { scrapeFrom: [{}] } }],
    ["an unknown PrometheusRule key", { metrics: { prometheusRule: { enable: true } } }],
  ];
  for (const [what, override] of invalid) {
    it(`rejects ${what}`, () => {
      assert.notDeepEqual(errorsOf(withOverride(override)), [], what);
    });
  }

  it("accepts several replicas without a KEK in crypto and managed modes", () => {
    for (const mode of ["crypto", "managed"]) {
      const values = withOverride({
        authority: {
          replicaCount: 3,
          store: { backend: "redis" },
          policyProtection: { mode, credentialsSecret: "c" },
        },
        redis: { enabled: true },
      });
      assert.deepEqual(errorsOf(values), [], mode);
    }
  });

  it("rejects values with a required section removed", () => {
    assert.notDeepEqual(errorsOf(withOverride({ injector: null })), []);
  });
});

describe("chart templates", () => {
  const defined = new Set(
    templates.flatMap(({ text }) =>
      [...text.matchAll(/\{\{-?\s*define\s+"([^"]+)"/g)].map((m) => m[1] ?? ""),
    ),
  );

  it("define every name they include or template", () => {
    const used = templates.flatMap(({ file, text }) =>
      [...text.matchAll(/\b(?:include|template)\s+"([^"]+)"/g)].map((m) => ({ file, name: m[1] ?? "" })),
    );
    assert.ok(used.length > 20);
    const missing = used.filter((u) => !defined.has(u.name));
    assert.deepEqual(missing, []);
  });

  it("define the helpers the chart conventions expect", () => {
    for (const name of ["name", "fullname", "chart", "labels", "selectorLabels", "serviceAccountName"]) {
      assert.ok(defined.has(`authority.${name}`), name);
    }
  });

  it("only reference .Values paths that exist in values.yaml", () => {
    const missing: string[] = [];
    let count = 0;
    for (const { file, text } of templates) {
      for (const m of text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
        count++;
        const path = (m[1] ?? "").slice(1).split(".");
        let node: unknown = defaults;
        for (const key of path) {
          if (!isObj(node) || !Object.hasOwn(node, key)) {
            missing.push(`${file}: .Values.${path.join(".")}`);
            break;
          }
          node = node[key];
        }
      }
    }
    assert.ok(count > 50, `only ${count} references found`);
    assert.deepEqual(missing, []);
  });

  it("open and close their blocks in balance", () => {
    for (const { file, text } of templates) {
      const actions = [...text.matchAll(/\{\{-?\s*([a-z]+)\b/g)].map((m) => m[1]);
      const opened = actions.filter(
        (a) => a === "if" || a === "range" || a === "with" || a === "define",
      ).length;
      const closed = actions.filter((a) => a === "end").length;
      assert.equal(opened, closed, file);
      const comments = [...text.matchAll(/\{\{-?\s*\/\*/g)].length;
      assert.equal(comments, [...text.matchAll(/\*\/\s*-?\}\}/g)].length, `${file} comments`);
    }
  });

  it("render the MutatingWebhookConfiguration the brief asks for", () => {
    const webhook = readRepoFile(`${chart}/templates/injector-webhook.yaml`);
    for (const needle of [
      "kind: MutatingWebhookConfiguration",
      'admissionReviewVersions: ["v1"]',
      "sideEffects: None",
      "failurePolicy: {{ $.Values.injector.failurePolicy }}",
      "reinvocationPolicy: {{ $.Values.injector.reinvocationPolicy }}",
      "authority-injection: enabled",
      'authority.io/inject: "true"',
      "cert-manager.io/inject-ca-from:",
      "caBundle:",
      "path: {{ .path }}",
      '"path" "/mutate"',
      '"path" "/mutate/istio-namespace"',
    ]) {
      assert.ok(webhook.includes(needle), needle);
    }
    assert.equal(at(defaults, ["injector", "failurePolicy"]), "Fail");
    assert.equal(at(defaults, ["injector", "reinvocationPolicy"]), "IfNeeded");
  });

  it("keep every workload locked down", () => {
    const workloads = templates.filter(({ text }) => /^kind: Deployment$/m.test(text));
    assert.ok(workloads.length >= 3);
    for (const { file, text } of workloads) {
      assert.match(text, /automountServiceAccountToken: false/, file);
      assert.match(text, /emptyDir:/, file);
      assert.ok(
        text.includes('include "authority.containerSecurityContext"') ||
          text.includes("readOnlyRootFilesystem: true"),
        file,
      );
    }
    const sc = at(defaults, ["containerSecurityContext"]);
    assert.deepEqual(sc, {
      runAsNonRoot: true,
      runAsUser: 10001,
      runAsGroup: 10001,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    });
  });

  it("write only settings keys the injector accepts", () => {
    const configMap = readRepoFile(`${chart}/templates/injector-configmap.yaml`);
    const block = configMap.slice(configMap.indexOf("settings.yaml: |"));
    const keys = [...block.matchAll(/^ {4}([A-Za-z]+):/gm)].map((m) => m[1] ?? "");
    assert.ok(keys.length >= 10);
    const accepted = Object.keys(sidecarSettingsSchema.properties);
    assert.deepEqual(
      keys.filter((k) => !accepted.includes(k)),
      [],
    );
  });

  it("set only environment variables of docs/configuration.md", () => {
    const documented = new Set(
      [...readRepoFile("docs/configuration.md").matchAll(/`(AUTHORITY_[A-Z_]+)`/g)].map((m) => m[1]),
    );
    const used = new Set(
      templates.flatMap(({ text }) => [...text.matchAll(/\b(AUTHORITY_[A-Z_]+)\b/g)].map((m) => m[1])),
    );
    const unknown = [...used].filter((name) => name !== undefined && !documented.has(name));
    assert.deepEqual(unknown, []);
  });
});
