import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdir, readFile, readlink, realpath } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Client, credentials } from "@grpc/grpc-js";
import { SIDECAR_COMMAND, SIDECAR_NODE_OPTIONS } from "../../src/servers/inject/patch.ts";
import { runBound } from "../helpers/bound-command.ts";
import { type PeerProcess, startPeerProcess } from "../helpers/peer-process.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { checkMethod, envoyCheckRequest, unary } from "../servers/sidecar/grpc/helpers.ts";
import { PARTNER, startWorld, UPSTREAM_HOST, UPSTREAM_SECRET, type World } from "../servers/sidecar/world.ts";
import { isObj, repoPath } from "./helpers.ts";

/**
 * The image is built and started (issue 28, item 6): every step of deploy/Containerfile run by
 * buildah on a local base (scripts/local-image.sh: Debian + the pinned Node 24 + npm, since no
 * image registry is reachable here), then the image's entry point started as the sidecar inside
 * the image's own root file system (chroot, host network, the image's user, working directory
 * and environment), against a real authority and identity provider: it must become ready and
 * allow a Check. A container runtime (`podman run`) would add namespaces and rlimits, which this
 * sandbox refuses; what the image contains and how it starts is what is checked.
 */

const run = promisify(execFile);
const STORE = [
  "--root",
  repoPath(".tools/containers/storage"),
  "--runroot",
  repoPath(".tools/containers/run"),
  "--storage-driver",
  "vfs",
];
const CLIENT_ID = "sidecar-image";
const CLIENT_SECRET = `s-${randomBytes(18).toString("base64url")}`;
const BUILD_MS = 15 * 60_000;

/** buildah, and the build below, as bound commands: they die with this test (bound-command.ts). */
async function buildah(args: string[]): Promise<string> {
  const { stdout } = await runBound("buildah", [...STORE, ...args], { timeoutMs: 120_000 });
  return stdout.trim();
}

interface ImageConfig {
  readonly User: string;
  readonly Env: string[];
  readonly Entrypoint: string[];
  readonly Cmd: string[];
  readonly WorkingDir: string;
}

async function imageConfig(image: string): Promise<ImageConfig> {
  const inspected: unknown = JSON.parse(await buildah(["inspect", "--type", "image", image]));
  assert.ok(isObj(inspected) && isObj(inspected.OCIv1) && isObj(inspected.OCIv1.config));
  return inspected.OCIv1.config as unknown as ImageConfig;
}

