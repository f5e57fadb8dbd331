import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  buildSidecarPatch,
  capabilityMapAnnotation,
  escapeJsonPointer,
  PodAnnotationError,
  planInjection,
  SIDECAR_GLIBC_TUNABLES,
  SIDECAR_NODE_OPTIONS,
  sidecarContainer,
  sidecarContainerName,
} from "../../../src/servers/inject/patch.ts";
import { parseSidecarSettings } from "../../../src/servers/inject/settings.ts";
import {
  annotationsOf,
  chartLikeSettings,
  checkPodConsistency,
  containerNamed,
  containersOf,
  initContainersOf,
  loadPod,
  validatePod,
  volumesOf,
} from "./fixtures.ts";
import { applyJsonPatch, JsonPatchError } from "./json-patch.ts";

type Obj = Record<string, unknown>;

const envOf = (container: Obj | undefined): Obj[] => (container?.env ?? []) as Obj[];
const envValue = (container: Obj | undefined, name: string): Obj | undefined =>
  envOf(container).find((e) => e.name === name);

function injectAndCheck(pod: Obj, settings = chartLikeSettings): Obj {
  validatePod(pod);
  const patch = buildSidecarPatch(pod, settings);
  assert.ok(patch.length > 0, "expected a patch");
  const patched = applyJsonPatch(pod, patch);
  validatePod(patched);
  checkPodConsistency(patched);
  assert.deepEqual(buildSidecarPatch(patched, settings), [], "a second pass adds nothing");
  return patched;
}

describe("the JSON-pointer escaping", () => {
  it("escapes ~ before / as RFC 6901 requires", () => {
    assert.equal(escapeJsonPointer("authority.io/status"), "authority.io~1status");
    assert.equal(escapeJsonPointer("a~/b"), "a~0~1b");
    assert.equal(escapeJsonPointer("plain"), "plain");
  });
});

