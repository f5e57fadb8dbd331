import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { canary } from "../helpers/canary.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";
import { stablePort } from "../helpers/stable-port.ts";

const run = promisify(execFile);
const WRAPPER = fileURLToPath(new URL("../../bin/authority", import.meta.url));

async function authority(args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(WRAPPER, args, { timeout: 60_000, env: { ...process.env, ...env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

let server: PostgresServerHandle;
before(async () => {
  server = await startPostgresServer();
});
after(() => server.stop());

describe("authority store migrate", () => {
  it("applies the PostgreSQL migrations once, then finds nothing to apply; never prints the password", async () => {
    const password = canary("pg-");
    const url = new URL(server.url);
    url.password = password; // trust authentication: accepted, and must never be shown
    const first = await authority(["store", "migrate", "--store-url", url.toString()]);
    assert.equal(first.code, 0, first.stderr);
    assert.match(
      first.stdout,
      /^postgres 127\.0\.0\.1:\d+\/postgres: schema version 3 \(applied 1, 2, 3\)$/m,
    );
    const second = await authority(["store", "migrate"], { AUTHORITY_STORE_URL: url.toString() });
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stdout, /schema version 3 \(nothing to apply\)/);
    assert.equal(await server.psql("SELECT count(*) FROM authority_schema_migrations"), "3");
    for (const outcome of [first, second])
      assert.ok(!`${outcome.stdout}${outcome.stderr}`.includes(password));
  });

  it("fails in one line naming the server, not the password, when PostgreSQL is unreachable", async () => {
    const password = canary("pg-");
    const port = await stablePort("127.0.0.1");
    const outcome = await authority([
      "store",
      "migrate",
      "--store",
      `postgres://a:${password}@127.0.0.1:${port}/db`,
    ]);
    assert.equal(outcome.code, 1);
    assert.equal(
      outcome.stderr.trim(),
      `authority store migrate: PostgreSQL at 127.0.0.1:${port}/db is unavailable (migrate).`,
    );
    assert.ok(!outcome.stdout.includes(password));
  });

  it("requires a store URL", async () => {
    const outcome = await authority(["store", "migrate"], { AUTHORITY_STORE_URL: "" });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /--store \(AUTHORITY_STORE_URL\) is required/);
  });
});
