import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { type PeerProcess, startPeerProcess } from "../../../helpers/peer-process.ts";
import { freePort, type RedisServerHandle, startRedisServer } from "../../../helpers/redis-server.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";

/**
 * `authority serve --redis-url` at an address where no Redis answers (issue 28): it used to
 * say ready and log nothing, while no policy change reached the sidecars through Redis. Now
 * `/readyz` is 503 with `redis: "unavailable"` and one clear log line says why (without the
 * URL's password), and once Redis answers the service becomes ready.
 */

const root = fileURLToPath(new URL("../../../../", import.meta.url));
const PASSWORD = "redis-canary-pw-5f0c1e";

async function readyz(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${url}/readyz`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function until<T>(probe: () => Promise<T | undefined>, what: string, peer: PeerProcess): Promise<T> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    assert.ok(peer.running, `authority serve exited:\n${peer.output()}`);
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`${what}:\n${peer.output()}`);
}

describe("authority serve with an unreachable --redis-url", () => {
  let dir: TempDir;
  let serve: PeerProcess;
  let redis: RedisServerHandle | undefined;
  let port: number;

  before(async () => {
    dir = await makeTempDir("serve-redis-");
    port = await freePort();
    serve = startPeerProcess({
      command: process.execPath,
      args: [
        join(root, "bin/authority.ts"),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policy-protection",
        "embedded",
        "--init-kek",
        "true",
      ],
      cwd: dir.path,
      env: {
        PATH: process.env.PATH ?? "",
        AUTHORITY_STATE_DIR: join(dir.path, "state"),
        AUTHORITY_ISSUER: "http://127.0.0.1:9",
        AUTHORITY_REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${port}`,
        AUTHORITY_LOG_LEVEL: "info",
      },
    });
  });
  after(async () => {
    await serve?.stop();
    await redis?.stop();
    await dir?.cleanup();
  });

  test("is not ready and says why, then ready once Redis answers", async () => {
    const url = await until(
      async () => /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(serve.output())?.[1],
      "never listening",
      serve,
    );
    const unreachable = await until(
      async () => (serve.output().includes("Redis (--redis-url) unreachable") ? true : undefined),
      "no log line about the unreachable Redis",
      serve,
    );
    assert.equal(unreachable, true);
    const notReady = await readyz(url);
    assert.equal(notReady.status, 503);
    assert.equal(notReady.body.redis, "unavailable");
    assert.equal(notReady.body.store, "ok", "only Redis is missing");

    redis = await startRedisServer({ port, password: PASSWORD });
    const ready = await until(
      async () => {
        const answer = await readyz(url);
        return answer.status === 200 ? answer : undefined;
      },
      "never ready once Redis answered",
      serve,
    );
    assert.equal(ready.body.redis, "ok");
    // The log line travels through the child's stdout pipe: it may arrive after /readyz answered.
    const reachable = await until(
      async () => (/Redis \(--redis-url\) reachable/.test(serve.output()) ? true : undefined),
      "no log line about the reachable Redis",
      serve,
    );
    assert.equal(reachable, true);
    assert.equal(serve.output().includes(PASSWORD), false, "the URL's password is never logged");
  });
});
