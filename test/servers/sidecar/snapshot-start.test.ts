import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cp, readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Client, credentials } from "@grpc/grpc-js";
import {
  chooseSnapshot,
  NODE_VERSION_FILE,
  SNAPSHOT_ENV,
  type SnapshotStamp,
  STAMP_FILE,
} from "../../../src/cli/sidecar-snapshot.ts";
import { SIDECAR_NODE_OPTIONS } from "../../../src/servers/inject/patch.ts";
import { type SidecarProcess, startSidecarProcess } from "../../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, type Decoded, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import { buildSidecarSnapshot, sidecarProcessEnv } from "./sidecar-process.ts";
import { startWorld, UPSTREAM_HOST, type World } from "./world.ts";

/**
 * `authority sidecar` started from its V8 start-up snapshot (decisions 2799, 2951): built as
 * `make sidecar-snapshot` builds it, Node starts from the blob (through bin/authority-sidecar,
 * the injected command, or bin/authority.ts replacing itself), it becomes ready and allows a
 * Check. A snapshot whose stamp no longer matches the Node or the
 * sources is never run (it would decide with other code than the sources say): the sidecar
 * starts from the sources instead, says so, and allows the same Check.
 */

const repo = fileURLToPath(new URL("../../../", import.meta.url));

function check(grpcPort: number, token: string): Promise<Decoded> {
  const client = new Client(`127.0.0.1:${grpcPort}`, credentials.createInsecure());
  const request = envoyCheckRequest({
    method: "GET",
    path: "/orders/42",
    host: UPSTREAM_HOST,
    headers: { authorization: `Bearer ${token}` },
    contextExtensions: {},
    id: `snapshot-${randomBytes(4).toString("hex")}`,
  });
  return unary(client, checkMethod, request).finally(() => client.close());
}

const cmdline = async (sidecar: SidecarProcess) =>
  (await readFile(`/proc/${await sidecar.peer.pid}/cmdline`, "utf8")).split("\0");

