import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { parse, parseAllDocuments } from "yaml";
import { parseSidecarSettings, type SidecarSettings } from "../../src/servers/inject/settings.ts";
import { createWebhookServer, type WebhookServer } from "../../src/servers/inject/webhook-server.ts";
import { projectTool } from "../helpers/peer-process.ts";
import {
  annotationsOf,
  checkPodConsistency,
  containersOf,
  type FixtureName,
  initContainersOf,
  loadReview,
  validatePod,
} from "../servers/inject/fixtures.ts";
import { applyJsonPatch } from "../servers/inject/json-patch.ts";
import { httpsRequest, selfSignedCert } from "../servers/inject/tls.ts";
import { isObj, type Obj, repoPath } from "./helpers.ts";
import { REQUIRED_VALUES_FILE } from "./rendered-pod.ts";

/**
 * The chart's injector beside Istio, whatever the release name: the chart is rendered by the
 * real Helm, the webhook that the API server would call is chosen by evaluating the rendered
 * MutatingWebhookConfiguration's selectors against the namespace's labels, and the real
 * webhook server (with the rendered settings) patches the fixture pods. The sidecar must not
 * bind a port Istio's proxy owns, and its probed ports must be out of Istio's inbound capture.
 */

const run = promisify(execFile);
const chart = repoPath("charts/authority");
/** From Istio's "Ports used by Istio" page, written out here rather than imported from src/. */
const ISTIO_PORTS = [15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090];
const RELEASE_NAMES = ["authority", "zz-authz", "a", "prod-authority-eu-west-1"];
/** Names Istio gives its MutatingWebhookConfigurations (istiod chart, revision tags). */
const ISTIO_WEBHOOK_NAMES = [
  "istio-sidecar-injector",
  "istio-revision-tag-default",
  "istio-sidecar-injector-1-24",
];

interface Rendered {
  readonly webhookConfig: Obj;
  readonly settings: SidecarSettings;
}

async function render(release: string, kubeVersion: string): Promise<Rendered> {
  const { stdout } = await run(
    projectTool("helm"),
    [
      "template",
      release,
      chart,
      "--namespace",
      "authority-system",
      "--kube-version",
      kubeVersion,
      "-f",
      REQUIRED_VALUES_FILE,
    ],
    { maxBuffer: 32 * 1024 * 1024, timeout: 60_000 },
  );
  const docs = parseAllDocuments(stdout)
    .map((d) => d.toJS() as unknown)
    .filter(isObj);
  const webhookConfig = docs.find((d) => d.kind === "MutatingWebhookConfiguration");
  const configMap = docs.find(
    (d) => d.kind === "ConfigMap" && isObj(d.data) && typeof d.data["settings.yaml"] === "string",
  );
  assert.ok(webhookConfig !== undefined && configMap !== undefined && isObj(configMap.data));
  const settings = parseSidecarSettings(parse(String(configMap.data["settings.yaml"])), { version: "0.0.0" });
  return { webhookConfig, settings };
}

type Labels = Record<string, string>;
interface Expression {
  readonly key: string;
  readonly operator: "In" | "NotIn" | "Exists" | "DoesNotExist";
  readonly values?: string[];
}

/** Kubernetes label-selector semantics (NotIn matches an absent key). */
function selects(selector: unknown, labels: Labels): boolean {
  if (!isObj(selector)) return true;
  const matchLabels = (isObj(selector.matchLabels) ? selector.matchLabels : {}) as Labels;
  if (!Object.entries(matchLabels).every(([k, v]) => labels[k] === v)) return false;
  const expressions = (
    Array.isArray(selector.matchExpressions) ? selector.matchExpressions : []
  ) as Expression[];
  return expressions.every((e) => {
    const value = labels[e.key];
    switch (e.operator) {
      case "In":
        return value !== undefined && (e.values ?? []).includes(value);
      case "NotIn":
        return value === undefined || !(e.values ?? []).includes(value);
      case "Exists":
        return value !== undefined;
      case "DoesNotExist":
        return value === undefined;
    }
    throw new Error(`unknown operator ${String(e.operator)}`);
  });
}

/** The webhooks of the configuration the API server would call for a pod in this namespace. */
function webhooksFor(config: Obj, namespaceLabels: Labels, podLabels: Labels): Obj[] {
  const webhooks = (Array.isArray(config.webhooks) ? config.webhooks : []) as Obj[];
  return webhooks.filter(
    (w) => selects(w.namespaceSelector, namespaceLabels) && selects(w.objectSelector, podLabels),
  );
}

