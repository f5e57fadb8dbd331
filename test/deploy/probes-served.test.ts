import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { request } from "node:https";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { stablePort } from "../helpers/stable-port.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { selfSignedCert } from "../servers/inject/tls.ts";
import { isObj, type Obj, repoPath } from "./helpers.ts";
import { deploymentPod, renderChart } from "./rendered-pod.ts";

/**
 * Every port and path the chart probes or scrapes is served by the process it targets
 * (issue 16, item 5): the chart rendered by the real Helm, each Deployment's container started
 * as the image would start it (`node bin/authority.ts` with the container's args and the
 * environment of its ConfigMap), and every probe and ServiceMonitor endpoint fetched from it.
 * Only what a test machine cannot give the pod is overridden by flags (which win over the
 * environment): a free loopback port, a writable state directory, the TLS files and settings
 * of the mounted Secret and ConfigMap. The injected sidecar's probes and the PodMonitor are
 * test/deploy/injection-starts.test.ts's.
 */

const _run = promisify(execFile);

interface Target {
  readonly what: string;
  readonly port: string;
  readonly path: string;
}

/** The container's environment: its ConfigMap (envFrom) and its literal values. */
function environment(objects: Obj[], container: Obj): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of (container.envFrom ?? []) as Obj[]) {
    if (!isObj(from.configMapRef)) continue;
    const ref = from.configMapRef;
    const map = objects.find(
      (o) => o.kind === "ConfigMap" && isObj(o.metadata) && o.metadata.name === ref.name,
    );
    assert.ok(map !== undefined && isObj(map.data), `ConfigMap ${String(ref.name)}`);
    Object.assign(env, map.data);
  }
  for (const entry of (container.env ?? []) as Obj[]) {
    if (typeof entry.value === "string") env[String(entry.name)] = entry.value;
  }
  return env;
}

function probes(container: Obj): Target[] {
  return ["startupProbe", "livenessProbe", "readinessProbe"].flatMap((key) => {
    const probe = container[key];
    if (!isObj(probe)) return [];
    assert.ok(isObj(probe.httpGet), `${key} is an HTTP probe`);
    return [{ what: key, port: String(probe.httpGet.port), path: String(probe.httpGet.path) }];
  });
}

/** A named container port: the one a probe or a Service's targetPort names. */
function containerPort(container: Obj, name: string): number {
  const port = ((container.ports ?? []) as Obj[]).find(
    (p) => p.name === name || String(p.containerPort) === name,
  );
  assert.ok(port !== undefined, `port ${name} is declared by the container`);
  return Number(port.containerPort);
}

function start(args: string[], env: Record<string, string>): { child: ChildProcess; output: () => string } {
  let output = "";
  const child = spawn(process.execPath, ["bin/authority.ts", ...args], {
    cwd: repoPath("."),
    env: { ...env, PATH: process.env.PATH ?? "" },
  });
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return { child, output: () => output };
}

