import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { startRedisServer } from "../helpers/redis-server.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { isObj, type Obj } from "./helpers.ts";
import { configMapData, deploymentPod, mounts, renderChart, renderError, volumes } from "./rendered-pod.ts";

/**
 * The bundled Redis keeps its data: an append-only file on a PersistentVolumeClaim whose size
 * and class are values. The rendered container arguments are run by a real redis-server (its
 * /data mount a temp dir, as the kubelet would give it the volume): a key written before a
 * restart is there after it.
 */

const REDIS = "authority-redis";

const pvc = (objects: readonly Obj[]): Obj | undefined =>
  objects.find((o) => o.kind === "PersistentVolumeClaim" && isObj(o.metadata) && o.metadata.name === REDIS);

describe("bundled Redis persistence", () => {
  let dir: TempDir;
  before(async () => {
    dir = await makeTempDir("redis-persistence-");
  });
  after(() => dir?.cleanup());

  it("is on by default: a kept PVC of 2Gi mounted at Redis's /data, appendonly yes", async () => {
    const objects = await renderChart(["--set", "redis.enabled=true"]);
    const claim = pvc(objects);
    assert.ok(claim !== undefined);
    assert.deepEqual(claim.spec, {
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: "2Gi" } },
    });
    assert.deepEqual((claim.metadata as Obj).annotations, { "helm.sh/resource-policy": "keep" });
    const { pod, container } = deploymentPod(objects, REDIS);
    const data = mounts(container).find((m) => m.mountPath === "/data");
    const volume = volumes(pod).find((v) => v.name === data?.name);
    assert.deepEqual(volume?.persistentVolumeClaim, { claimName: REDIS });
    const args = container.args as string[];
    assert.equal(args[args.indexOf("--appendonly") + 1], "yes");
    assert.equal(args[args.indexOf("--dir") + 1], "/data");
  });

  it("takes the size, StorageClass and access modes from values", async () => {
    const objects = await renderChart([
      "--set",
      "redis.enabled=true",
      "--set",
      "redis.persistence.size=20Gi",
      "--set",
      "redis.persistence.storageClass=fast-ssd",
      "--set-json",
      'redis.persistence.accessModes=["ReadWriteOncePod"]',
    ]);
    assert.deepEqual(pvc(objects)?.spec, {
      accessModes: ["ReadWriteOncePod"],
      storageClassName: "fast-ssd",
      resources: { requests: { storage: "20Gi" } },
    });
  });

  it("is off on request (an emptyDir, appendonly no), and absent without the bundled Redis", async () => {
    const off = await renderChart([
      "--set",
      "redis.enabled=true",
      "--set",
      "redis.persistence.enabled=false",
    ]);
    assert.equal(pvc(off), undefined);
    const { pod, container } = deploymentPod(off, REDIS);
    assert.ok(isObj(volumes(pod).find((v) => v.name === "data")?.emptyDir));
    const args = container.args as string[];
    assert.equal(args[args.indexOf("--appendonly") + 1], "no");
    assert.equal(pvc(await renderChart([])), undefined);
  });

  it("is never the system of record: the store on it is refused, the cache and change channel use it", async () => {
    for (const replicas of ["1", "3"]) {
      assert.match(
        (await renderError([
          "--set",
          "redis.enabled=true",
          "--set",
          "authority.store.backend=redis",
          "--set",
          `authority.replicaCount=${replicas}`,
        ])) ?? "",
        /store\.backend=redis with redis\.enabled: the bundled Redis .* is never the system of record/,
      );
    }
    const beside = await renderChart([
      "--set",
      "redis.enabled=true",
      "--set",
      "authority.store.backend=postgres",
      "--set",
      "authority.store.postgres.existingSecret=authority-postgres",
    ]);
    const data = configMapData(beside, "authority");
    assert.match(data.AUTHORITY_REDIS_URL ?? "", new RegExp(`^redis://${REDIS}\\.`));
    assert.equal(data.AUTHORITY_STORE_URL, undefined, "the store URL comes from the PostgreSQL Secret");
  });

  it("keeps a key across a restart of redis-server run with the rendered arguments", async () => {
    const objects = await renderChart(["--set", "redis.enabled=true"]);
    const [command, ...args] = deploymentPod(objects, REDIS).container.args as string[];
    assert.equal(command, "redis-server");
    // /data is the volume: here a directory of its own (the helper binds 127.0.0.1)
    const local = args.map((arg) => (arg === "/data" ? dir.path : arg));
    const redis = await startRedisServer({ args: local });
    try {
      const client = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
      await client.connect();
      await client.set("authority:persisted", "kept");
      client.disconnect();
      await redis.stop(); // SIGTERM, as the kubelet stops the container
      await redis.start();
      const again = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
      await again.connect();
      assert.equal(await again.get("authority:persisted"), "kept");
      again.disconnect();
    } finally {
      await redis.stop();
    }
  });
});
