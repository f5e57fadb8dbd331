import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { MutatingWebhookConfiguration } from "kubernetes-models/admissionregistration.k8s.io/v1";
import { Deployment } from "kubernetes-models/apps/v1";
import { Ingress, NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount } from "kubernetes-models/v1";
import { parseAllDocuments } from "yaml";
import { projectTool } from "../helpers/peer-process.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { type CrdRegistry, customResourceErrors, loadCrdRegistry } from "./crd-schemas.ts";
import { isObj, listRepoDir, type Obj, repoPath } from "./helpers.ts";

/**
 * The chart through the real Helm (v3.22, built by scripts/ensure-test-peers.sh): `helm lint
 * --strict` and `helm template` with every ci/ values file, and every rendered object validated:
 * - a Kubernetes kind twice — by kubernetes-models (types, enums, formats, required fields) and by
 *   the TypeScript compiler against the same models' interfaces, whose excess-property check
 *   refuses any field Kubernetes does not define, at any depth;
 * - a cert-manager or Prometheus-operator kind against its project's CRD (fetched from the Go
 *   module proxy by the same script), read as a structural schema: unknown fields refused at any
 *   depth (crd-schemas.ts); its metadata by the compiler as ObjectMeta.
 *
 * `--kube-version` is given because a `go install`ed Helm has no Kubernetes version stamped in
 * (it would assume v1.20, below the chart's kubeVersion).
 */

const run = promisify(execFile);
const chart = repoPath("charts/authority");
const KUBE_VERSION = "1.31.0";
const ciFiles = listRepoDir("charts/authority/ci").filter((f) => f.endsWith("values.yaml"));

interface Kind {
  readonly model: new (data: never) => { validate(): void };
  /** module and interface the type check imports */
  readonly module: string;
  readonly type: string;
}

const kinds: Record<string, Kind> = {
  "v1/ConfigMap": { model: ConfigMap, module: "kubernetes-models/v1/ConfigMap", type: "IConfigMap" },
  "v1/Service": { model: Service, module: "kubernetes-models/v1/Service", type: "IService" },
  "v1/Secret": { model: Secret, module: "kubernetes-models/v1/Secret", type: "ISecret" },
  "v1/ServiceAccount": {
    model: ServiceAccount,
    module: "kubernetes-models/v1/ServiceAccount",
    type: "IServiceAccount",
  },
  "v1/PersistentVolumeClaim": {
    model: PersistentVolumeClaim,
    module: "kubernetes-models/v1/PersistentVolumeClaim",
    type: "IPersistentVolumeClaim",
  },
  "apps/v1/Deployment": {
    model: Deployment,
    module: "kubernetes-models/apps/v1/Deployment",
    type: "IDeployment",
  },
  "policy/v1/PodDisruptionBudget": {
    model: PodDisruptionBudget,
    module: "kubernetes-models/policy/v1/PodDisruptionBudget",
    type: "IPodDisruptionBudget",
  },
  "networking.k8s.io/v1/NetworkPolicy": {
    model: NetworkPolicy,
    module: "kubernetes-models/networking.k8s.io/v1/NetworkPolicy",
    type: "INetworkPolicy",
  },
  "networking.k8s.io/v1/Ingress": {
    model: Ingress,
    module: "kubernetes-models/networking.k8s.io/v1/Ingress",
    type: "IIngress",
  },
  "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": {
    model: MutatingWebhookConfiguration,
    module: "kubernetes-models/admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
    type: "IMutatingWebhookConfiguration",
  },
};

/** Custom resources of operators the chart integrates with: checked against their CRDs. */
const customKinds = new Set([
  "cert-manager.io/v1/Certificate",
  "cert-manager.io/v1/Issuer",
  "monitoring.coreos.com/v1/ServiceMonitor",
  "monitoring.coreos.com/v1/PodMonitor",
  "monitoring.coreos.com/v1/PrometheusRule",
]);

async function helm(args: string[]): Promise<string> {
  const { stdout } = await run(projectTool("helm"), args, { maxBuffer: 32 * 1024 * 1024, timeout: 60_000 });
  return stdout;
}

function documents(text: string, file: string): Obj[] {
  return parseAllDocuments(text).flatMap((doc) => {
    assert.deepEqual(
      doc.errors.map((e) => e.message),
      [],
      file,
    );
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) return [];
    assert.ok(isObj(value), `${file}: a document is not a mapping`);
    return [value];
  });
}

const rendered = new Map<string, Obj[]>();
let dir: TempDir;
let crds: CrdRegistry;