async function answer(
  url: string,
  child: ChildProcess,
  output: () => string,
  ok: (status: number) => boolean,
): Promise<{ status: number; body: string }> {
  const deadline = Date.now() + 30_000;
  let last = { status: 0, body: "" };
  while (Date.now() < deadline) {
    assert.equal(child.exitCode, null, `the process exited:\n${output()}`);
    try {
      last = url.startsWith("https:") ? await httpsGet(url) : await httpGet(url);
      if (ok(last.status)) return last;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  assert.fail(`${url} answered ${last.status} ${last.body.slice(0, 200)}\n${output()}`);
}

async function httpGet(url: string): Promise<{ status: number; body: string }> {
  const response = await fetch(url);
  return { status: response.status, body: await response.text() };
}

function httpsGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // The certificate is the test's own self-signed one: the kubelet does not verify it either.
    const req = request(url, { rejectUnauthorized: false }, (response) => {
      let body = "";
      response.on("data", (chunk: Buffer) => {
        body += chunk.toString();
      });
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("every port and path the chart probes or scrapes is served by the process it targets", () => {
  let dir: TempDir;
  let objects: Obj[];
  const children: ChildProcess[] = [];

  before(async () => {
    dir = await makeTempDir("probes-served-");
    // The one-process mode, chosen: the probes are the same in every mode, and this test starts
    // no crypto service (chart-crypto-service.test.ts starts both as rendered).
    objects = await renderChart([
      "--set",
      "metrics.serviceMonitor.enabled=true",
      "--set",
      "authority.policyProtection.mode=embedded",
    ]);
  });
  after(async () => {
    for (const child of children) child.kill("SIGKILL");
    await dir.cleanup();
  });

  it("authority serve answers its probes and the ServiceMonitor's /metrics", async () => {
    const { container } = deploymentPod(objects, "authority");
    const args = (container.args ?? []) as string[];
    assert.deepEqual(args, ["serve"]);
    const monitor = objects.find((o) => o.kind === "ServiceMonitor");
    const service = objects.find(
      (o) => o.kind === "Service" && isObj(o.metadata) && o.metadata.name === "authority",
    );
    assert.ok(monitor !== undefined && isObj(monitor.spec) && service !== undefined && isObj(service.spec));
    const servicePorts = service.spec.ports as Obj[];
    const scraped: Target[] = ((monitor.spec.endpoints ?? []) as Obj[]).map((endpoint) => {
      // A ServiceMonitor names the Service's port; the Service maps it onto the container's.
      const servicePort = servicePorts.find((p) => p.name === endpoint.port);
      assert.ok(servicePort !== undefined, `the Service has port ${String(endpoint.port)}`);
      return { what: "ServiceMonitor", port: String(servicePort.targetPort), path: String(endpoint.path) };
    });
    assert.equal(scraped.length, 1);
    const targets = [...probes(container), ...scraped];
    assert.ok(targets.length >= 3);

    const ports = new Set(targets.map((t) => containerPort(container, t.port)));
    assert.equal(ports.size, 1, "one listener serves the probes and the scrape");
    const port = await stablePort();
    const state = join(dir.path, "authority-state");
    const { child, output } = start(
      [
        ...args,
        "--listen",
        `127.0.0.1:${port}`,
        "--state-dir",
        state,
        "--store",
        `sqlite:${join(state, "a.db")}`,
      ],
      environment(objects, container),
    );
    children.push(child);
    for (const target of targets) {
      // /readyz says 503 while a dependency is missing (no identity provider here): served, not a 404.
      const ok =
        target.what === "readinessProbe" ? (s: number) => s === 200 || s === 503 : (s: number) => s === 200;
      const { status, body } = await answer(`http://127.0.0.1:${port}${target.path}`, child, output, ok);
      assert.ok(ok(status), `${target.what} ${target.path}: ${status}`);
      if (target.what === "ServiceMonitor") assert.match(body, /^# HELP /m, "Prometheus text");
      if (target.what === "readinessProbe") assert.ok(isObj(JSON.parse(body)), "readiness answers its JSON");
    }
  });

  it("authority inject answers its probes over the TLS the chart mounts", async () => {
    const { container } = deploymentPod(objects, "authority-injector");
    const args = (container.args ?? []) as string[];
    assert.deepEqual(args, ["inject"]);
    const targets = probes(container);
    assert.ok(targets.length >= 2);
    const tls = await selfSignedCert();
    await writeFile(join(dir.path, "tls.crt"), tls.cert);
    await writeFile(join(dir.path, "tls.key"), tls.key, { mode: 0o600 });
    const settings = objects.find(
      (o) => o.kind === "ConfigMap" && isObj(o.data) && typeof o.data["settings.yaml"] === "string",
    );
    assert.ok(settings !== undefined && isObj(settings.data));
    await writeFile(join(dir.path, "settings.yaml"), String(settings.data["settings.yaml"]));
    const port = await stablePort();
    const { child, output } = start(
      [
        ...args,
        "--listen",
        `127.0.0.1:${port}`,
        "--tls-cert",
        join(dir.path, "tls.crt"),
        "--tls-key",
        join(dir.path, "tls.key"),
        "--settings-file",
        join(dir.path, "settings.yaml"),
      ],
      environment(objects, container),
    );
    children.push(child);
    for (const target of targets) {
      containerPort(container, target.port);
      const { status } = await answer(
        `https://127.0.0.1:${port}${target.path}`,
        child,
        output,
        (s) => s === 200,
      );
      assert.equal(status, 200, `${target.what} ${target.path}`);
    }
  });
});