const NAMESPACES: { readonly labels: Labels; readonly istio: boolean }[] = [
  { labels: { "istio-injection": "enabled" }, istio: true },
  { labels: { "istio.io/rev": "1-24" }, istio: true },
  { labels: { "istio-injection": "enabled", "istio.io/rev": "1-24" }, istio: true },
  { labels: {}, istio: false },
  { labels: { "istio-injection": "disabled" }, istio: false },
  // Istio: an istio-injection label wins over istio.io/rev.
  { labels: { "istio-injection": "disabled", "istio.io/rev": "1-24" }, istio: false },
];

const namespaceLabels = (extra: Labels): Labels => ({
  "kubernetes.io/metadata.name": "shop",
  "authority-injection": "enabled",
  ...extra,
});

const list = (v: unknown): Obj[] => (Array.isArray(v) ? (v as Obj[]).filter(isObj) : []);
const sidecarOf = (pod: Obj): Obj | undefined =>
  [...containersOf(pod), ...initContainersOf(pod)].find((c) => c.name === "authority-sidecar");

/** Every port the sidecar listens on: declared container ports and its *_LISTEN variables. */
function sidecarPorts(sidecar: Obj): number[] {
  const declared = list(sidecar.ports).map((p) => Number(p.containerPort));
  const listened = list(sidecar.env)
    .filter((e) => typeof e.name === "string" && e.name.endsWith("_LISTEN"))
    .map((e) => Number(String(e.value).split(":").at(-1)));
  return [...declared, ...listened];
}

const pathOf = (webhook: Obj | undefined): string => {
  const clientConfig = isObj(webhook?.clientConfig) ? webhook.clientConfig : {};
  return isObj(clientConfig.service) ? String(clientConfig.service.path) : "";
};

const probePorts = (sidecar: Obj): number[] =>
  ["readinessProbe", "livenessProbe", "startupProbe"].flatMap((key) => {
    const probe = sidecar[key];
    if (!isObj(probe) || !isObj(probe.httpGet)) return [];
    return [Number(probe.httpGet.port)];
  });

interface ReviewAnswer {
  response: { allowed: boolean; patch?: string };
}