/** The status of the sidecar's /readyz, 0 while nothing listens. */
async function readyStatus(port: number): Promise<number> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/readyz`);
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

describe("the image builds from deploy/Containerfile, and its sidecar starts, becomes ready and allows", () => {
  let image = "";
  let world: World;
  let container: string | undefined;
  let sidecar: PeerProcess | undefined;

  before(
    async () => {
      world = await startWorld();
      await world.idp.directory.addClient({
        clientId: CLIENT_ID,
        clientSecret: CLIENT_SECRET,
        roles: ["sidecar"],
        // scoped like an injected sidecar: its partner and its pod's capability
        claims: { partner_id: PARTNER },
        scopes: ["authority/sidecar.capability:orders"],
      });
      try {
        const built = await runBound("bash", [repoPath("scripts/local-image.sh"), "build"], {
          timeoutMs: BUILD_MS,
          maxBuffer: 64 << 20,
        });
        image = built.stdout.trim();
      } catch (error) {
        const { stderr } = error as { stderr?: string };
        assert.fail(`scripts/local-image.sh build failed:\n${String(stderr ?? error).slice(-8000)}`);
      }
    },
    { timeout: BUILD_MS + 60_000 },
  );
  after(async () => {
    await sidecar?.stop();
    if (container !== undefined) await buildah(["rm", container]);
    await world?.close();
  });

  it("runs as its non-root user from /app with node bin/authority.ts as its entry point", async () => {
    const config = await imageConfig(image);
    assert.equal(config.User, "10001:10001");
    assert.equal(config.WorkingDir, "/app");
    assert.deepEqual(config.Entrypoint, ["node", "bin/authority.ts"]);
    assert.deepEqual(config.Cmd, ["serve"]);
  });

  it("the image's sidecar, started in the image's root, becomes ready and allows a Check", {
    timeout: 300_000,
  }, async () => {
    const config = await imageConfig(image);
    container = await buildah(["from", "--pull=never", image]);
    const root = await buildah(["mount", container]);
    const ports = { grpc: await stablePort(), proxy: await stablePort(), metrics: await stablePort() };
    // The image's environment, then the sidecar's settings as the injector gives them.
    const env: Record<string, string> = Object.fromEntries(
      config.Env.map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]),
    );
    Object.assign(env, {
      AUTHORITY_URL: world.authorityUrl,
      AUTHORITY_ISSUER: world.context.config.issuer,
      AUTHORITY_CLIENT_ID: CLIENT_ID,
      AUTHORITY_CLIENT_SECRET: CLIENT_SECRET,
      AUTHORITY_SIDECAR_GRPC_LISTEN: `127.0.0.1:${ports.grpc}`,
      AUTHORITY_SIDECAR_PROXY_LISTEN: `127.0.0.1:${ports.proxy}`,
      AUTHORITY_SIDECAR_METRICS_LISTEN: `127.0.0.1:${ports.metrics}`,
      AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [UPSTREAM_HOST]: "orders" }),
      NODE_OPTIONS: SIDECAR_NODE_OPTIONS,
    });
    // chroot resolves the user in the image and execs env inside it, which changes to the
    // image's working directory and execs the injected sidecar's command: one process, the
    // image's node started from the image's snapshot (under the peer watchdog, so it cannot
    // outlive the test).
    sidecar = startPeerProcess({
      command: "chroot",
      args: [
        `--userspec=${config.User}`,
        root,
        "/usr/bin/env",
        `--chdir=${config.WorkingDir}`,
        ...SIDECAR_COMMAND,
      ],
      env,
    });
    const started = sidecar;

    const deadline = Date.now() + 120_000;
    let ready = 0;
    while (ready !== 200 && Date.now() < deadline) {
      assert.ok(started.running, `the image's sidecar exited:\n${started.output()}`);
      ready = await readyStatus(ports.metrics);
      if (ready !== 200) await new Promise((resolve) => setTimeout(resolve, 250));
    }
    assert.equal(ready, 200, `the image's sidecar did not become ready:\n${started.output()}`);

    // It is the image's node, in the image's root, as the image's user.
    const pid = await started.pid;
    const rootPath = await realpath(root);
    assert.equal(await readlink(`/proc/${pid}/root`), rootPath);
    assert.equal(await readlink(`/proc/${pid}/cwd`), `${rootPath}/app`);
    assert.match(await readFile(`/proc/${pid}/status`, "utf8"), /^Uid:\s+10001\s/m);
    // The image's start-up snapshot matches the image's Node and sources (decisions 2799, 2951):
    // the injected command started Node from it, in one bootstrap (no /proc needed).
    const args = (await readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0").filter(Boolean);
    assert.deepEqual(args, [
      "node",
      "--expose-gc",
      "--snapshot-blob",
      "/app/bin/../build/sidecar-snapshot/sidecar.blob",
      "/app/bin/authority.ts",
      "sidecar",
    ]);
    assert.doesNotMatch(started.output(), /start-up snapshot not used/);
    const { stdout: choice } = await run(
      "chroot",
      [
        `--userspec=${config.User}`,
        root,
        "/usr/bin/env",
        `--chdir=${config.WorkingDir}`,
        "node",
        "-e",
        'import("/app/src/cli/sidecar-snapshot.ts").then((m) => console.log(JSON.stringify(m.chooseSnapshot("/app/", undefined))))',
      ],
      { env },
    );
    assert.deepEqual(JSON.parse(choice), { use: "blob", blob: "/app/build/sidecar-snapshot/sidecar.blob" });
    // The build filled Node's compile cache as that user (Node keys the cache by user id).
    const caches = await readdir(`${rootPath}/var/cache/authority-node`);
    assert.ok(
      caches.some((name) => name.endsWith("-10001")),
      `compile caches: ${caches.join(", ")}`,
    );

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
          contextExtensions: {},
          id: `req-${randomBytes(6).toString("hex")}`,
        }),
      );
    try {
      // As in injection-starts.test.ts: a first Check on a loaded machine may exceed its
      // deadline and fail closed; what is proven here is that the image's sidecar allows.
      let response = await check();
      for (let attempt = 0; response.status.code !== 0 && attempt < 10; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        response = await check();
      }
      assert.equal(response.status.code, 0, started.output());
      const headers = (response.ok_response.headers as { header: { key: string; value: string } }[]).map(
        (h) => [h.header.key, h.header.value],
      );
      assert.equal(Object.fromEntries(headers)["x-api-key"], UPSTREAM_SECRET);
    } finally {
      client.close();
    }
    assert.ok(!started.output().includes(CLIENT_SECRET), "the client secret is never logged");
  });
});
