import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { LATEST_VERSION } from "../../src/store/postgres/migrations.ts";
import { canary } from "../helpers/canary.ts";
import { httpRequest } from "../helpers/http-client.ts";
import { type PeerProcess, startPeerProcess } from "../helpers/peer-process.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { repoPath } from "./helpers.ts";
import {
  asKubelet,
  configMapData,
  deploymentPod,
  envEntries,
  renderChart,
  renderError,
} from "./rendered-pod.ts";

/**
 * The chart pointed at an existing PostgreSQL: the URL (with its password) is read from an
 * existing Secret into AUTHORITY_STORE_URL, never rendered as a value; the pool settings are
 * rendered; several replicas are allowed. The rendered pod's `serve` is started the way the
 * kubelet would, against a real PostgreSQL, and becomes ready on it.
 */

const SECRET = "authority-postgres";
/** The embedded mode, chosen: these tests are about the store (custody: key-custody.test.ts). */
const embedded = ["--set", "authority.policyProtection.mode=embedded"];
const postgresValues = [
  ...embedded,
  "--set",
  "authority.store.backend=postgres",
  "--set",
  `authority.store.postgres.existingSecret=${SECRET}`,
  "--set",
  "authority.kek.existingSecret=authority-kek",
];

describe("the chart on an existing PostgreSQL", () => {
  let server: PostgresServerHandle;
  let dir: TempDir;
  let serve: PeerProcess | undefined;
  before(async () => {
    server = await startPostgresServer();
    dir = await makeTempDir("chart-postgres-");
  });
  after(async () => {
    await serve?.stop(10_000);
    await server?.stop();
    await dir?.cleanup();
  });

  it("reads the URL from the Secret, renders the pool settings, allows several replicas", async () => {
    const objects = await renderChart([
      ...postgresValues,
      "--set",
      "authority.replicaCount=3",
      "--set",
      "authority.store.postgres.poolSize=7",
    ]);
    const { container } = deploymentPod(objects, "authority");
    const url = envEntries(container).find((entry) => entry.name === "AUTHORITY_STORE_URL");
    assert.deepEqual(url?.valueFrom, { secretKeyRef: { name: SECRET, key: "url" } });
    const data = configMapData(objects, "authority");
    assert.equal(data.AUTHORITY_STORE_URL, undefined);
    assert.equal(data.AUTHORITY_STORE_POOL_SIZE, "7");
    assert.equal(data.AUTHORITY_STORE_STATEMENT_TIMEOUT_MS, "5000");
    assert.ok(!objects.some((o) => o.kind === "PersistentVolumeClaim"), "no PVC for a PostgreSQL store");
    assert.ok(!envEntries(container).some((entry) => entry.name === "AUTHORITY_INIT_KEK"));
  });

  it("refuses postgres without a Secret, and embedded keys without a shared KEK", async () => {
    assert.match(
      (await renderError([
        ...embedded,
        "--set",
        "authority.store.backend=postgres",
        "--set",
        "authority.kek.existingSecret=authority-kek",
      ])) ?? "",
      /authority.store.backend=postgres needs authority.store.postgres.existingSecret/,
    );
    assert.match(
      (await renderError([
        ...embedded,
        "--set",
        "authority.store.backend=postgres",
        "--set",
        `authority.store.postgres.existingSecret=${SECRET}`,
      ])) ?? "",
      /mode=embedded on store.backend=postgres needs authority.kek.existingSecret/,
    );
  });

  it("starts the rendered pod on a real PostgreSQL: ready, migrated, the password never printed", async () => {
    const password = canary("pg-");
    const url = new URL(server.url);
    url.password = password; // trust authentication accepts it; it must never be printed
    const objects = await renderChart(postgresValues);
    const rendered = deploymentPod(objects, "authority");
    const kubelet = await asKubelet(
      objects,
      rendered,
      {
        secrets: {
          [SECRET]: { url: url.toString() },
          "authority-kek": { kek: Buffer.alloc(32, 9).toString("base64") },
        },
      },
      dir.path,
    );
    assert.equal(kubelet.env.AUTHORITY_STORE_URL, url.toString());
    const port = await stablePort();
    serve = startPeerProcess({
      command: process.execPath,
      args: ["bin/authority.ts", ...(rendered.container.args as string[]), "--listen", `127.0.0.1:${port}`],
      cwd: repoPath("."),
      env: { ...kubelet.env, PATH: process.env.PATH ?? "" },
    });
    const probe = rendered.container.readinessProbe as { httpGet: { path: string } };
    const deadline = Date.now() + 60_000;
    let status: number | undefined;
    while (Date.now() < deadline) {
      assert.ok(serve.running, `authority serve exited:\n${serve.output()}`);
      status = (
        await httpRequest(`http://127.0.0.1:${port}${probe.httpGet.path}`, { timeoutMs: 5000 }).catch(
          () => undefined,
        )
      )?.status;
      if (status === 200) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.equal(status, 200, `not ready:\n${serve.output()}`);
    assert.match(serve.output(), /"store":"postgres"/);
    assert.equal(
      await server.psql("SELECT max(version) FROM authority_schema_migrations"),
      String(LATEST_VERSION),
    );
    assert.ok(!serve.output().includes(password), "the password is never printed");
  });
});