describe("buildSidecarPatch on a plain pod", () => {
  const pod = loadPod("plain-pod");
  const patch = buildSidecarPatch(pod, chartLikeSettings);
  const patched = injectAndCheck(pod);
  const sidecar = containerNamed(patched, sidecarContainerName);

  it("appends to the existing arrays and adds escaped annotation keys", () => {
    const paths = patch.map((op) => `${op.op} ${op.path}`);
    assert.deepEqual(paths, [
      "add /spec/containers/-",
      "add /spec/volumes/-",
      "add /spec/volumes/-",
      "add /metadata/annotations/authority.io~1status",
      "add /metadata/annotations/prometheus.io~1scrape",
      "add /metadata/annotations/prometheus.io~1port",
      "add /metadata/annotations/prometheus.io~1path",
    ]);
  });

  it("keeps the app container and volumes as they were", () => {
    assert.deepEqual(containersOf(patched)[0], containersOf(pod)[0]);
    assert.deepEqual(volumesOf(patched).slice(0, 2), volumesOf(pod));
    assert.equal(annotationsOf(patched)["kubectl.kubernetes.io/restartedAt"], "2025-05-02T10:14:03Z");
  });

  it("adds the sidecar with image, command, named ports, probes and a locked-down security context", () => {
    assert.ok(sidecar);
    assert.equal(sidecar.image, "ghcr.io/authority/authority:0.1.0");
    // The image's one-bootstrap start (decision 2951); no args: the command is the sidecar's.
    assert.deepEqual(sidecar.command, ["/app/bin/authority-sidecar"]);
    assert.equal(sidecar.args, undefined);
    assert.deepEqual(sidecar.ports, [
      { name: "authz-grpc", containerPort: 9191, protocol: "TCP" },
      { name: "authz-proxy", containerPort: 15101, protocol: "TCP" },
      { name: "authz-metrics", containerPort: 9464, protocol: "TCP" },
    ]);
    assert.deepEqual((sidecar.readinessProbe as Obj).httpGet, {
      path: "/readyz",
      port: 9464,
      scheme: "HTTP",
    });
    assert.deepEqual((sidecar.livenessProbe as Obj).httpGet, {
      path: "/healthz",
      port: 9464,
      scheme: "HTTP",
    });
    assert.deepEqual(sidecar.securityContext, {
      runAsNonRoot: true,
      runAsUser: 10001,
      runAsGroup: 10001,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    });
    assert.deepEqual(sidecar.resources, {
      requests: { cpu: "50m", memory: "144Mi" },
      limits: { memory: "256Mi" },
    });
  });

  it("sets the env of docs/configuration.md, with secrets only by reference", () => {
    assert.equal(
      envValue(sidecar, "AUTHORITY_URL")?.value,
      "http://authority.authority-system.svc.cluster.local:8080",
    );
    assert.equal(envValue(sidecar, "AUTHORITY_SIDECAR_GRPC_LISTEN")?.value, "127.0.0.1:9191");
    assert.equal(envValue(sidecar, "AUTHORITY_SIDECAR_PROXY_LISTEN")?.value, "127.0.0.1:15101");
    assert.equal(envValue(sidecar, "AUTHORITY_SIDECAR_METRICS_LISTEN")?.value, "0.0.0.0:9464");
    assert.equal(
      envValue(sidecar, "NODE_OPTIONS")?.value,
      "--max-semi-space-size=2 --max-old-space-size=128",
    );
    assert.equal(envValue(sidecar, "MALLOC_ARENA_MAX")?.value, "2");
    assert.equal(envValue(sidecar, "GLIBC_TUNABLES")?.value, "glibc.malloc.mmap_threshold=32768");
    assert.deepEqual(envValue(sidecar, "AUTHORITY_REDIS_URL"), {
      name: "AUTHORITY_REDIS_URL",
      valueFrom: { secretKeyRef: { name: "authority-redis-url", key: "url" } },
    });
    assert.equal(
      envValue(sidecar, "AUTHORITY_SIDECAR_CACHE_KEY_FILE")?.value,
      "/var/run/authority/cache-key/cache-key",
    );
    assert.equal(envValue(sidecar, "AUTHORITY_ISSUER")?.value, "https://idp.example.com");
    assert.equal(envValue(sidecar, "AUTHORITY_AUDIENCE")?.value, "authority");
    assert.equal(envValue(sidecar, "AUTHORITY_JWKS_URL"), undefined);
    assert.equal(envValue(sidecar, "AUTHORITY_TRUSTED_ISSUERS"), undefined);
  });

  it("passes the trusted issuers to the sidecar as AUTHORITY_TRUSTED_ISSUERS", () => {
    const trustedIssuers = [{ issuer: "https://login.platform.example", claims: { "partner-id": "org" } }];
    const settings = parseSidecarSettings({ trustedIssuers }, { version: "0.1.0" });
    const env = sidecarContainer(settings, { istio: false }).env as Array<{ name: string; value?: string }>;
    const passed = env.find((entry) => entry.name === "AUTHORITY_TRUSTED_ISSUERS")?.value;
    assert.deepEqual(JSON.parse(passed ?? "null"), trustedIssuers);
  });

  it("merges the pod's capability-map annotation over the settings' map", () => {
    const map = JSON.parse(String(envValue(sidecar, "AUTHORITY_SIDECAR_CAPABILITY_MAP")?.value));
    assert.deepEqual(map, { "api.partner.example": "cap_payments", "/v1/orders": "cap_orders" });
  });

  it("mounts the cache key Secret read-only and gives /tmp an emptyDir", () => {
    assert.deepEqual(sidecar?.volumeMounts, [
      { name: "authority-sidecar-tmp", mountPath: "/tmp" },
      { name: "authority-cache-key", mountPath: "/var/run/authority/cache-key", readOnly: true },
    ]);
    const keyVolume = volumesOf(patched).find((v) => v.name === "authority-cache-key");
    assert.deepEqual(keyVolume?.secret, {
      secretName: "authority-sidecar-cache-key",
      items: [{ key: "cache-key", path: "cache-key" }],
      defaultMode: 0o444,
      optional: false,
    });
  });

  it("marks the pod injected and scrapeable", () => {
    const annotations = annotationsOf(patched);
    assert.equal(annotations["authority.io/status"], "injected");
    assert.equal(annotations["prometheus.io/scrape"], "true");
    assert.equal(annotations["prometheus.io/port"], "9464");
    assert.equal(annotations["prometheus.io/path"], "/metrics");
  });

  it("warns (but injects) when an app container already declares a sidecar port", () => {
    const clash = structuredClone(pod);
    const app = containersOf(clash)[0];
    assert.ok(app);
    app.ports = [{ name: "metrics", containerPort: 9464, protocol: "TCP" }];
    const plan = planInjection(clash, chartLikeSettings);
    assert.ok(plan.patch.length > 0);
    assert.deepEqual(plan.warnings, [
      "container checkout declares port 9464, which the authority-sidecar also listens on",
    ]);
  });
});

