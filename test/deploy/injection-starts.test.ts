import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Client, credentials } from "@grpc/grpc-js";
import { parse, stringify } from "yaml";
import { reviewAdmission } from "../../src/servers/inject/admission.ts";
import { parseSidecarSettings } from "../../src/servers/inject/settings.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { containersOf, initContainersOf, loadReview } from "../servers/inject/fixtures.ts";
import { applyJsonPatch } from "../servers/inject/json-patch.ts";
import { checkMethod, envoyCheckRequest, unary } from "../servers/sidecar/grpc/helpers.ts";
import {
  CAPABILITY,
  PARTNER,
  startWorld,
  UPSTREAM_HOST,
  UPSTREAM_SECRET,
  type World,
} from "../servers/sidecar/world.ts";
import { at, isObj, loadYamlDocuments, type Obj, repoPath } from "./helpers.ts";
import { renderChart } from "./rendered-pod.ts";

/**
 * Injection that starts (issue 16, item 3): the chart rendered by the real Helm, the injector
 * run on a pod with the rendered settings, and `authority sidecar` started as the container
 * would be — the image's entry point (`node bin/authority.ts`) with the container's `args`,
 * and exactly the container's environment (nothing inherited from the test), Secret
 * references resolved from the Secrets the docs tell an operator to create. It must become
 * ready against a real authority and identity provider and allow a Check.
 */

const _run = promisify(execFile);
const CLIENT_ID = "sidecar-shop";
const CLIENT_SECRET = `s-${randomBytes(18).toString("base64url")}`;

type Secrets = Record<string, Record<string, string>>;

/** A container's environment as the kubelet would build it; a missing Secret key fails. */
/**
 * The container's command as the image runs it: the image's /app is this checkout, and its PATH
 * has Node. The injected command is the image's one-bootstrap sidecar start (decision 2951).
 */
function startContainerCommand(container: Obj, env: Record<string, string>): ChildProcess {
  assert.deepEqual(container.command, ["/app/bin/authority-sidecar"]);
  assert.equal(container.args, undefined);
  return spawn(repoPath("bin/authority-sidecar"), [], {
    cwd: repoPath("."),
    env: { ...env, PATH: `${dirname(process.execPath)}:/usr/bin:/bin` },
  });
}

function resolveEnv(container: Obj, secrets: Secrets): Record<string, string> {
  const env: Record<string, string> = {};
  for (const entry of (container.env ?? []) as Obj[]) {
    const name = String(entry.name);
    if (typeof entry.value === "string") {
      env[name] = entry.value;
      continue;
    }
    const ref =
      isObj(entry.valueFrom) && isObj(entry.valueFrom.secretKeyRef)
        ? entry.valueFrom.secretKeyRef
        : undefined;
    assert.ok(ref !== undefined, `env ${name} has neither a value nor a secretKeyRef`);
    const value = secrets[String(ref.name)]?.[String(ref.key)];
    assert.ok(value !== undefined, `env ${name}: Secret ${String(ref.name)} has no key ${String(ref.key)}`);
    env[name] = value;
  }
  return env;
}

