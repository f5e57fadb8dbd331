import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";
import type { SecretResolver, TokenSetStore } from "../../src/execute/auth-profiles.ts";
import { createStoreTokenSetStore } from "../../src/execute/token-set-store.ts";
import { SqliteStore } from "../../src/store/index.ts";
import { makeTempDir } from "../helpers/temp-dir.ts";

/** One request as the server received it: the raw request target, headers and body. */
export interface Recorded {
  readonly method: string;
  readonly target: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export type Handler = (req: Recorded, res: ServerResponse, raw: IncomingMessage) => void | Promise<void>;

export interface TestServer {
  readonly origin: string;
  readonly requests: Recorded[];
  setHandler(handler: Handler): void;
  close(): Promise<void>;
}

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
};

/** A real HTTP server on 127.0.0.1:0 that records every request before answering it. */
export async function startServer(initial?: Handler): Promise<TestServer> {
  let handler: Handler = initial ?? ((req, res) => json(res, 200, { ok: true, method: req.method }));
  const requests: Recorded[] = [];
  const server = createServer((raw, res) => {
    const chunks: Buffer[] = [];
    raw.on("data", (chunk: Buffer) => chunks.push(chunk));
    raw.on("end", () => {
      const recorded: Recorded = {
        method: raw.method ?? "",
        target: raw.url ?? "",
        headers: raw.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      requests.push(recorded);
      Promise.resolve(handler(recorded, res, raw)).catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    setHandler(next) {
      handler = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export { json as sendJson };

/** A secret resolver over a fixed table that remembers which references it was asked for. */
export function secretTable(values: Record<string, string>): { resolve: SecretResolver; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    resolve: async (ref) => {
      calls.push(ref);
      const value = values[ref];
      if (value === undefined) throw new Error(`no secret ${ref}`);
      return value;
    },
  };
}

export interface TokenStoreFixture {
  readonly store: SqliteStore;
  readonly tokenSetStore: TokenSetStore;
  close(): Promise<void>;
}

/** The Store-backed TokenSetStore on a real SQLite file in a temp dir. */
export async function openTokenStore(): Promise<TokenStoreFixture> {
  const dir = await makeTempDir("execute-tokens-");
  const store = new SqliteStore({ path: join(dir.path, "authority.db"), sweepIntervalMs: 0 });
  return {
    store,
    tokenSetStore: createStoreTokenSetStore(store),
    close: async () => {
      await store.close();
      await dir.cleanup();
    },
  };
}

const objectSchema = (properties: Record<string, unknown> = {}, required: string[] = []) => ({
  type: "object",
  properties,
  required,
  additionalProperties: false,
});

/** A reviewed snapshot for `GET /items/{id}` on the given upstream. */
export function itemSnapshot(origin: string, overrides: Partial<OperationSnapshot> = {}): OperationSnapshot {
  return {
    operation_id: "getItem",
    method: "GET",
    path: "/items/{id}",
    input_schema: {
      path: objectSchema({ id: { type: "string", minLength: 1, maxLength: 200 } }, ["id"]),
      query: objectSchema({
        limit: { type: "integer", minimum: 1, maximum: 100 },
        tags: { type: "array", items: { type: "string" } },
        region: { type: "string" },
      }),
      headers: {
        type: "object",
        properties: { "x-trace-id": { type: "string" } },
        additionalProperties: { type: "string" },
      },
      body: null,
    },
    response_schema: null,
    upstream_url_template: `${origin}/v1/items/{id}`,
    auth_profile_ref: "profile-1",
    response_rules: [],
    parameter_constraints: [],
    ...overrides,
  };
}

/** A reviewed snapshot for `POST /orders` taking a JSON body. */
export function orderSnapshot(origin: string, overrides: Partial<OperationSnapshot> = {}): OperationSnapshot {
  return {
    operation_id: "createOrder",
    method: "POST",
    path: "/orders",
    input_schema: {
      path: objectSchema(),
      query: objectSchema(),
      headers: objectSchema(),
      body: {
        type: "object",
        properties: {
          sku: { type: "string", pattern: "^[A-Z0-9-]+$" },
          quantity: { type: "integer", minimum: 1 },
          email: { type: "string", format: "email" },
        },
        required: ["sku", "quantity"],
        additionalProperties: false,
      },
    },
    response_schema: null,
    upstream_url_template: `${origin}/v1/orders`,
    auth_profile_ref: "profile-1",
    response_rules: [],
    parameter_constraints: [],
    ...overrides,
  };
}