describe("buildSidecarPatch on a pod without volumes or annotations", () => {
  const pod = loadPod("bare-pod");
  const patch = buildSidecarPatch(pod, chartLikeSettings);

  it("adds whole arrays and the whole annotation object instead of appending", () => {
    assert.deepEqual(
      patch.map((op) => `${op.op} ${op.path}`),
      ["add /spec/containers/-", "add /spec/volumes", "add /metadata/annotations"],
    );
    const patched = injectAndCheck(pod);
    assert.deepEqual(
      volumesOf(patched).map((v) => v.name),
      ["authority-sidecar-tmp", "authority-cache-key"],
    );
    assert.deepEqual(annotationsOf(patched), {
      "authority.io/status": "injected",
      "prometheus.io/scrape": "true",
      "prometheus.io/port": "9464",
      "prometheus.io/path": "/metrics",
    });
  });

  it("handles a pod with no metadata, no spec arrays at all", () => {
    const minimal = { apiVersion: "v1", kind: "Pod", spec: {} };
    const patched = applyJsonPatch(minimal, buildSidecarPatch(minimal, chartLikeSettings));
    validatePod(patched);
    assert.deepEqual(
      containersOf(patched).map((c) => c.name),
      [sidecarContainerName],
    );
    assert.equal(annotationsOf(patched)["authority.io/status"], "injected");
    const noSpec = { apiVersion: "v1", kind: "Pod" };
    const patchedNoSpec = applyJsonPatch(noSpec, buildSidecarPatch(noSpec, chartLikeSettings));
    validatePod(patchedNoSpec);
    assert.equal(containersOf(patchedNoSpec).length, 1);
  });

  it("escapes annotation keys that contain ~ and /", () => {
    const odd = structuredClone(pod);
    (odd.metadata as Obj).annotations = { "example.com/a~b": "x" };
    const ops = buildSidecarPatch(odd, chartLikeSettings);
    assert.ok(ops.some((op) => op.path === "/metadata/annotations/authority.io~1status"));
    const patched = applyJsonPatch(odd, ops);
    assert.equal(annotationsOf(patched)["example.com/a~b"], "x");
    assert.equal(annotationsOf(patched)["authority.io/status"], "injected");
  });
});

describe("pods that are not injected", () => {
  it("skips an already injected pod (status annotation or container name)", () => {
    const pod = loadPod("already-injected-pod");
    const plan = planInjection(pod, chartLikeSettings);
    assert.equal(plan.skipped, "already_injected");
    assert.deepEqual(plan.patch, []);
    const onlyContainer = structuredClone(pod);
    (onlyContainer.metadata as Obj).annotations = {};
    assert.equal(planInjection(onlyContainer, chartLikeSettings).skipped, "already_injected");
  });

  it('honours the authority.io/inject: "false" opt-out annotation', () => {
    const plan = planInjection(loadPod("opt-out-pod"), chartLikeSettings);
    assert.equal(plan.skipped, "opted_out");
    assert.deepEqual(plan.patch, []);
  });

  it("refuses a malformed capability-map annotation with a clear error", () => {
    const pod = loadPod("plain-pod");
    (pod.metadata as Obj).annotations = { "authority.io/capability-map": "{not json" };
    assert.throws(() => buildSidecarPatch(pod, chartLikeSettings), PodAnnotationError);
    (pod.metadata as Obj).annotations = { "authority.io/capability-map": '{"a": 3}' };
    assert.throws(() => buildSidecarPatch(pod, chartLikeSettings), /non-empty capability_id strings/);
  });
});