async function waitReady(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    assert.equal(child.exitCode, null, `the sidecar exited (${String(child.exitCode)}):\n${output()}`);
    try {
      const response = await fetch(`http://127.0.0.1:${port}/readyz`);
      await response.arrayBuffer();
      if (response.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  assert.fail(`the sidecar did not become ready:\n${output()}`);
}

/** What the kubelet probes and the chart's PodMonitor scrapes, fetched from the started sidecar. */
async function assertProbesAndScrapesServed(container: Obj, rendered: unknown[]): Promise<void> {
  const portByName = new Map(
    ((container.ports ?? []) as Obj[]).map((port) => [String(port.name), Number(port.containerPort)]),
  );
  const portOf = (port: unknown): number => {
    const number = typeof port === "number" ? port : portByName.get(String(port));
    assert.ok(
      number !== undefined && Number.isInteger(number),
      `port ${String(port)} is a port of the container`,
    );
    return number;
  };
  const targets: { what: string; port: number; path: string }[] = [];
  for (const key of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const probe = container[key];
    if (!isObj(probe)) continue;
    assert.ok(isObj(probe.httpGet), `${key} is an HTTP probe`);
    targets.push({ what: key, port: portOf(probe.httpGet.port), path: String(probe.httpGet.path) });
  }
  assert.ok(targets.length >= 2, "the injected container is probed");
  const podMonitor = rendered.filter(isObj).find((d) => d.kind === "PodMonitor");
  assert.ok(podMonitor !== undefined && isObj(podMonitor.spec), "the chart renders a PodMonitor");
  for (const endpoint of (podMonitor.spec.podMetricsEndpoints ?? []) as Obj[]) {
    targets.push({
      what: "PodMonitor",
      port: portOf(endpoint.port),
      path: String(endpoint.path ?? "/metrics"),
    });
  }
  assert.ok(
    targets.some((t) => t.what === "PodMonitor"),
    "the PodMonitor scrapes an endpoint",
  );
  for (const { what, port, path } of targets) {
    const response = await fetch(`http://127.0.0.1:${port}${path}`);
    const body = await response.text();
    assert.equal(response.status, 200, `${what} ${path} on ${port}`);
    if (what === "PodMonitor")
      assert.match(body, /^# HELP authority_sidecar_/m, "Prometheus text from the sidecar");
  }
}

describe("an injected sidecar starts with exactly what the chart and the injector give it", () => {
  let world: World;
  let dir: TempDir;
  let child: ChildProcess | undefined;
  let output = "";

  before(async () => {
    world = await startWorld();
    dir = await makeTempDir("injection-starts-");
    await world.idp.directory.addClient({
      clientId: CLIENT_ID,
      clientSecret: CLIENT_SECRET,
      roles: ["sidecar", "sidecar_platform"],
    });
  });
  after(async () => {
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child?.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    }
    await dir?.cleanup();
    await world?.close();
  });

  it("renders, injects, starts, becomes ready and allows a Check", async () => {
    // Free ports instead of 9191/15101/9464: the machine is shared. Set through the chart's values.
    const ports = { grpc: await stablePort(), proxy: await stablePort(), metrics: await stablePort() };
    const valuesFile = join(dir.path, "values.yaml");
    await writeFile(
      valuesFile,
      stringify({
        authority: { issuer: world.context.config.issuer },
        metrics: { podMonitor: { enabled: true } },
        sidecar: {
          authorityUrl: world.authorityUrl,
          ports,
          capabilityMap: { [UPSTREAM_HOST]: "orders" },
        },
      }),
    );
    const objects = await renderChart(["-f", valuesFile]);
    const configMap = objects.find(
      (d) => d.kind === "ConfigMap" && isObj(d.data) && typeof d.data["settings.yaml"] === "string",
    );
    assert.ok(configMap !== undefined && isObj(configMap.data));
    // As `authority inject` reads its settings file.
    const settings = parseSidecarSettings(parse(String(configMap.data["settings.yaml"])), {
      version: "0.0.0",
    });

    const review = loadReview("plain-pod");
    const outcome = reviewAdmission(review, settings);
    assert.equal(outcome.result, "injected");
    const patch = JSON.parse(Buffer.from(outcome.review.response.patch ?? "", "base64").toString("utf8"));
    const pod = applyJsonPatch(review.request.object, patch);
    const container = [...initContainersOf(pod), ...containersOf(pod)].find(
      (c) => c.name === "authority-sidecar",
    );
    assert.ok(container !== undefined);

    // Every mounted volume must be one the kubelet fills without the operator: a mount of a
    // Secret would need a file this test (and a cluster) must provide.
    const volumes = ((isObj(pod.spec) ? pod.spec.volumes : []) ?? []) as Obj[];
    for (const mount of (container.volumeMounts ?? []) as Obj[]) {
      const volume = volumes.find((v) => v.name === mount.name);
      assert.ok(volume !== undefined && isObj(volume.emptyDir), `mount ${String(mount.name)} is an emptyDir`);
    }

    // The Secrets docs/deployment.md tells the operator to create in the pod's namespace.
    const secrets: Secrets = {
      "authority-sidecar-credentials": { "client-id": CLIENT_ID, "client-secret": CLIENT_SECRET },
    };
    const env = resolveEnv(container, secrets);
    child = startContainerCommand(container, env);
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    await waitReady(ports.metrics, child, () => output);
    await assertProbesAndScrapesServed(container, objects);

    const client = new Client(`127.0.0.1:${ports.grpc}`, credentials.createInsecure());
    const check = () =>
      unary(
        client,
        checkMethod,
        envoyCheckRequest({
          method: "GET",
          path: "/orders/42",
          host: UPSTREAM_HOST,
          headers: { authorization: `Bearer ${world.tokens.agent}` },
          // No capability_id: the capability map the chart and the pod annotation gave decides.
          contextExtensions: {},
          id: `req-${randomBytes(6).toString("hex")}`,
        }),
      );
    try {
      // A caller's first Check fetches its policy, signer keys, catalog and credentials within
      // Envoy's 200 ms: on a loaded machine that may time out (503, fail closed). What this test
      // proves is that the started sidecar allows; the first Check's cost after ready is
      // test/servers/sidecar/first-check.test.ts's.
      const seen: string[] = [];
      let response = await check();
      for (let attempt = 0; response.status.code !== 0 && attempt < 10; attempt++) {
        seen.push(String(response.denied_response?.body));
        await new Promise((resolve) => setTimeout(resolve, 300));
        response = await check();
      }
      assert.equal(response.status.code, 0, `${seen.join("\n")}\n${output}`);
      if (seen.length > 0)
        process.stderr.write(`injection-starts: denied before the allow: ${seen.join("; ")}\n`);
      const set = Object.fromEntries(
        (response.ok_response.headers as { header: { key: string; value: string } }[]).map((h) => [
          h.header.key,
          h.header.value,
        ]),
      );
      assert.equal(set["x-api-key"], UPSTREAM_SECRET);
    } finally {
      client.close();
    }
    assert.ok(!output.includes(CLIENT_SECRET), "the client secret is never logged");
  });
});

describe("deploy/kubernetes/example-app.yaml's sidecar starts as documented", () => {
  let world: World;
  let dir: TempDir;
  let child: ChildProcess | undefined;
  let output = "";

  before(async () => {
    world = await startWorld({ redis: true });
    dir = await makeTempDir("example-app-starts-");
    await world.idp.directory.addClient({
      clientId: CLIENT_ID,
      clientSecret: CLIENT_SECRET,
      roles: ["sidecar"],
      // a sidecar's client is its partner's, scoped to the pod's capabilities (decision 2513)
      claims: { partner_id: PARTNER },
      scopes: [`authority/sidecar.capability:${CAPABILITY}`],
    });
  });
  after(async () => {
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child?.once("exit", resolve));
      child.kill("SIGKILL");
      await exited;
    }
    await dir?.cleanup();
    await world?.close();
  });

  it("with the Secrets namespace.yaml names and the issuer set, becomes ready", async () => {
    const deployment = loadYamlDocuments("deploy/kubernetes/example-app.yaml").find(
      (doc) => doc.kind === "Deployment",
    );
    const container = ((at(deployment, ["spec", "template", "spec", "containers"]) ?? []) as Obj[]).find(
      (c) => c.name === "authority-sidecar",
    );
    assert.ok(container !== undefined);
    // The Secrets namespace.yaml tells the operator to create, resolved as the kubelet does.
    const cacheKey = Buffer.from(world.cacheKey).toString("base64");
    const env = resolveEnv(container, {
      "authority-sidecar-credentials": { "client-id": CLIENT_ID, "client-secret": CLIENT_SECRET },
      "authority-sidecar-cache-key": { "cache-key": cacheKey },
    });
    assert.equal(env.AUTHORITY_ISSUER, "https://login.example.com/", "the placeholder the docs say to set");
    // What differs on this machine: the cluster's addresses (the authority, the issuer the
    // operator sets, Redis), free ports instead of the shared machine's fixed ones, and the
    // cache-key Secret's mount as a file. Everything else is the container's own.
    const cacheKeyFile = join(dir.path, "cache-key");
    await writeFile(cacheKeyFile, cacheKey, { mode: 0o600 });
    const ports = { grpc: await stablePort(), proxy: await stablePort(), metrics: await stablePort() };
    Object.assign(env, {
      AUTHORITY_URL: world.authorityUrl,
      AUTHORITY_ISSUER: world.context.config.issuer,
      AUTHORITY_REDIS_URL: world.redis?.url ?? "",
      AUTHORITY_SIDECAR_CACHE_KEY_FILE: cacheKeyFile,
      AUTHORITY_STATE_DIR: join(dir.path, "state"),
      AUTHORITY_SIDECAR_GRPC_LISTEN: `127.0.0.1:${ports.grpc}`,
      AUTHORITY_SIDECAR_PROXY_LISTEN: `127.0.0.1:${ports.proxy}`,
      AUTHORITY_SIDECAR_METRICS_LISTEN: `127.0.0.1:${ports.metrics}`,
    });
    child = startContainerCommand(container, env);
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    await waitReady(ports.metrics, child, () => output);
    assert.ok(!output.includes(CLIENT_SECRET), "the client secret is never logged");
  });
});
