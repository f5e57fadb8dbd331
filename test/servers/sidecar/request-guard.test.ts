import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

/**
 * The process guard (src/servers/sidecar/request-guard.ts), in a process of its own (the test
 * runner has its own uncaught-exception handling): an exception nothing caught inside a request
 * — thrown at once, in a timer, in a promise — fails that request closed and the process keeps
 * serving; one outside any request ends the process with code 70, after a fatal log line.
 */

const guard = fileURLToPath(new URL("../../../src/servers/sidecar/request-guard.ts", import.meta.url));

const script = `
import { createServer } from "node:http";
import { guardRequest, installProcessGuard } from ${JSON.stringify(guard)};
const lines = [];
const log = (level) => (obj, msg) => lines.push({ level, msg, ...obj });
installProcessGuard({ logger: { error: log("error"), fatal: log("fatal") }, onFatal: () => {
  process.stdout.write(JSON.stringify(lines) + "\\n");
  process.exit(70);
} });
const server = createServer((req, res) => {
  guardRequest(() => { res.writeHead(503); res.end("failed closed"); }, () => {
    if (req.url === "/sync") throw new RangeError("Maximum call stack size exceeded");
    if (req.url === "/timer") setTimeout(() => { throw new TypeError("in a timer"); }, 1);
    else if (req.url === "/promise") Promise.resolve().then(() => { throw new Error("in a promise"); });
    else { res.writeHead(200); res.end("ok"); }
  });
});
server.listen(0, "127.0.0.1", async () => {
  const base = "http://127.0.0.1:" + server.address().port;
  const statuses = [];
  for (const path of ["/sync", "/timer", "/promise", "/fine"]) statuses.push((await fetch(base + path)).status);
  process.stdout.write(JSON.stringify(statuses) + "\\n");
  setTimeout(() => { throw new Error("outside any request"); }, 1);
});
`;

describe("the sidecar's process guard", () => {
  it("fails the request, not the process; outside a request it exits 70", async () => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: "pipe" });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    const [statuses, logged] = out
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    assert.deepEqual(statuses, [503, 503, 503, 200], err);
    assert.equal(code, 70);
    assert.deepEqual(
      (logged as { level: string; err: { name: string } }[]).map((line) => [line.level, line.err.name]),
      [
        ["error", "RangeError"],
        ["error", "TypeError"],
        ["error", "Error"],
        ["fatal", "Error"],
      ],
    );
    // The log names the kind of failure, never its message (it may quote a request).
    assert.doesNotMatch(out, /in a timer|in a promise|outside any request/);
  });
});