describe("the injector beside Istio, rendered by Helm for several release names", () => {
  const rendered = new Map<string, Rendered>();
  const servers: WebhookServer[] = [];
  let tls: Awaited<ReturnType<typeof selfSignedCert>>;

  before(async () => {
    tls = await selfSignedCert();
    for (const release of RELEASE_NAMES) rendered.set(release, await render(release, "1.31.0"));
  });
  after(async () => {
    for (const server of servers) await server.close();
  });

  async function inject(settings: SidecarSettings, path: string, fixture: FixtureName): Promise<Obj> {
    const server = createWebhookServer({ tls, settings });
    servers.push(server);
    const { url } = await server.listen("127.0.0.1", 0);
    const review = loadReview(fixture);
    const res = await httpsRequest(`${url}${path}`, {
      ca: tls.cert,
      method: "POST",
      body: JSON.stringify(review),
    });
    assert.equal(res.status, 200, res.body);
    const answer = JSON.parse(res.body) as ReviewAnswer;
    assert.equal(answer.response.allowed, true);
    const patch = JSON.parse(Buffer.from(answer.response.patch ?? "", "base64").toString("utf8"));
    const patched = applyJsonPatch(review.request.object, patch);
    validatePod(patched);
    checkPodConsistency(patched);
    return patched;
  }

  it("names the webhook configuration the same for every release, before Istio's in call order", () => {
    const names = [...rendered.values()].map((r) => r.webhookConfig.metadata);
    const configNames = names.map((m) => (isObj(m) ? m.name : undefined));
    assert.deepEqual(new Set(configNames), new Set(["authority-sidecar-injector"]));
    for (const istio of ISTIO_WEBHOOK_NAMES) assert.ok("authority-sidecar-injector" < istio, istio);
  });

  it("calls exactly one webhook per namespace, on the path that says whether Istio injects it", () => {
    for (const { webhookConfig } of rendered.values()) {
      for (const ns of NAMESPACES) {
        const matched = webhooksFor(webhookConfig, namespaceLabels(ns.labels), {
          "authority.io/inject": "true",
        });
        assert.equal(matched.length, 1, JSON.stringify(ns.labels));
        assert.equal(
          pathOf(matched[0]),
          ns.istio ? "/mutate/istio-namespace" : "/mutate",
          JSON.stringify(ns.labels),
        );
      }
      // Not opted in: no webhook at all.
      assert.equal(
        webhooksFor(webhookConfig, namespaceLabels({ "istio-injection": "enabled" }), {}).length,
        0,
      );
      assert.equal(
        webhooksFor(webhookConfig, { "istio-injection": "enabled" }, { "authority.io/inject": "true" })
          .length,
        0,
      );
    }
  });

  it("injects no port Istio owns and keeps every probed port out of Istio's capture, in every namespace", async () => {
    for (const [release, { webhookConfig, settings }] of rendered) {
      for (const ns of NAMESPACES) {
        const [webhook] = webhooksFor(webhookConfig, namespaceLabels(ns.labels), {
          "authority.io/inject": "true",
        });
        const path = pathOf(webhook);
        // plain-pod: Authority's webhook runs first (its name sorts first), Istio has not injected yet.
        const patched = await inject(settings, path, "plain-pod");
        const sidecar = sidecarOf(patched);
        assert.ok(sidecar !== undefined, `${release} ${JSON.stringify(ns.labels)}`);
        for (const port of sidecarPorts(sidecar)) assert.ok(!ISTIO_PORTS.includes(port), `port ${port}`);
        const excluded = (annotationsOf(patched)["traffic.sidecar.istio.io/excludeInboundPorts"] ?? "")
          .split(",")
          .filter((p) => p.length > 0)
          .map(Number);
        if (ns.istio) {
          // Istio's injector reads this annotation when it builds istio-init's iptables rules.
          for (const port of probePorts(sidecar)) assert.ok(excluded.includes(port), `probe port ${port}`);
          assert.ok(excluded.includes(settings.ports.grpc));
        } else {
          assert.deepEqual(excluded, []);
        }
      }
    }
  });

  it("beside an already injected istio-proxy: no shared port, and the probes stay reachable", async () => {
    const { settings } = rendered.get("authority") as Rendered;
    const patched = await inject(settings, "/mutate", "istio-injected-pod");
    const sidecar = sidecarOf(patched) as Obj;
    const istioProxy = containersOf(patched).find((c) => c.name === "istio-proxy") as Obj;
    const istioPorts = list(istioProxy.ports).map((p) => Number(p.containerPort));
    for (const port of sidecarPorts(sidecar)) {
      assert.ok(!ISTIO_PORTS.includes(port) && !istioPorts.includes(port), `port ${port}`);
    }
    const excluded = (annotationsOf(patched)["traffic.sidecar.istio.io/excludeInboundPorts"] ?? "").split(
      ",",
    );
    for (const port of probePorts(sidecar)) assert.ok(excluded.includes(String(port)));
  });

  it("injects a native sidecar on Kubernetes 1.29+, a regular container before, and gates the app without Istio", async () => {
    const modern = rendered.get("authority") as Rendered;
    assert.equal(modern.settings.nativeSidecar, true);
    const plain = await inject(modern.settings, "/mutate", "plain-pod");
    const native = initContainersOf(plain).find((c) => c.name === "authority-sidecar");
    assert.ok(native !== undefined);
    assert.equal(native.restartPolicy, "Always");
    assert.ok(isObj(native.startupProbe), "the app's containers wait for the sidecar's readiness");
    assert.equal((native.startupProbe.httpGet as Obj).path, "/readyz");
    assert.equal(
      containersOf(plain).some((c) => c.name === "authority-sidecar"),
      false,
    );
    // Beside Istio the sidecar is still native but does not hold the pod's start (see 0901).
    const meshed = await inject(modern.settings, "/mutate/istio-namespace", "plain-pod");
    const nativeMeshed = sidecarOf(meshed) as Obj;
    assert.equal(nativeMeshed.restartPolicy, "Always");
    assert.equal(nativeMeshed.startupProbe, undefined);

    const old = await render("authority", "1.28.0");
    assert.equal(old.settings.nativeSidecar, false);
    const regular = await inject(old.settings, "/mutate", "plain-pod");
    assert.ok(containersOf(regular).some((c) => c.name === "authority-sidecar"));
    assert.equal(
      initContainersOf(regular).length,
      initContainersOf(loadReview("plain-pod").request.object).length,
    );
  });

  it("refuses Istio's ports in the chart values with a clear message", async () => {
    await assert.rejects(
      run(
        projectTool("helm"),
        [
          "template",
          "authority",
          chart,
          "--kube-version",
          "1.31.0",
          "-f",
          REQUIRED_VALUES_FILE,
          "--set",
          "sidecar.ports.proxy=15001",
        ],
        { timeout: 60_000 },
      ),
      (error: unknown) => {
        const stderr = String((error as { stderr?: unknown }).stderr);
        return stderr.includes("sidecar.ports.proxy is 15001") && stderr.includes("Istio");
      },
    );
  });
});
