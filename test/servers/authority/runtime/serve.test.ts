import assert from "node:assert/strict";
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { once } from "node:events";
import { access } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { openStore } from "../../../../src/store/index.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";

const root = fileURLToPath(new URL("../../../../", import.meta.url));

/** Reads JSON log lines until one has `msg`; resolves with it. */
function waitForLog(child: ChildProcessWithoutNullStreams, msg: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    let buffer = "";
    const onData = (chunk: Buffer): void => {
      buffer += chunk.toString("utf8");
      for (;;) {
        const end = buffer.indexOf("\n");
        if (end === -1) return;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        try {
          const parsed = JSON.parse(line) as Record<string, unknown>;
          if (parsed.msg === msg) {
            child.stdout.off("data", onData);
            resolve(parsed);
            return;
          }
        } catch {
          // not a log line
        }
      }
    };
    child.stdout.on("data", onData);
    child.once("exit", (code) => reject(new Error(`authority serve exited early (${code})`)));
  });
}

describe("authority serve", () => {
  let dir: TempDir;
  let child: ChildProcessWithoutNullStreams;
  let stderr = "";

  before(async () => {
    dir = await makeTempDir("serve-");
    child = spawn(
      process.execPath,
      [
        join(root, "bin/authority.ts"),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policy-protection",
        "embedded",
        "--init-kek",
        "true",
      ],
      {
        cwd: dir.path,
        env: {
          PATH: process.env.PATH ?? "",
          AUTHORITY_STATE_DIR: join(dir.path, "state"),
          AUTHORITY_ISSUER: "http://127.0.0.1:9",
          AUTHORITY_LOG_LEVEL: "info",
          AUTHORITY_SHUTDOWN_WAIT: "2",
        },
      },
    );
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
    });
  });
  after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
    await dir.cleanup();
  });

  test("starts from flags and env, answers, and on SIGTERM drains, flushes audit and exits 0", async () => {
    const listening = await waitForLog(child, "authority service listening");
    const url = String(listening.url);
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(JSON.stringify(listening).includes("sqlite:"), false, "store URL not logged");
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
    assert.equal((await fetch(`${url}/readyz`)).status, 200);
    const authorize = async (): Promise<void> => {
      const res = await fetch(`${url}/v1/authorize-invocation`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ capability_id: "x", method: "GET", path: "/" }),
      });
      assert.equal(res.status, 401);
      assert.equal(((await res.json()) as { reason: string }).reason, "missing_subject");
    };
    await authorize();

    const stopped = waitForLog(child, "authority service stopped");
    const signalled = performance.now();
    child.kill("SIGTERM");
    // The drain (--shutdown-wait 2): not ready at once, and still answering requests that
    // arrive while the endpoints are withdrawn.
    let ready = 200;
    while (ready === 200) ready = (await fetch(`${url}/readyz`)).status;
    assert.equal(ready, 503);
    await authorize();
    await stopped;
    assert.ok(performance.now() - signalled >= 2000, "exited before the drain period ended");
    const [code] = (await once(child, "exit")) as [number | null];
    assert.equal(code, 0, stderr);

    // The decision made before shutdown is in the embedded store.
    const store = await openStore(`sqlite:${join(dir.path, "state", "authority.db")}`);
    try {
      const entries = await store.readLog<{ kind: string; reason: string }>("audit");
      assert.deepEqual(
        entries.map((e) => [e.value.kind, e.value.reason]),
        [
          ["decision", "missing_subject"],
          ["decision", "missing_subject"],
        ],
      );
    } finally {
      await store.close();
    }
  });

  test("without --init-kek a missing KEK file stops the start, naming the path; no new key is made", async () => {
    const typo = join(dir.path, "state", "kek-typo");
    const failing = spawn(
      process.execPath,
      [
        join(root, "bin/authority.ts"),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policy-protection",
        "embedded",
        "--kek-file",
        typo,
      ],
      {
        cwd: dir.path,
        env: {
          PATH: process.env.PATH ?? "",
          AUTHORITY_STATE_DIR: join(dir.path, "state-2"),
          AUTHORITY_ISSUER: "http://127.0.0.1:9",
        },
      },
    );
    let errors = "";
    failing.stderr.on("data", (chunk: Buffer) => {
      errors += chunk.toString("utf8");
    });
    failing.stdout.resume();
    const [exitCode] = (await once(failing, "exit")) as [number | null];
    assert.notEqual(exitCode, 0);
    assert.ok(errors.includes(typo), errors);
    assert.match(errors, /--init-kek/);
    await assert.rejects(access(typo), { code: "ENOENT" });
  });
});
