import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { SNAPSHOT_ENV } from "../../../src/cli/sidecar-snapshot.ts";
import { type SidecarProcess, startSidecarProcess } from "../../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import { buildSidecarSnapshot, sidecarProcessEnv } from "./sidecar-process.ts";
import { startWorld, UPSTREAM_HOST, type World } from "./world.ts";

/**
 * Issue 30 (deliver 2), decision 3081: a sidecar process reaches its first allowed Check
 * without loading undici (Node's fetch and its globals `Headers`, `Response`…: ≈ 25–30 ms of CPU
 * on every start, which the start-up snapshot cannot hold). The authority's requests and the
 * trusted issuers' JWKS go over node:http, which the sidecar's own ports load anyway. Code added
 * to the start path that touches fetch or its globals brings undici back, and fails here.
 *
 * A preload answers SIGUSR2 with the undici modules Node has loaded so far.
 */
const REPORT = `process.on("SIGUSR2", () => process.stderr.write("loaded-undici " + JSON.stringify(process.moduleLoadList.filter((name) => name.includes("undici"))) + "\\n"));\n`;

describe("a sidecar's start path", () => {
  let world: World;
  let dir: TempDir;
  let preload: string;
  let snapshot: string;
  const started: SidecarProcess[] = [];

  before(async () => {
    world = await startWorld();
    dir = await makeTempDir("start-path-");
    preload = join(dir.path, "report.cjs");
    await writeFile(preload, REPORT);
    snapshot = join(dir.path, "snapshot");
    buildSidecarSnapshot(snapshot);
  });
  after(async () => {
    for (const sidecar of started) await sidecar.peer.stop();
    await dir?.cleanup();
    await world?.close();
  });

  /** The undici modules a sidecar started with these Node arguments had loaded by its first allowed Check. */
  async function undiciByFirstAllow(
    args: readonly string[],
    sidecarCredentials: Record<string, string> = {},
  ): Promise<unknown> {
    const env = await sidecarProcessEnv(world, dir.path, {
      [SNAPSHOT_ENV]: snapshot,
      AUTHORITY_SIDECAR_JOURNAL_DIR: join(dir.path, `journal-${started.length}`),
      AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: "0",
      ...sidecarCredentials,
    });
    if (sidecarCredentials.AUTHORITY_CLIENT_ID !== undefined) delete env.AUTHORITY_SIDECAR_TOKEN_FILE;
    const sidecar = await startSidecarProcess(env, {
      command: process.execPath,
      args: ["--require", preload, ...args, "bin/authority.ts", "sidecar"],
    });
    started.push(sidecar);
    await sidecar.untilReady();
    const client = new Client(`127.0.0.1:${sidecar.ports.grpc}`, credentials.createInsecure());
    try {
      const request = envoyCheckRequest({
        method: "GET",
        path: "/orders/42",
        host: UPSTREAM_HOST,
        headers: { authorization: `Bearer ${world.tokens.agent}` },
        contextExtensions: {},
        id: `start-path-${randomBytes(4).toString("hex")}`,
      });
      // A loaded machine may miss the first Check's deadline: what matters is the first allow.
      let response = await unary(client, checkMethod, request);
      for (let attempt = 0; response.status.code !== 0 && attempt < 10; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        response = await unary(client, checkMethod, request);
      }
      assert.equal(response.status.code, 0, `${JSON.stringify(response)}\n${sidecar.peer.output()}`);
    } finally {
      client.close();
    }
    process.kill(await sidecar.peer.pid, "SIGUSR2");
    const deadline = Date.now() + 10_000;
    for (;;) {
      const line = sidecar.peer
        .output()
        .split("\n")
        .find((text) => text.startsWith("loaded-undici "));
      if (line !== undefined) return JSON.parse(line.slice("loaded-undici ".length));
      assert.ok(Date.now() < deadline, `no module report:\n${sidecar.peer.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  const fromSnapshot = () => ["--expose-gc", "--snapshot-blob", join(snapshot, "sidecar.blob")];

  it("from its start-up snapshot, loads no undici up to its first allowed Check", async () => {
    assert.deepEqual(await undiciByFirstAllow(fromSnapshot()), []);
  });

  it("with client credentials, as the chart injects it: its token request loads no undici either", async () => {
    await world.idp.directory.addClient({
      clientId: "start-path-sidecar",
      clientSecret: "start-path-sidecar-secret",
      scopes: ["authority/sidecar", "authority/sidecar.platform"],
      roles: ["sidecar"],
    });
    const grant = {
      AUTHORITY_CLIENT_ID: "start-path-sidecar",
      AUTHORITY_CLIENT_SECRET: "start-path-sidecar-secret",
      AUTHORITY_IDP_TOKEN_URL: world.idp.tokenEndpoint,
    };
    assert.deepEqual(await undiciByFirstAllow(fromSnapshot(), grant), []);
  });
});
