/**
 * A small upstream API the policies point at, with the faults the reliability suite needs:
 * a slow operation, one that never answers, and a switch that makes every answer slow or
 * hung. It counts hits per operation (exactly-once checks) and keeps the envelopes the
 * authority injected (replay tests). `itemsOpenApi()` is its OpenAPI 3.1 document.
 */
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface UpstreamHit {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface UpstreamMode {
  /** Extra delay before every answer (ms). */
  delayMs: number;
  /** Never answer anything (until the mode changes or the server closes). */
  hang: boolean;
  /** Cut every connection as soon as a request arrives (a crashed or refusing upstream). */
  reset: boolean;
}

export interface TestUpstream {
  readonly url: string;
  readonly hits: UpstreamHit[];
  /** Mutable: the faults in force. */
  readonly mode: UpstreamMode;
  /** How long GET /slow takes (ms); default 30 s. */
  slowMs: number;
  /** Hits whose path starts with `prefix` (and method, when given). */
  count(prefix: string, method?: string): number;
  /** Answers still pending (hung or delayed). */
  pending(): number;
  close(): Promise<void>;
}

/** The document of the upstream: items (get, list, create), a slow and a hanging operation. */
export function itemsOpenApi(): Record<string, unknown> {
  const json = (description: string) => ({
    description,
    content: { "application/json": { schema: { type: "object" } } },
  });
  return {
    openapi: "3.1.0",
    info: { title: "Items", version: "1.0.0" },
    paths: {
      "/items": {
        get: {
          operationId: "listItems",
          parameters: [{ name: "limit", in: "query", schema: { type: "integer", minimum: 1, maximum: 100 } }],
          responses: { "200": json("items") },
        },
        post: {
          operationId: "createItem",
          requestBody: {
            content: {
              "application/json": {
                schema: { type: "object", properties: { name: { type: "string", maxLength: 200 } } },
              },
            },
          },
          responses: { "201": json("created") },
        },
      },
      "/items/{itemId}": {
        parameters: [
          { name: "itemId", in: "path", required: true, schema: { type: "string", maxLength: 64 } },
        ],
        get: { operationId: "getItem", responses: { "200": json("one item") } },
      },
      "/slow": { get: { operationId: "getSlow", responses: { "200": json("late") } } },
      "/hang": { get: { operationId: "getHang", responses: { "200": json("never") } } },
    },
  };
}

export async function startTestUpstream(): Promise<TestUpstream> {
  const hits: UpstreamHit[] = [];
  const mode: UpstreamMode = { delayMs: 0, hang: false, reset: false };
  const open = new Set<ServerResponse>();
  const state = { slowMs: 30_000, created: 0 };

  const answer = (res: ServerResponse, status: number, value: unknown, delayMs: number): void => {
    const send = () => {
      open.delete(res);
      if (res.destroyed) return;
      const text = JSON.stringify(value);
      res.writeHead(status, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(text),
      });
      res.end(text);
    };
    if (delayMs <= 0) {
      send();
      return;
    }
    const timer = setTimeout(send, delayMs);
    res.on("close", () => {
      clearTimeout(timer);
      open.delete(res);
    });
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://upstream");
      const path = url.pathname;
      hits.push({
        method: req.method ?? "",
        path,
        query: url.search,
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      });
      if (mode.reset) {
        req.socket.resetAndDestroy();
        return;
      }
      open.add(res);
      res.on("close", () => open.delete(res));
      if (mode.hang || path === "/hang") return;
      const delay = mode.delayMs;
      if (path === "/slow") return answer(res, 200, { late: true }, delay + state.slowMs);
      if (path === "/items" && req.method === "POST") {
        state.created++;
        return answer(res, 201, { id: `item-${state.created}` }, delay);
      }
      if (path === "/items" && req.method === "GET") return answer(res, 200, { items: [] }, delay);
      if (path === "/items/reflect" && req.method === "GET") {
        // A careless upstream that reflects the credentials it received.
        return answer(
          res,
          200,
          {
            id: "reflect",
            received_api_key: req.headers["x-api-key"] ?? null,
            received_authorization: req.headers.authorization ?? null,
          },
          delay,
        );
      }
      if (path.startsWith("/items/") && req.method === "GET") {
        return answer(
          res,
          200,
          { id: decodeURIComponent(path.slice("/items/".length)), owner_email: "ada@example.com", total: 42 },
          delay,
        );
      }
      return answer(res, 404, { error: "not_found" }, delay);
    });
  });
  server.keepAliveTimeout = 2000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    mode,
    get slowMs() {
      return state.slowMs;
    },
    set slowMs(value: number) {
      state.slowMs = value;
    },
    count: (prefix, method) =>
      hits.filter((hit) => hit.path.startsWith(prefix) && (method === undefined || hit.method === method))
        .length,
    pending: () => open.size,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of open) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
