import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { describe, it } from "node:test";
import { MutatingWebhookConfiguration } from "kubernetes-models/admissionregistration.k8s.io/v1";
import { Deployment, StatefulSet } from "kubernetes-models/apps/v1";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { ConfigMap, Namespace, Pod, Service, ServiceAccount } from "kubernetes-models/v1";
import { parse } from "yaml";
import { buildSidecarPatch, sidecarContainer, sidecarVolumes } from "../../src/servers/inject/patch.ts";
import { parseSidecarSettings } from "../../src/servers/inject/settings.ts";
import {
  at,
  isObj,
  listRepoDir,
  loadYaml,
  loadYamlDocuments,
  type Obj,
  readRepoFile,
  repoPath,
} from "./helpers.ts";

interface Validatable {
  validate(): void;
}
type ModelClass = new (data: never) => Validatable;

const models: Record<string, ModelClass> = {
  "v1/Namespace": Namespace,
  "v1/ConfigMap": ConfigMap,
  "v1/Service": Service,
  "v1/ServiceAccount": ServiceAccount,
  "v1/Pod": Pod,
  "apps/v1/Deployment": Deployment,
  "apps/v1/StatefulSet": StatefulSet,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "networking.k8s.io/v1/NetworkPolicy": NetworkPolicy,
  "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": MutatingWebhookConfiguration,
};

const kubernetesFiles = listRepoDir("deploy/kubernetes").filter((f) => f.endsWith(".yaml"));
const istioFiles = listRepoDir("deploy/istio").filter((f) => f.endsWith(".yaml"));
const kubeDocs = kubernetesFiles.flatMap((f) =>
  loadYamlDocuments(`deploy/kubernetes/${f}`).map((doc) => ({ f, doc })),
);
const istioDocs = istioFiles.flatMap((f) =>
  loadYamlDocuments(`deploy/istio/${f}`).map((doc) => ({ f, doc })),
);
const list = (v: unknown): Obj[] => (Array.isArray(v) ? v.filter(isObj) : []);
const find = (kind: string, name: string): Obj | undefined =>
  kubeDocs.find(({ doc }) => doc.kind === kind && at(doc, ["metadata", "name"]) === name)?.doc;

