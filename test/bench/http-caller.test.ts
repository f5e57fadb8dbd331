import assert from "node:assert/strict";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { startHttpCaller } from "../../bench/lib/http-caller.ts";
import { medianOf, spread, spreadText } from "../../bench/lib/rounds.ts";

describe("bench rounds: the median is the figure, the spread beside it", () => {
  it("takes the middle of an odd count and the mean of the two middles of an even one", () => {
    assert.deepEqual(spread([3, 1, 2]), { median: 2, min: 1, max: 3 });
    assert.equal(medianOf([4, 1, 3, 2]), 2.5);
    assert.equal(spreadText([2.5, 1.234, 9]), "1.23–9.00");
  });
});

describe("bench http caller: the generator process replays requests and checks the answers", () => {
  const keys: string[] = [];
  let url = "";
  // Answers chunked for /chunked (no Content-Length), with a length otherwise; 500 for /fail.
  const server = createServer((req: IncomingMessage, res) => {
    const key = req.headers["idempotency-key"];
    if (typeof key === "string") keys.push(key);
    req.resume();
    req.on("end", () => {
      if (req.url === "/fail") {
        res.writeHead(500, { "content-type": "application/json" }).end('{"error":"boom"}');
      } else if (req.url === "/chunked") {
        res.writeHead(200, { "content-type": "application/json" });
        res.write('{"status":');
        res.end('"allowed"}');
      } else {
        res.writeHead(200, { "content-type": "application/json" }).end('{"status":"allowed"}');
      }
    });
  });
  const caller = startHttpCaller();
  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await caller.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("never sends the same unique header twice, across jobs (an idempotent replay is not a call)", async () => {
    const target = {
      url: `${url}/invoke`,
      method: "POST",
      body: "{}",
      uniqueHeader: { name: "idempotency-key", prefix: "round-0" },
      expect: '"status":"allowed"',
    };
    const first = await caller.sequential(target, 5);
    const second = await caller.sequential(target, 5);
    assert.equal(first.samplesMs.length + second.samplesMs.length, 10);
    assert.equal(new Set(keys).size, 10);
    assert.ok(first.cpuUs > 0);
  });

  it("reads chunked answers to their end", async () => {
    const result = await caller.sequential({ url: `${url}/chunked`, method: "GET", expect: '"allowed"' }, 3);
    assert.equal(result.samplesMs.length, 3);
  });

  it("fails a sequential job on an answer that is not 2xx or lacks the expected text", async () => {
    await assert.rejects(caller.sequential({ url: `${url}/fail`, method: "GET" }, 1), /answered 500/);
    await assert.rejects(
      caller.sequential({ url: `${url}/ok`, method: "GET", expect: "denied" }, 1),
      /answered 200/,
    );
  });

  it("counts a closed loop's answers and its errors apart", async () => {
    const ok = await caller.closedLoop(
      { url: `${url}/ok`, method: "GET" },
      { connections: 2, durationMs: 200 },
    );
    assert.ok(ok.requests > 0);
    assert.equal(ok.errors, 0);
    const failing = await caller.closedLoop(
      { url: `${url}/fail`, method: "GET" },
      { connections: 2, durationMs: 100 },
    );
    assert.equal(failing.requests, 0);
    assert.ok(failing.errors > 0);
  });
});