describe("authority sidecar from its start-up snapshot", () => {
  let world: World;
  let dir: TempDir;
  let snapshot: string;
  const started: SidecarProcess[] = [];

  before(async () => {
    world = await startWorld();
    dir = await makeTempDir("snapshot-start-");
    snapshot = join(dir.path, "snapshot");
    buildSidecarSnapshot(snapshot);
  });
  after(async () => {
    for (const sidecar of started) await sidecar.peer.kill();
    await dir?.cleanup();
    await world?.close();
  });

  async function startAndCheck(
    snapshotSetting: string,
    start?: Parameters<typeof startSidecarProcess>[1],
  ): Promise<SidecarProcess> {
    const env = await sidecarProcessEnv(world, dir.path, {
      [SNAPSHOT_ENV]: snapshotSetting,
      AUTHORITY_SIDECAR_JOURNAL_DIR: join(dir.path, `journal-${started.length}`),
      // the script runs the `node` of its PATH, as the image's does
      PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`,
    });
    const sidecar = await startSidecarProcess(env, start);
    started.push(sidecar);
    await sidecar.untilReady();
    // A first Check on a loaded machine may exceed its deadline and fail closed (as in
    // test/deploy/image.test.ts): what is proven here is that this sidecar allows.
    let response = await check(sidecar.ports.grpc, world.tokens.agent);
    for (let attempt = 0; response.status.code !== 0 && attempt < 10; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 300));
      response = await check(sidecar.ports.grpc, world.tokens.agent);
    }
    assert.equal(response.status.code, 0, `${JSON.stringify(response)}\n${sidecar.peer.output()}`);
    return sidecar;
  }

  it("starts from the blob, becomes ready and allows a Check", async () => {
    const sidecar = await startAndCheck(snapshot);
    const args = await cmdline(sidecar);
    assert.equal(args[args.indexOf("--snapshot-blob") + 1], join(snapshot, "sidecar.blob"));
    assert.doesNotMatch(sidecar.peer.output(), /start-up snapshot not used/);
  });

  // The injected sidecar's command (decision 2951): Node straight from the blob, no launcher.
  const script = { command: "bin/authority-sidecar", args: [] };
  const copyOf = async (name: string, change: (copy: string) => Promise<void>) => {
    const copy = join(dir.path, name);
    await cp(snapshot, copy, { recursive: true });
    await change(copy);
    return copy;
  };

  it("bin/authority-sidecar starts Node from the blob in one bootstrap, ready and allowing", async () => {
    const sidecar = await startAndCheck(snapshot, script);
    // `node` and the entry as the script names them: the launcher (bin/authority.ts), had it run
    // first, would have started Node again with its own absolute paths.
    assert.deepEqual((await cmdline(sidecar)).filter(Boolean), [
      "node",
      "--expose-gc",
      "--snapshot-blob",
      join(snapshot, "sidecar.blob"),
      "bin/authority.ts",
      "sidecar",
    ]);
    assert.doesNotMatch(sidecar.peer.output(), /start-up snapshot not used/);
  });

  // Decision 3021: V8 sets the first old-generation limit of a deserialized heap a few MB above
  // it, so its first mark-compact fell on the first Check after ready (20–40 ms of that Check's
  // CPU). The warm-up collects the start-up heap before ready instead.
  it("collects its start-up heap before /readyz says ready: no mark-compact in the first Check after it", async () => {
    const env = await sidecarProcessEnv(world, dir.path, {
      [SNAPSHOT_ENV]: snapshot,
      AUTHORITY_SIDECAR_JOURNAL_DIR: join(dir.path, `journal-${started.length}`),
    });
    const sidecar = await startSidecarProcess(env, {
      command: process.execPath,
      // as bin/authority-sidecar starts it, with the injected NODE_OPTIONS (--trace-gc is refused
      // there, so all of them as arguments)
      args: [
        ...SIDECAR_NODE_OPTIONS.split(" "),
        "--trace-gc",
        "--expose-gc",
        "--snapshot-blob",
        join(snapshot, "sidecar.blob"),
        "bin/authority.ts",
        "sidecar",
      ],
    });
    started.push(sidecar);
    await sidecar.untilReady();
    const beforeCheck = sidecar.peer.output();
    const response = await check(sidecar.ports.grpc, world.tokens.agent);
    assert.equal(response.status.code, 0, JSON.stringify(response));
    const duringCheck = sidecar.peer.output().slice(beforeCheck.length);
    assert.match(beforeCheck, /Mark-Compact[^\n]*testing/, "the warm-up's collection, before ready");
    assert.doesNotMatch(duringCheck, /Mark-Compact/, duringCheck);
  });

  it("bin/authority-sidecar with a stale blob: its main starts the sources instead and says why", async () => {
    const stale = await copyOf("script-stale", async (copy) => {
      const stamp = JSON.parse(await readFile(join(copy, STAMP_FILE), "utf8")) as SnapshotStamp;
      await writeFile(join(copy, STAMP_FILE), JSON.stringify({ ...stamp, sha256: "0".repeat(64) }));
    });
    const sidecar = await startAndCheck(stale, script);
    assert.ok(!(await cmdline(sidecar)).includes("--snapshot-blob"));
    // decision 3021: V8's gc only for a start from the blob
    assert.ok(!(await cmdline(sidecar)).includes("--expose-gc"));
    assert.match(sidecar.peer.output(), /"reason":"the sources changed since the snapshot was built"/);
  });

  it("bin/authority-sidecar without a blob, or with another Node's, starts from the sources", async () => {
    const missing = await copyOf("script-no-blob", (copy) => rm(join(copy, "sidecar.blob")));
    const withoutBlob = await startAndCheck(missing, script);
    assert.ok(!(await cmdline(withoutBlob)).includes("--snapshot-blob"));
    // decision 3021: V8's gc only for a start from the blob
    assert.ok(!(await cmdline(withoutBlob)).includes("--expose-gc"));
    assert.match(withoutBlob.peer.output(), /"reason":"the blob is missing"/);
    // Another Node would refuse the blob and exit (no fallback there): the script asks first.
    const otherNode = await copyOf("script-other-node", async (copy) => {
      const stamp = JSON.parse(await readFile(join(copy, STAMP_FILE), "utf8")) as SnapshotStamp;
      await writeFile(join(copy, STAMP_FILE), JSON.stringify({ ...stamp, node: "v24.0.0-other" }));
      await writeFile(join(copy, NODE_VERSION_FILE), "v24.0.0-other\n");
    });
    const fromOtherNode = await startAndCheck(otherNode, script);
    assert.ok(!(await cmdline(fromOtherNode)).includes("--snapshot-blob"));
    // decision 3021: V8's gc only for a start from the blob
    assert.ok(!(await cmdline(fromOtherNode)).includes("--expose-gc"));
    assert.match(fromOtherNode.peer.output(), /"reason":"built by Node v24.0.0-other, running v/);
  });

  it("the blob started without its entry refuses to run", () => {
    const run = spawnSync(process.execPath, ["--snapshot-blob", join(snapshot, "sidecar.blob"), "sidecar"], {
      encoding: "utf8",
    });
    assert.equal(run.status, 1);
    assert.match(run.stderr, /start the sidecar's snapshot as bin\/authority-sidecar does/);
  });

  it("starts from the sources when the snapshot is stale, and says why", async () => {
    const stale = join(dir.path, "stale");
    await cp(snapshot, stale, { recursive: true });
    const stamp = JSON.parse(await readFile(join(stale, STAMP_FILE), "utf8")) as SnapshotStamp;
    await writeFile(join(stale, STAMP_FILE), JSON.stringify({ ...stamp, sha256: "0".repeat(64) }));
    const sidecar = await startAndCheck(stale);
    assert.ok(!(await cmdline(sidecar)).includes("--snapshot-blob"));
    // decision 3021: V8's gc only for a start from the blob
    assert.ok(!(await cmdline(sidecar)).includes("--expose-gc"));
    assert.match(sidecar.peer.output(), /"reason":"the sources changed since the snapshot was built"/);
  });

  // Decision 3021: only what the sidecar runs, and a source V8 can hold at one byte a character.
  it("bundles only the validators the sidecar's modules declare, as ASCII", async () => {
    const stamp = JSON.parse(await readFile(join(snapshot, STAMP_FILE), "utf8")) as SnapshotStamp;
    const validators = (sources: readonly string[]) =>
      sources
        .filter((source) => /generated-validators\/[0-9a-f]+\.cjs$/.test(source))
        .map((source) => /([0-9a-f]+)\.cjs$/.exec(source)?.[1])
        .sort();
    // what the bundle's own modules declare, in a process that loads nothing else
    const modules = stamp.sources.filter((source) => source.startsWith("src/") && source.endsWith(".ts"));
    const declared = spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `for (const m of ${JSON.stringify(modules)}) await import("./" + m);
const { declaredSchemas, schemaKey } = await import("./src/core/schema-validator.ts");
process.stdout.write(JSON.stringify([...new Set(declaredSchemas().map(schemaKey))].sort()));`,
      ],
      { cwd: repo, encoding: "utf8" },
    );
    assert.equal(declared.status, 0, declared.stderr);
    assert.deepEqual(validators(stamp.sources), JSON.parse(declared.stdout));
    const generated = await readFile(join(repo, "src/core/generated-validators/index.cjs"), "utf8");
    assert.ok(validators(stamp.sources).length < generated.split("require(").length - 1);
    const bundle = await readFile(join(snapshot, "sidecar.cjs"));
    assert.equal(
      bundle.findIndex((byte) => byte > 0x7f),
      -1,
    );
  });

  it("uses a snapshot only when its stamp names this Node and these sources", async () => {
    const stamp = JSON.parse(await readFile(join(snapshot, STAMP_FILE), "utf8")) as SnapshotStamp;
    assert.ok(stamp.sources.includes("src/servers/sidecar/sidecar.ts"));
    assert.ok(stamp.sources.includes("package-lock.json"));
    assert.deepEqual(chooseSnapshot(repo, snapshot), { use: "blob", blob: join(snapshot, "sidecar.blob") });
    assert.deepEqual(chooseSnapshot(repo, "off"), { use: "sources", reason: undefined });
    const variant = async (name: string, change: Partial<SnapshotStamp>) => {
      const copy = join(dir.path, name);
      await cp(snapshot, copy, { recursive: true });
      await writeFile(join(copy, STAMP_FILE), JSON.stringify({ ...stamp, ...change }));
      return chooseSnapshot(repo, copy);
    };
    assert.deepEqual(await variant("other-node", { node: "v24.0.0-other" }), {
      use: "sources",
      reason: `built by Node v24.0.0-other, running ${process.version}`,
    });
    assert.deepEqual(await variant("elsewhere", { root: "/elsewhere/" }), {
      use: "sources",
      reason: "built in another directory",
    });
    assert.deepEqual(await variant("missing-source", { sources: [...stamp.sources, "src/gone.ts"] }), {
      use: "sources",
      reason: "a source of the snapshot is missing",
    });
    assert.deepEqual(chooseSnapshot(repo, join(dir.path, "nothing-here")), {
      use: "sources",
      reason: "no snapshot stamp",
    });
  });
});