describe("buildSidecarPatch beside Istio", () => {
  const pod = loadPod("istio-injected-pod");
  const plan = planInjection(pod, chartLikeSettings);
  const patched = injectAndCheck(pod);

  it("detects Istio and still adds the sidecar", () => {
    assert.equal(plan.istio, true);
    assert.ok(containerNamed(patched, sidecarContainerName));
  });

  it("leaves istio-proxy and the init containers untouched", () => {
    assert.deepEqual(containerNamed(patched, "istio-proxy"), containerNamed(pod, "istio-proxy"));
    assert.deepEqual(initContainersOf(patched), initContainersOf(pod));
    assert.ok(plan.patch.every((op) => !op.path.startsWith("/spec/initContainers")));
  });

  it("keeps the forward proxy off Istio's 15001 and excludes 9191/9464 from inbound capture", () => {
    const sidecar = containerNamed(patched, sidecarContainerName);
    assert.equal(envValue(sidecar, "AUTHORITY_SIDECAR_PROXY_LISTEN")?.value, "127.0.0.1:15101");
    assert.equal(annotationsOf(patched)["traffic.sidecar.istio.io/excludeInboundPorts"], "15020,9191,9464");
  });

  it("does not clobber Istio's Prometheus merge annotations", () => {
    const annotations = annotationsOf(patched);
    assert.equal(annotations["prometheus.io/port"], "15020");
    assert.equal(annotations["prometheus.io/path"], "/stats/prometheus");
    assert.equal(annotations["sidecar.istio.io/status"], annotationsOf(pod)["sidecar.istio.io/status"]);
  });

  it("treats pods labelled for Istio as Istio pods before Istio's webhook ran, unless mode says otherwise", () => {
    const before = loadPod("bare-pod");
    (before.metadata as Obj).labels = { "sidecar.istio.io/inject": "true" };
    assert.equal(planInjection(before, chartLikeSettings).istio, true);
    const never = parseSidecarSettings({ istio: { mode: "never" } }, { version: "0.1.0" });
    assert.equal(planInjection(before, never).istio, false);
    const always = parseSidecarSettings({ istio: { mode: "always" } }, { version: "0.1.0" });
    assert.equal(planInjection(loadPod("bare-pod"), always).istio, true);
    assert.equal(planInjection(loadPod("bare-pod"), chartLikeSettings).istio, false);
  });

  it("takes the namespace's Istio label into account, but a pod's own opt-out wins", () => {
    const labelled = { istioInjection: true };
    assert.equal(planInjection(loadPod("bare-pod"), chartLikeSettings, labelled).istio, true);
    const optedOut = loadPod("bare-pod");
    (optedOut.metadata as Obj).labels = { "sidecar.istio.io/inject": "false" };
    assert.equal(planInjection(optedOut, chartLikeSettings, labelled).istio, false);
    const never = parseSidecarSettings({ istio: { mode: "never" } }, { version: "0.1.0" });
    assert.equal(planInjection(loadPod("bare-pod"), never, labelled).istio, false);
    const patched = applyJsonPatch(
      loadPod("plain-pod"),
      buildSidecarPatch(loadPod("plain-pod"), chartLikeSettings, labelled),
    );
    assert.equal(annotationsOf(patched)["traffic.sidecar.istio.io/excludeInboundPorts"], "9191,9464");
  });
});

describe("parseSidecarSettings and Istio's ports", () => {
  it("refuses every port Istio's sidecar owns, naming the setting", () => {
    for (const port of [15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090]) {
      for (const name of ["grpc", "proxy", "metrics"]) {
        assert.throws(
          () => parseSidecarSettings({ ports: { [name]: port } }, { version: "0.1.0" }),
          (error: unknown) =>
            error instanceof Error &&
            error.message.includes(`ports.${name} uses port ${port}`) &&
            error.message.includes("Istio"),
        );
      }
    }
    assert.throws(
      () => parseSidecarSettings({ ports: { proxy: 9191 } }, { version: "0.1.0" }),
      /must differ/,
    );
  });

  it("injects a native sidecar only when asked, appended after existing init containers", () => {
    const native = parseSidecarSettings({ nativeSidecar: true }, { version: "0.1.0" });
    const pod = loadPod("istio-injected-pod");
    const patched = injectAndCheck(pod, native);
    const inits = initContainersOf(patched);
    assert.deepEqual(inits.slice(0, -1), initContainersOf(pod));
    assert.equal(inits.at(-1)?.name, sidecarContainerName);
    assert.equal(inits.at(-1)?.restartPolicy, "Always");
    assert.equal(containerNamed(patched, sidecarContainerName), undefined);
    const bare = injectAndCheck(loadPod("bare-pod"), native);
    assert.equal(initContainersOf(bare)[0]?.name, sidecarContainerName);
    assert.ok(initContainersOf(bare)[0]?.startupProbe !== undefined);
  });
});

