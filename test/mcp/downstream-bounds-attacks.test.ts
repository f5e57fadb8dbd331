/**
 * Attack pass on the downstream exchange's JSON bounds (src/mcp/downstream-client.ts): a
 * downstream answers as Server-Sent Events and spreads one message over several `data:` lines
 * (SSE joins them with a newline), so that no single line is JSON — the gateway must still
 * refuse a message past the depth bound before the SDK parses it. A proxy on loopback re-frames
 * a real SDK server's answers this way and nests the tool result 1,000 levels deep.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import type { Tool } from "@modelcontextprotocol/client";
import {
  createDownstreamCaller,
  type DownstreamExchange,
  DownstreamExchangeError,
} from "../../src/mcp/downstream-client.ts";
import { type DownstreamMcp, startDownstreamMcp } from "../helpers/downstream-mcp.ts";

const echo: Tool = { name: "echo", inputSchema: { type: "object" } };
const DEPTH = 1000;

let downstream: DownstreamMcp;
let proxy: Server;
let proxyUrl: string;

/** Each message as one SSE event whose data is split over two lines inside its nesting. */
function reframe(messages: unknown[]): string {
  return messages
    .map((message) => {
      const m = message as { result?: { content?: unknown; _meta?: unknown } };
      if (m.result?.content !== undefined)
        m.result._meta = { deep: JSON.parse("[".repeat(DEPTH) + "]".repeat(DEPTH)) };
      const text = JSON.stringify(m);
      const cut = text.indexOf("[[") + 1;
      const lines = cut > 0 ? [text.slice(0, cut), text.slice(cut)] : [text];
      return `${lines.map((line) => `data: ${line}`).join("\n")}\n\n`;
    })
    .join("");
}

before(async () => {
  downstream = await startDownstreamMcp([echo], {
    echo: () => ({ content: [{ type: "text", text: "hello" }] }),
  });
  proxy = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.headers)) {
      if (typeof value === "string" && name !== "host" && name !== "content-length") headers[name] = value;
    }
    const upstream = await fetch(downstream.url, {
      method: request.method ?? "POST",
      headers,
      ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }),
    });
    const text = await upstream.text();
    const type = upstream.headers.get("content-type") ?? "";
    const passed: Record<string, string> = {};
    upstream.headers.forEach((value, name) => {
      if (name.startsWith("mcp-")) passed[name] = value;
    });
    if (text === "" || !(type.includes("json") || type.includes("event-stream"))) {
      response.writeHead(upstream.status, { ...passed, ...(type === "" ? {} : { "content-type": type }) });
      response.end(text);
      return;
    }
    const messages = type.includes("json")
      ? [JSON.parse(text)]
      : text
          .split(/\n\n/)
          .map((event) =>
            event
              .split("\n")
              .filter((line) => line.startsWith("data:"))
              .map((line) => line.slice(5).trim())
              .join("\n"),
          )
          .filter((data) => data !== "")
          .map((data) => JSON.parse(data));
    response.writeHead(upstream.status, { ...passed, "content-type": "text/event-stream" });
    response.end(reframe(messages));
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/mcp`;
});
after(async () => {
  await new Promise((resolve) => proxy.close(resolve));
  await downstream.close();
});

const exchange = (): DownstreamExchange => ({
  fetch: globalThis.fetch,
  maxResponseBytes: 1 << 20,
  timeoutMs: 10_000,
});

test("one SSE message spread over several data lines is held to the depth bound", async () => {
  const caller = createDownstreamCaller();
  await assert.rejects(
    caller.call(proxyUrl, echo, {}, exchange(), "ctx"),
    (error: unknown) => error instanceof DownstreamExchangeError && error.issue === "too_complex",
  );
});
