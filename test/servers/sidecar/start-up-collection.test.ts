import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { collectStartUpGarbage, takeExposedGc } from "../../../src/servers/sidecar/warm-decision.ts";

/**
 * Decision 3021: a start from the snapshot runs with `--expose-gc` for one collection before
 * ready; the blob's main takes V8's `gc` off the global first, so no other code can call it.
 */
describe("the start-up collection's gc", () => {
  it("is taken off the global and used only by collectStartUpGarbage", () => {
    const global = globalThis as { gc?: unknown };
    const before = global.gc;
    let calls = 0;
    global.gc = () => {
      calls++;
    };
    try {
      takeExposedGc();
      assert.equal(global.gc, undefined);
      collectStartUpGarbage();
      assert.equal(calls, 1);
      // once: the function is not kept for a later caller (a full-heap pause on demand)
      collectStartUpGarbage();
      assert.equal(calls, 1);
    } finally {
      global.gc = before;
    }
  });

  // V8 installs `gc` in every context it creates while --expose-gc is set: a new vm context or a
  // worker thread would hand it to any code after the main took it off its own global.
  it("is not reachable afterwards through a new vm context or a worker thread", () => {
    const script = `
      import { runInNewContext } from "node:vm";
      import { Worker } from "node:worker_threads";
      import { once } from "node:events";
      const { takeExposedGc, collectStartUpGarbage } = await import(${JSON.stringify(
        new URL("../../../src/servers/sidecar/warm-decision.ts", import.meta.url).href,
      )});
      takeExposedGc();
      const worker = new Worker("require('node:worker_threads').parentPort.postMessage(typeof gc)", { eval: true, execArgv: [] });
      const [inWorker] = await once(worker, "message");
      collectStartUpGarbage();
      process.stdout.write(JSON.stringify({ global: typeof gc, context: runInNewContext("typeof gc"), worker: inWorker }));
    `;
    const child = spawnSync(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], {
      encoding: "utf8",
    });
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(JSON.parse(child.stdout), {
      global: "undefined",
      context: "undefined",
      worker: "undefined",
    });
  });
});