describe("the test JSON Patch applier", () => {
  it("follows RFC 6902 on the RFC's own examples", () => {
    assert.deepEqual(applyJsonPatch({ foo: ["bar", "baz"] }, [{ op: "add", path: "/foo/1", value: "qux" }]), {
      foo: ["bar", "qux", "baz"],
    });
    assert.deepEqual(
      applyJsonPatch({ baz: "qux", foo: "bar" }, [{ op: "replace", path: "/baz", value: "boo" }]),
      {
        baz: "boo",
        foo: "bar",
      },
    );
    assert.deepEqual(
      applyJsonPatch({ foo: { bar: "baz", waldo: "fred" }, qux: { corge: "grault" } }, [
        { op: "move", from: "/foo/waldo", path: "/qux/thud" },
      ]),
      { foo: { bar: "baz" }, qux: { corge: "grault", thud: "fred" } },
    );
    assert.throws(
      () => applyJsonPatch({ foo: "bar" }, [{ op: "add", path: "/baz/bat", value: "qux" }]),
      JsonPatchError,
    );
    assert.throws(
      () => applyJsonPatch({ baz: "qux" }, [{ op: "test", path: "/baz", value: "bar" }]),
      JsonPatchError,
    );
    assert.deepEqual(applyJsonPatch({ "a/b": 1 }, [{ op: "remove", path: "/a~1b" }]), {});
  });
});

describe("parseSidecarSettings", () => {
  it("fills the documented defaults", () => {
    const s = parseSidecarSettings({}, { version: "1.2.3" });
    assert.equal(s.image, "ghcr.io/authority/authority:1.2.3");
    assert.deepEqual(s.ports, { grpc: 9191, proxy: 15101, metrics: 9464 });
    assert.equal(s.authorityUrl, "http://127.0.0.1:8080");
    assert.equal(s.redis, undefined);
    assert.equal(parseSidecarSettings({ image: "a:1" }, { image: "b:2", version: "x" }).image, "b:2");
  });

  it("without Redis the pod gets neither a Redis URL nor a cache key", () => {
    const patched = injectAndCheck(loadPod("plain-pod"), parseSidecarSettings({}, { version: "0.1.0" }));
    const sidecar = containerNamed(patched, sidecarContainerName);
    assert.equal(envValue(sidecar, "AUTHORITY_REDIS_URL"), undefined);
    assert.equal(envValue(sidecar, "AUTHORITY_SIDECAR_CACHE_KEY_FILE"), undefined);
    assert.equal(
      volumesOf(patched).some((v) => v.name === "authority-cache-key"),
      false,
    );
  });

  it("rejects unknown keys, bad ports, and Redis without a cache key", () => {
    assert.throws(
      () => parseSidecarSettings({ imagee: "x" }, { version: "1" }),
      /invalid_injector_settings|must NOT have additional/,
    );
    assert.throws(() => parseSidecarSettings({ ports: { grpc: 70000 } }, { version: "1" }), /ports\/grpc/);
    assert.throws(
      () => parseSidecarSettings({ redis: { url: "redis://r:6379/0" } }, { version: "1" }),
      /cacheKeySecret is required/,
    );
    assert.throws(
      () =>
        parseSidecarSettings(
          {
            redis: { url: "redis://r", urlSecret: { name: "a", key: "b" } },
            cacheKeySecret: { name: "k", key: "k" },
          },
          { version: "1" },
        ),
      /oneOf/,
    );
  });
});