before(async () => {
  crds = loadCrdRegistry();
  dir = await makeTempDir("helm-types-");
  // the type check resolves kubernetes-models from the project's node_modules
  await symlink(repoPath("node_modules"), join(dir.path, "node_modules"), "dir");
  for (const file of ciFiles) {
    const text = await helm([
      "template",
      "authority",
      chart,
      "--namespace",
      "authority-system",
      "--kube-version",
      KUBE_VERSION,
      "-f",
      join(chart, "ci", file),
    ]);
    rendered.set(file, documents(text, file));
  }
});
after(() => dir?.cleanup());

describe("helm lint --strict", () => {
  it("passes with the defaults and with every ci/ values file", async () => {
    const args = ["lint", "--strict", chart, "--kube-version", KUBE_VERSION];
    const { stdout: out, stderr } = await run(projectTool("helm"), args, { timeout: 60_000 });
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
    // Lint renders in Helm's lint mode, where a template's `fail` is logged, not fatal: the
    // defaults lack the required values (required-values.test.ts: `helm template` fails).
    assert.match(stderr, /\[INFO\] Fail: image\.repository is required/);
    for (const file of ciFiles) {
      const withFile = await helm([...args, "-f", join(chart, "ci", file)]);
      assert.match(withFile, /0 chart\(s\) failed/, file);
      assert.doesNotMatch(withFile, /\[(WARNING|ERROR)\]/, file);
    }
  });

  it("fails on values the schema refuses (so the lint above is not vacuous)", async () => {
    const output = await helm([
      "lint",
      "--strict",
      chart,
      "--kube-version",
      KUBE_VERSION,
      "--set",
      "replicas=3",
    ]).then(
      (out) => `passed: ${out}`,
      (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ""}${error.stderr ?? ""}`,
    );
    assert.match(output, /additional properties 'replicas' not allowed/);
    assert.match(output, /1 chart\(s\) failed/);
  });
});

describe("helm template with every ci/ values file", () => {
  it("renders only kinds this suite validates", () => {
    assert.ok(ciFiles.length >= 5);
    for (const [file, objects] of rendered) {
      assert.ok(objects.length >= 8, `${file}: ${objects.length} objects`);
      for (const object of objects) {
        const key = `${String(object.apiVersion)}/${String(object.kind)}`;
        assert.ok(kinds[key] !== undefined || customKinds.has(key), `${file}: unexpected ${key}`);
        const metadata = object.metadata;
        assert.ok(
          isObj(metadata) && typeof metadata.name === "string" && metadata.name !== "",
          `${file}: ${key} name`,
        );
      }
    }
  });

  it("renders objects kubernetes-models accepts", () => {
    for (const [file, objects] of rendered) {
      for (const object of objects) {
        const kind = kinds[`${String(object.apiVersion)}/${String(object.kind)}`];
        if (kind === undefined) continue;
        assert.doesNotThrow(
          () => new kind.model(object as never).validate(),
          `${file}: ${String(object.kind)} ${String((object.metadata as Obj).name)}`,
        );
      }
    }
  });

  it("renders no field Kubernetes does not define (a compile against the models' types)", async () => {
    const typeCheck = async (objects: ReadonlyArray<{ label: string; object: Obj }>): Promise<string> => {
      const used = new Set<string>();
      const lines: string[] = [];
      objects.forEach(({ label, object }, i) => {
        const key = `${String(object.apiVersion)}/${String(object.kind)}`;
        // The API server reads a null field as an absent one (the chart renders `env:` empty).
        const json = (value: unknown): string =>
          JSON.stringify(value, (_key, v: unknown) => (v === null ? undefined : v));
        const kind = kinds[key];
        if (kind !== undefined) {
          used.add(`import type { ${kind.type} } from "${kind.module}";`);
          lines.push(`// ${label}`, `export const o${i}: ${kind.type} = ${json(object)};`);
        } else if (customKinds.has(key)) {
          // a custom resource's metadata is ObjectMeta, which its CRD does not describe
          used.add(
            `import type { IObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";`,
          );
          lines.push(`// ${label} metadata`, `export const o${i}: IObjectMeta = ${json(object.metadata)};`);
        }
      });
      await writeFile(join(dir.path, "rendered.ts"), [...used, ...lines].join("\n"));
      await writeFile(
        join(dir.path, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            strict: true,
            noEmit: true,
            module: "nodenext",
            moduleResolution: "nodenext",
            skipLibCheck: true,
            types: [],
          },
          files: ["rendered.ts"],
        }),
      );
      return run(repoPath("node_modules/.bin/tsc"), ["-p", dir.path], { timeout: 120_000 }).then(
        () => "",
        (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ""}${error.stderr ?? ""}`,
      );
    };
    const all = [...rendered].flatMap(([file, objects]) =>
      objects.map((object) => ({ label: `${file} ${String(object.kind)}`, object })),
    );
    assert.equal(await typeCheck(all), "");
    // and the check does refuse an unknown field, deep inside a pod template
    const deployment = all.find(({ object }) => object.kind === "Deployment");
    assert.ok(deployment);
    const tampered = structuredClone(deployment.object) as {
      spec: { template: { spec: { containers: Obj[] } } };
    };
    const container = tampered.spec.template.spec.containers[0];
    assert.ok(container);
    container.imagePullPolcy = "Always";
    // and in a custom resource's metadata (ObjectMeta), which its CRD does not describe
    const custom = all.find(({ object }) =>
      customKinds.has(`${String(object.apiVersion)}/${String(object.kind)}`),
    );
    assert.ok(custom);
    const tamperedCustom = structuredClone(custom.object) as { metadata: Obj };
    tamperedCustom.metadata.label = { app: "x" };
    const output = await typeCheck([
      { label: "tampered", object: tampered as unknown as Obj },
      { label: "tampered custom", object: tamperedCustom as unknown as Obj },
    ]);
    assert.match(output, /imagePullPolcy/);
    assert.match(output, /'"label"' does not exist in type 'IObjectMeta'/);
  });
});

describe("rendered custom resources against their CRDs", () => {
  const customObjects = (): Array<{ file: string; object: Obj }> =>
    [...rendered].flatMap(([file, objects]) =>
      objects
        .filter((object) => customKinds.has(`${String(object.apiVersion)}/${String(object.kind)}`))
        .map((object) => ({ file, object })),
    );

  it("renders every custom kind in some ci/ values file, and each one its CRD accepts", () => {
    const seen = new Set(
      customObjects().map(({ object }) => `${String(object.apiVersion)}/${String(object.kind)}`),
    );
    assert.deepEqual([...seen].sort(), [...customKinds].sort());
    for (const { file, object } of customObjects()) {
      assert.deepEqual(
        customResourceErrors(crds, object),
        [],
        `${file}: ${String(object.kind)} ${String((object.metadata as Obj).name)}`,
      );
    }
  });

  it("refuses an unknown field in every declared object of every rendered custom kind (the check is not vacuous)", () => {
    // every plain object under spec, except the free-form label maps, is a node the CRD declares
    const labelMaps = new Set(["matchLabels", "labels", "annotations"]);
    const nodes = (value: unknown, path: Array<string | number>): Array<Array<string | number>> => {
      if (Array.isArray(value)) return value.flatMap((item, i) => nodes(item, [...path, i]));
      if (!isObj(value)) return [];
      const own = labelMaps.has(String(path.at(-1))) ? [] : [path];
      return [...own, ...Object.entries(value).flatMap(([key, child]) => nodes(child, [...path, key]))];
    };
    const tampered = new Set<string>();
    for (const { file, object } of customObjects()) {
      for (const path of nodes(object.spec, ["spec"])) {
        const copy = structuredClone(object);
        const node = path.reduce<unknown>(
          (at, key) => (at as Record<string | number, unknown>)[key],
          copy,
        ) as Obj;
        node.unknownField = "x";
        const pointer = `/${path.join("/")}`;
        assert.ok(
          customResourceErrors(crds, copy).includes(`${pointer}: unknown field "unknownField"`),
          `${file}: ${String(object.kind)} ${pointer} accepted an unknown field`,
        );
        tampered.add(`${String(object.kind)} ${pointer}`);
      }
    }
    // spec and at least one nested object of each kind
    for (const kind of ["Certificate", "Issuer", "ServiceMonitor", "PodMonitor", "PrometheusRule"]) {
      assert.ok([...tampered].filter((t) => t.startsWith(`${kind} `)).length >= 2, kind);
    }
  });

  it("does not invent refusals: a field the CRD declares and a map's keys pass", () => {
    const monitor = customObjects().find(({ object }) => object.kind === "ServiceMonitor");
    assert.ok(monitor);
    const copy = structuredClone(monitor.object) as { spec: Obj & { selector: { matchLabels: Obj } } };
    copy.spec.jobLabel = "app.kubernetes.io/name"; // declared by the CRD, not rendered by the chart
    copy.spec.selector.matchLabels["any.example/key"] = "v"; // a map
    assert.deepEqual(customResourceErrors(crds, copy as unknown as Obj), []);
    // and a wrong type is refused as well as an unknown field
    copy.spec.jobLabel = 7;
    assert.deepEqual(customResourceErrors(crds, copy as unknown as Obj), ["/spec/jobLabel: must be string"]);
  });
});
