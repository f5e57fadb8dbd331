import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { type ClientHttp2Session, connect as http2Connect } from "node:http2";
import { after, before, test } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { DEFAULT_GRPC_LIMITS } from "../../../../src/servers/sidecar/grpc/limits.ts";
import { checkMethod, DECISION_TIMEOUT_MS, envoyCheckRequest, unary } from "./helpers.ts";

/**
 * Issue #16: "a few connections from inside the pod push it past its 256 MiB memory limit".
 * The ext_authz server runs in its own process with the default limits and the sidecar's
 * heap flags; an attacker opens connections full of Check streams that announce the largest
 * message allowed, send all of it but one byte, and stall. The process's RSS is sampled
 * throughout: the bytes held are bounded by maxReceivingCalls × maxReceiveMessageBytes
 * (64 MiB), whatever is offered, and the stalled calls are cut after receiveTimeoutMs.
 */

const CONNECTIONS = 16;
const STREAMS = DEFAULT_GRPC_LIMITS.maxConcurrentStreams;
const MESSAGE = DEFAULT_GRPC_LIMITS.maxReceiveMessageBytes;
const MiB = 1024 * 1024;

const serverScript = `
  const { createCheckServer } = await import(${JSON.stringify(new URL("../../../../src/servers/sidecar/grpc/check-server.ts", import.meta.url).href)});
  const { createLogger } = await import(${JSON.stringify(new URL("../../../../src/observability/logger.ts", import.meta.url).href)});
  const server = createCheckServer({
    logger: createLogger("attack-target", "silent"),
    deadlineMs: ${DECISION_TIMEOUT_MS},
    check: () => ({ allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} }),
  });
  const { port } = await server.listen("127.0.0.1:0");
  console.log("port " + port);
  process.on("SIGTERM", () => server.close({ graceMs: 100 }).then(() => process.exit(0)));
`;

function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
}

let child: ChildProcess;
let port: number;

before(async () => {
  child = spawn(
    process.execPath,
    ["--max-semi-space-size=8", "--max-old-space-size=128", "--input-type=module", "-e", serverScript],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  port = await new Promise<number>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`server exited ${code}`)));
    child.stdout?.on("data", (chunk: Buffer) => {
      const match = /port (\d+)/.exec(chunk.toString());
      if (match !== null) resolve(Number(match[1]));
    });
  });
});
after(() => {
  child.kill("SIGTERM");
});

function attackConnection(): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2Connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    session.once("remoteSettings", () => resolve(session));
    session.once("close", () => reject(new Error("closed before settings")));
  });
}

test("stalled maximum-size requests on many connections keep RSS bounded; legitimate Checks still answered", async (t) => {
  const pid = child.pid;
  assert.ok(pid !== undefined);
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  try {
    // Warm up (JIT, proto decoding) before the baseline.
    for (let i = 0; i < 50; i++) await unary(client, checkMethod, envoyCheckRequest({}));
    const baseline = rssBytes(pid);
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssBytes(pid));
    }, 25);

    const body = Buffer.alloc(5 + MESSAGE - 1, 0x61);
    body.writeUInt32BE(MESSAGE, 1);
    const sessions = await Promise.all(Array.from({ length: CONNECTIONS }, attackConnection));
    for (const session of sessions) {
      for (let i = 0; i < STREAMS; i++) {
        const stream = session.request(
          {
            ":method": "POST",
            ":path": checkMethod.path,
            "content-type": "application/grpc",
            te: "trailers",
          },
          { endStream: false },
        );
        stream.on("error", () => undefined);
        stream.resume();
        stream.write(body);
      }
    }
    const attackStarted = Date.now();
    let cutByServer = 0;
    for (const session of sessions) session.once("close", () => cutByServer++);

    // While the attack holds its calls, Envoy's Checks are still decided.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const during = await unary(client, checkMethod, envoyCheckRequest({}));
    assert.equal(during.status.code, 0);

    // The calls still receiving at receiveTimeoutMs are cut with their connections; the
    // others were ended (RESOURCE_EXHAUSTED) as newer calls needed their room.
    // (The last of them started receiving when the attack's bytes reached them, which on a
    // loaded machine is seconds after the first.)
    const waitMs = attackStarted + DEFAULT_GRPC_LIMITS.receiveTimeoutMs * 1.25 + 1_000 - Date.now();
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, waitMs)));
    while (cutByServer === 0 && Date.now() - attackStarted < 60_000) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    clearInterval(sampler);
    const afterCut = rssBytes(pid);
    const cutConnections = cutByServer;
    for (const session of sessions) session.destroy();
    const offered = CONNECTIONS * STREAMS * MESSAGE;
    t.diagnostic(
      `offered ${(offered / MiB).toFixed(0)} MiB on ${CONNECTIONS} connections (${cutConnections} cut by the server); RSS baseline ${(baseline / MiB).toFixed(1)} MiB, peak ${(peak / MiB).toFixed(1)} MiB (+${((peak - baseline) / MiB).toFixed(1)}), after the cut ${(afterCut / MiB).toFixed(1)} MiB`,
    );
    assert.ok(cutConnections >= 1, "the stalled calls' connections are cut");
    // 64 MiB of held request bytes at most, plus HTTP/2 and heap overhead (the 256 MiB pod
    // limit leaves room for a ~100 MiB sidecar).
    assert.ok(peak - baseline < 128 * MiB, `RSS grew by ${((peak - baseline) / MiB).toFixed(1)} MiB`);
    const after = await unary(client, checkMethod, envoyCheckRequest({}));
    assert.equal(after.status.code, 0);
  } finally {
    client.close();
  }
});