describe("the sidecar's drain on SIGTERM", () => {
  const graceOf = (pod: Obj): unknown => (pod.spec as Obj).terminationGracePeriodSeconds;

  it("passes the drain period to the sidecar", () => {
    const patched = injectAndCheck(loadPod("plain-pod"));
    const sidecar = containerNamed(patched, sidecarContainerName);
    assert.equal(envValue(sidecar, "AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS")?.value, "5000");
    assert.equal(graceOf(patched), 30, "the default drain fits Kubernetes' default 30 s");
  });

  it("raises a terminationGracePeriodSeconds the drain, grace and flush do not fit in, and keeps a longer one", () => {
    const settings = { ...chartLikeSettings, shutdownWaitMs: 20_000 };
    const short = { ...loadPod("plain-pod") };
    short.spec = { ...(short.spec as Obj), terminationGracePeriodSeconds: 10 };
    assert.equal(graceOf(injectAndCheck(short, settings)), 45);
    const unset = loadPod("bare-pod");
    delete (unset.spec as Obj).terminationGracePeriodSeconds;
    assert.equal(graceOf(injectAndCheck(unset, settings)), 45, "unset means Kubernetes' 30 s: raised");
    const long = loadPod("plain-pod");
    long.spec = { ...(long.spec as Obj), terminationGracePeriodSeconds: 120 };
    assert.equal(graceOf(injectAndCheck(long, settings)), 120);
  });
});

// Decision 3041 injects GLIBC_TUNABLES beside NODE_OPTIONS and MALLOC_ARENA_MAX: only into the
// sidecar's own container, always the same values, whatever the pod carries.
describe("the sidecar's process environment against the pod's own", () => {
  it("is set once, from settings alone: no pod env or annotation reaches or merges into it (property)", () => {
    const names = ["GLIBC_TUNABLES", "NODE_OPTIONS", "MALLOC_ARENA_MAX", "LD_PRELOAD"];
    const valueArb = fc.oneof(
      fc.string(),
      fc.constantFrom(
        "glibc.malloc.tcache_count=0:glibc.rtld.nns=1",
        "--require=/tmp/evil.js",
        '{"billing-api":"x\\nGLIBC_TUNABLES=glibc.malloc.check=3"}',
        "x\nGLIBC_TUNABLES=glibc.malloc.check=3",
      ),
    );
    const annotationKeyArb = fc.constantFrom(
      capabilityMapAnnotation,
      "authority.io/glibc-tunables",
      "authority.io/env",
      "authority.io/node-options",
      "prometheus.io/scrape",
    );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.constantFrom(...names), valueArb), { maxLength: 4 }),
        fc.dictionary(annotationKeyArb, valueArb, { maxKeys: 4 }),
        (appEnv, annotations) => {
          const pod = loadPod("plain-pod");
          const spec = pod.spec as Obj;
          const app = {
            ...(containersOf(pod)[0] as Obj),
            env: appEnv.map(([name, value]) => ({ name, value })),
          };
          pod.spec = { ...spec, containers: [app, ...containersOf(pod).slice(1)] };
          pod.metadata = { ...(pod.metadata as Obj), annotations: { ...annotationsOf(pod), ...annotations } };
          let patch: ReturnType<typeof buildSidecarPatch>;
          try {
            patch = buildSidecarPatch(pod, chartLikeSettings);
          } catch (error) {
            assert.ok(error instanceof PodAnnotationError, String(error));
            return;
          }
          const patched = applyJsonPatch(pod, patch);
          assert.deepEqual(containersOf(patched)[0], app, "the workload's container is left as it was");
          const sidecar = containerNamed(patched, sidecarContainerName);
          const env = envOf(sidecar);
          assert.equal(new Set(env.map((e) => e.name)).size, env.length, "each variable once");
          assert.equal(envValue(sidecar, "GLIBC_TUNABLES")?.value, SIDECAR_GLIBC_TUNABLES);
          assert.equal(envValue(sidecar, "NODE_OPTIONS")?.value, SIDECAR_NODE_OPTIONS);
          assert.equal(envValue(sidecar, "MALLOC_ARENA_MAX")?.value, "2");
          assert.equal(envValue(sidecar, "LD_PRELOAD"), undefined);
          assert.equal(sidecar?.envFrom, undefined);
        },
      ),
      { numRuns: 200 },
    );
  });
});