describe("deploy/kubernetes manifests", () => {
  it("parse, and every document is a core kind that validates with kubernetes-models", () => {
    assert.ok(kubeDocs.length >= 10);
    for (const { f, doc } of kubeDocs) {
      const Model = models[`${String(doc.apiVersion)}/${String(doc.kind)}`];
      assert.ok(Model, `${f}: unexpected ${String(doc.apiVersion)} ${String(doc.kind)}`);
      new Model(doc as never).validate();
    }
  });

  it("write file modes in decimal, which YAML 1.1 (kubectl) and 1.2 read alike", () => {
    const files = [
      ...kubernetesFiles.map((f) => `deploy/kubernetes/${f}`),
      ...listRepoDir("charts/authority/templates").map((f) => `charts/authority/templates/${f}`),
    ];
    for (const file of files) assert.doesNotMatch(readRepoFile(file), /Mode: 0[0-7]+\b/, file);
  });

  it("carry no inline Secret values", () => {
    assert.equal(
      kubeDocs.some(({ doc }) => doc.kind === "Secret"),
      false,
    );
  });

  it("run every container non-root, read-only, without privileges", () => {
    const workloads = kubeDocs.filter(({ doc }) => doc.kind === "Deployment" || doc.kind === "StatefulSet");
    assert.ok(workloads.length >= 4);
    for (const { f, doc } of workloads) {
      const spec = at(doc, ["spec", "template", "spec"]);
      assert.equal(at(spec, ["automountServiceAccountToken"]), false, f);
      assert.equal(at(spec, ["securityContext", "runAsNonRoot"]), true, f);
      for (const c of list(at(spec, ["containers"]))) {
        const sc = c.securityContext;
        assert.equal(at(sc, ["readOnlyRootFilesystem"]), true, `${f} ${String(c.name)}`);
        assert.equal(at(sc, ["allowPrivilegeEscalation"]), false, `${f} ${String(c.name)}`);
        assert.deepEqual(at(sc, ["capabilities", "drop"]), ["ALL"], `${f} ${String(c.name)}`);
        assert.ok(isObj(c.resources), `${f} ${String(c.name)} resources`);
      }
    }
  });

  it("point Services at ports their pods declare", () => {
    for (const { f, doc } of kubeDocs.filter(({ doc }) => doc.kind === "Service")) {
      const selector = at(doc, ["spec", "selector"]) as Record<string, string>;
      const target = kubeDocs.find(
        ({ doc: d }) =>
          (d.kind === "Deployment" || d.kind === "StatefulSet") &&
          Object.entries(selector).every(
            ([k, v]) => at(d, ["spec", "template", "metadata", "labels", k]) === v,
          ),
      );
      assert.ok(target, `${f}: no Deployment matches ${JSON.stringify(selector)}`);
      const portNames = list(at(target.doc, ["spec", "template", "spec", "containers"])).flatMap((c) =>
        list(c.ports).map((p) => p.name),
      );
      for (const port of list(at(doc, ["spec", "ports"]))) {
        assert.ok(portNames.includes(port.targetPort), `${f}: targetPort ${String(port.targetPort)}`);
      }
    }
  });

  it("keep the authority's records in PostgreSQL, its URL in a Secret; Redis is never the store", () => {
    const container = list(
      at(find("Deployment", "authority"), ["spec", "template", "spec", "containers"]),
    )[0];
    const configured = at(find("ConfigMap", "authority"), ["data"]) as Obj;
    assert.equal(configured.AUTHORITY_STORE_URL, undefined, "not a plain value");
    const storeUrl = list(container?.env).find((entry) => entry.name === "AUTHORITY_STORE_URL");
    assert.deepEqual(storeUrl?.valueFrom, { secretKeyRef: { name: "authority-postgres", key: "url" } });
    // The Secret's URL is written in namespace.yaml's instructions: PostgreSQL, the Service below.
    const instructions = readRepoFile("deploy/kubernetes/namespace.yaml");
    const urls = [...instructions.matchAll(/--from-literal=url="([^"]+)"/g)].map((m) => m[1] ?? "");
    assert.deepEqual(urls.length, 1);
    assert.match(urls[0] ?? "", /^postgres:\/\/[^@]+@postgres\.authority-system\.svc\.cluster\.local:5432\//);
    for (const { f, doc } of kubeDocs) {
      assert.doesNotMatch(String(at(doc, ["data", "AUTHORITY_STORE_URL"]) ?? ""), /^rediss?:/, f);
    }
    const postgres = find("StatefulSet", "postgres");
    assert.equal(list(at(postgres, ["spec", "volumeClaimTemplates"])).length, 1, "its data on a PVC");
    assert.equal(find("Service", "postgres") !== undefined, true);
    // Redis stays: the sidecars' cache and the change notifications.
    assert.match(String(configured.AUTHORITY_REDIS_URL), /^redis:\/\/redis\./);
  });

  describe("the example app", () => {
    const deployment = find("Deployment", "checkout");
    const podSpec = at(deployment, ["spec", "template", "spec"]) as Obj;
    const containers = list(podSpec.containers);
    const settings = parseSidecarSettings(
      {
        image: "ghcr.io/authority/authority:0.1.0",
        authorityUrl: "http://authority.authority-system.svc.cluster.local:8080",
        redis: { url: "redis://redis.authority-system.svc.cluster.local:6379/0" },
        cacheKeySecret: { name: "authority-sidecar-cache-key", key: "cache-key" },
        capabilityMap: { "api.partner.example": "cap_partner_default" },
        credentialsSecret: {
          name: "authority-sidecar-credentials",
          clientIdKey: "client-id",
          clientSecretKey: "client-secret",
        },
        issuer: "https://login.example.com/",
        audience: "authority",
      },
      { version: "0.1.0" },
    );

    it("has the sidecar container the injector would add, byte for byte", () => {
      const sidecar = containers.find((c) => c.name === "authority-sidecar");
      assert.deepEqual(sidecar, sidecarContainer(settings, { capabilityMap: settings.capabilityMap }));
      for (const volume of sidecarVolumes(settings)) {
        assert.deepEqual(
          list(podSpec.volumes).find((v) => v.name === volume.name),
          volume,
        );
      }
    });

    it("is a valid pod the injector leaves alone", () => {
      const pod = {
        apiVersion: "v1",
        kind: "Pod",
        metadata: at(deployment, ["spec", "template", "metadata"]),
        spec: podSpec,
      };
      new Pod(pod as never).validate();
      assert.deepEqual(buildSidecarPatch(pod, settings), []);
    });

    it("ships the same Envoy bootstrap as deploy/envoy/envoy.yaml", () => {
      const configMap = find("ConfigMap", "checkout-envoy");
      assert.deepEqual(
        parse(String(at(configMap, ["data", "envoy.yaml"]))),
        loadYaml("deploy/envoy/envoy.yaml"),
      );
    });

    it("is reached only through Envoy", () => {
      const service = find("Service", "checkout");
      assert.deepEqual(
        list(at(service, ["spec", "ports"])).map((p) => p.targetPort),
        ["http-envoy"],
      );
    });
  });
});

describe("deploy/istio manifests", () => {
  const byKind = (kind: string): Obj => {
    const doc = istioDocs.find(({ doc: d }) => d.kind === kind)?.doc;
    assert.ok(doc, kind);
    return doc;
  };
  const mesh = byKind("IstioOperator");
  const providers = list(at(mesh, ["spec", "meshConfig", "extensionProviders"]));
  const provider = providers.find((p) => isObj(p.envoyExtAuthzGrpc));
  const grpc = at(provider, ["envoyExtAuthzGrpc"]) as Obj;

  it("parse, each with apiVersion, kind and metadata.name", () => {
    assert.equal(istioDocs.length, 3);
    for (const { f, doc } of istioDocs) {
      assert.match(String(doc.apiVersion), /^[a-z.]+\.istio\.io\/v1(alpha1|beta1)?$/, f);
      assert.equal(typeof at(doc, ["metadata", "name"]), "string", f);
      assert.ok(isObj(doc.spec), f);
    }
  });

  it("register an envoyExtAuthzGrpc provider on 9191 that fails closed", () => {
    assert.equal(mesh.apiVersion, "install.istio.io/v1alpha1");
    assert.equal(typeof provider?.name, "string");
    assert.equal(grpc.port, 9191);
    assert.equal(grpc.failOpen, false);
    assert.match(String(grpc.timeout), /^\d+(\.\d+)?(ms|s)$/);
  });

  it("resolve the provider's service to the sidecar on the pod's loopback", () => {
    const entry = byKind("ServiceEntry");
    assert.equal(entry.apiVersion, "networking.istio.io/v1");
    assert.deepEqual(at(entry, ["spec", "hosts"]), [grpc.service]);
    assert.equal(at(entry, ["spec", "resolution"]), "STATIC");
    assert.deepEqual(
      list(at(entry, ["spec", "endpoints"])).map((e) => e.address),
      ["127.0.0.1"],
    );
    const ports = list(at(entry, ["spec", "ports"]));
    assert.ok(ports.some((p) => p.number === 9191 && p.protocol === "GRPC" && typeof p.name === "string"));
  });

  it("apply it with an AuthorizationPolicy of action CUSTOM naming the provider", () => {
    const policy = byKind("AuthorizationPolicy");
    assert.equal(policy.apiVersion, "security.istio.io/v1");
    assert.equal(at(policy, ["spec", "action"]), "CUSTOM");
    assert.equal(at(policy, ["spec", "provider", "name"]), provider?.name);
    assert.ok(list(at(policy, ["spec", "rules"])).length > 0, "CUSTOM needs rules to match anything");
    assert.equal(at(policy, ["spec", "selector", "matchLabels", "authority.io/inject"]), "true");
  });
});

describe("deploy/envoy/envoy.yaml", () => {
  const bootstrap = loadYaml("deploy/envoy/envoy.yaml");
  const clusters = list(at(bootstrap, ["static_resources", "clusters"]));
  const listeners = list(at(bootstrap, ["static_resources", "listeners"]));
  const hcm = listeners
    .flatMap((l) => list(l.filter_chains))
    .flatMap((c) => list(c.filters))
    .find((f) => f.name === "envoy.filters.network.http_connection_manager");
  const httpFilters = list(at(hcm, ["typed_config", "http_filters"]));
  const extAuthz = httpFilters.find((f) => f.name === "envoy.filters.http.ext_authz");
  const config = at(extAuthz, ["typed_config"]) as Obj;

  it("has the ext_authz filter with the v3 typed config, V3 transport and fail-closed mode", () => {
    assert.ok(extAuthz);
    assert.equal(config["@type"], "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz");
    assert.equal(config.transport_api_version, "V3");
    assert.equal(config.failure_mode_allow, false);
    assert.equal(at(config, ["grpc_service", "timeout"]), "0.25s");
  });

  it("runs ext_authz before the router, which is last", () => {
    const names = httpFilters.map((f) => f.name);
    assert.equal(names.at(-1), "envoy.filters.http.router");
    assert.ok(names.indexOf("envoy.filters.http.ext_authz") < names.indexOf("envoy.filters.http.router"));
  });

  it("points ext_authz at a cluster that exists: the sidecar on 127.0.0.1:9191 over HTTP/2", () => {
    const name = at(config, ["grpc_service", "envoy_grpc", "cluster_name"]);
    assert.equal(name, "authority_sidecar");
    const cluster = clusters.find((c) => c.name === name);
    assert.ok(cluster, "cluster authority_sidecar");
    const address = at(
      list(at(list(at(cluster, ["load_assignment", "endpoints"]))[0], ["lb_endpoints"]))[0],
      ["endpoint", "address", "socket_address"],
    );
    assert.deepEqual(address, { address: "127.0.0.1", port_value: 9191 });
    const options = at(cluster, [
      "typed_extension_protocol_options",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    ]);
    assert.equal(
      at(options, ["@type"]),
      "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    );
    assert.ok(isObj(at(options, ["explicit_http_config", "http2_protocol_options"])));
  });

  it("names a capability on every route that is checked, and every route cluster exists", () => {
    const routes = list(at(hcm, ["typed_config", "route_config", "virtual_hosts"])).flatMap((v) =>
      list(v.routes),
    );
    assert.ok(routes.length >= 2);
    const clusterNames = clusters.map((c) => c.name);
    for (const route of routes) {
      assert.ok(clusterNames.includes(at(route, ["route", "cluster"])), JSON.stringify(route.match));
      const perRoute = at(route, ["typed_per_filter_config", "envoy.filters.http.ext_authz"]) as Obj;
      assert.equal(
        perRoute["@type"],
        "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
      );
      if (perRoute.disabled === true) continue;
      const capability = at(perRoute, ["check_settings", "context_extensions", "capability_id"]);
      assert.equal(typeof capability, "string", JSON.stringify(route.match));
    }
  });

  it("uses only v3 typed configs", () => {
    const types = JSON.stringify(bootstrap).match(/"@type":"[^"]+"/g) ?? [];
    assert.ok(types.length >= 5);
    for (const t of types) assert.match(t, /type\.googleapis\.com\/envoy\.[a-z_.]+\.v3\.[A-Za-z]+/);
  });
});

describe("deploy/Containerfile", () => {
  const text = readRepoFile("deploy/Containerfile");
  const instructions = text
    .replace(/\\\n/g, " ")
    .split("\n")
    .filter((l) => /^[A-Z]+\s/.test(l));

  it("builds on Node 24 slim by default (BASE_IMAGE) with production dependencies only", () => {
    assert.ok(instructions.includes("ARG BASE_IMAGE=docker.io/library/node:24-slim"));
    const froms = instructions.filter((l) => l.startsWith("FROM "));
    assert.equal(froms.length, 3);
    for (const from of froms)
      assert.match(from, /^FROM (\$\{BASE_IMAGE\}( AS deps)?|deps AS sidecar-snapshot)$/);
    assert.ok(instructions.some((l) => l.startsWith("RUN ") && l.includes("npm install --omit=dev")));
  });

  it("declares the proxy CA argument in the dependency stage only, not in the final image", () => {
    const declared = instructions.flatMap((l, i) => (l === "ARG NODE_EXTRA_CA_CERTS" ? [i] : []));
    const finalStage = instructions.findLastIndex((l) => l.startsWith("FROM "));
    assert.ok(declared.length >= 1);
    for (const line of declared) assert.ok(line < finalStage);
    assert.ok(!instructions.slice(finalStage).some((l) => l.includes("NODE_EXTRA_CA_CERTS")));
  });

  it("runs as user 10001 with the authority entry point", () => {
    const users = instructions.filter((l) => l.startsWith("USER "));
    assert.match(users.at(-1) ?? "", /^USER 10001(:10001)?$/);
    assert.ok(instructions.includes('ENTRYPOINT ["node", "bin/authority.ts"]'));
  });

  it("copies only what runs into the final image, and all of it exists", () => {
    const finalStage = instructions.findLastIndex((l) => l.startsWith("FROM "));
    const copiesOf = (lines: string[]) =>
      lines
        .filter((l) => l.startsWith("COPY ") && !l.includes("--from="))
        .flatMap((l) => l.split(/\s+/).slice(1, -1));
    assert.deepEqual(copiesOf(instructions.slice(finalStage)).sort(), [
      "bin",
      "package-lock.json",
      "package.json",
      "proto",
      "scripts/sidecar-snapshot-entry.ts",
      "scripts/warm-compile-cache.ts",
      "src",
    ]);
    const sources = copiesOf(instructions);
    for (const s of new Set(sources)) assert.ok(existsSync(repoPath(s)), s);
    // The build context lets each of them through.
    const allowed = readRepoFile("deploy/Containerfile.dockerignore")
      .split("\n")
      .filter((l) => l.startsWith("!"))
      .map((l) => l.slice(1).replace(/\/\*\*$/, ""));
    for (const s of new Set(sources)) assert.ok(allowed.includes(s), `${s} is not in the build context`);
  });

  it("gives the injected sidecar's command what it starts from: the snapshot with its Node's version", () => {
    // bin/authority-sidecar (decision 2951): an executable in the image's /app, reading node-version.
    assert.ok(instructions.includes("WORKDIR /app"));
    assert.deepEqual(sidecarContainer(parseSidecarSettings({}, { version: "0.0.0" }), {}).command, [
      "/app/bin/authority-sidecar",
    ]);
    assert.ok((statSync(repoPath("bin/authority-sidecar")).mode & 0o111) === 0o111, "executable");
    const snapshotCopy = instructions.find((l) => l.startsWith("COPY --from=sidecar-snapshot "));
    assert.deepEqual(snapshotCopy?.split(/\s+/).slice(2), [
      "/app/build/sidecar-snapshot/sidecar.blob",
      "/app/build/sidecar-snapshot/snapshot.json",
      "/app/build/sidecar-snapshot/node-version",
      "./build/sidecar-snapshot/",
    ]);
  });

  it("fills the compile cache as the runtime user (Node keys it by user id)", () => {
    const lastUser = instructions.findLastIndex((l) => l.startsWith("USER "));
    const warm = instructions.findIndex((l) => l.startsWith("RUN ") && l.includes("warm-compile-cache.ts"));
    assert.ok(warm > lastUser && lastUser >= 0);
    assert.ok(instructions.some((l) => l.startsWith("ENV ") && l.includes("NODE_COMPILE_CACHE=")));
  });
});

describe("deploy/prometheus/scrape.yaml", () => {
  it("scrapes the sidecars by the port name the injector gives them", () => {
    const config = loadYaml("deploy/prometheus/scrape.yaml");
    const jobs = list(at(config, ["scrape_configs"]));
    assert.deepEqual(
      jobs.map((j) => j.job_name),
      ["authority-sidecars", "authority-service", "authority-injector"],
    );
    const settings = parseSidecarSettings({}, { version: "0.1.0" });
    const metricsPort = list(sidecarContainer(settings, {}).ports).find(
      (p) => p.containerPort === settings.ports.metrics,
    );
    const relabels = list(jobs[0]?.relabel_configs);
    assert.ok(relabels.some((r) => r.regex === metricsPort?.name && r.action === "keep"));
    assert.ok(relabels.some((r) => r.regex === "injected" && r.action === "keep"));
  });
});
