/**
 * A downstream MCP server built with the SDK's 2.x server package (`createMcpHandler`: the
 * 2026-07-28 revision, and the 2025 ones through its stateless fallback), on a real HTTP
 * server on loopback. It counts every request it receives (headers included), serves the
 * tool list and handlers the test sets — and changes them at will, as a hostile or evolving
 * server would — and can answer every request with a redirect.
 */
import { createServer, type Server as HttpServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import {
  type CallToolResult,
  createMcpHandler,
  Server,
  type ServerContext,
  type Tool,
} from "@modelcontextprotocol/server";

export interface DownstreamRequest {
  readonly method: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A tool's behaviour; `context` lets it send notifications on the call's response stream. */
export type ToolHandler = (
  args: Record<string, unknown>,
  context: ToolCallContext,
) => CallToolResult | Promise<CallToolResult>;

export interface ToolCallContext {
  /** The progress token the call carried (the gateway's, when called through it). */
  readonly progressToken: string | number | undefined;
  /** Sends a notification on the call's own response stream, as a (hostile) server may. */
  notify(method: string, params: Record<string, unknown>): Promise<void>;
  /** Logs as a well-behaved server does: only at or above the level the request asked for. */
  log(level: "debug" | "info" | "warning" | "error", data: unknown): Promise<void>;
}

export interface DownstreamMcp {
  /** The Streamable HTTP endpoint (`/mcp`). */
  readonly url: string;
  readonly requests: DownstreamRequest[];
  /** What `tools/list` answers; replace it to change the server. */
  tools: Tool[];
  readonly handlers: Map<string, ToolHandler>;
  /** When set, every request is answered `307` to this location. */
  redirectTo: string | undefined;
  /** `tools/call` requests received (the JSON-RPC bodies, parsed). */
  calls(): { name: string; arguments: unknown }[];
  close(): Promise<void>;
}

export async function startDownstreamMcp(
  tools: Tool[],
  handlers: Record<string, ToolHandler>,
): Promise<DownstreamMcp> {
  const state: DownstreamMcp = {
    url: "",
    requests: [],
    tools,
    handlers: new Map(Object.entries(handlers)),
    redirectTo: undefined,
    calls() {
      return state.requests
        .map((r) => {
          try {
            return JSON.parse(r.body) as { method?: string; params?: { name: string; arguments: unknown } };
          } catch {
            return {};
          }
        })
        .filter((m) => m.method === "tools/call" && m.params !== undefined)
        .map((m) => ({ name: m.params?.name ?? "", arguments: m.params?.arguments }));
    },
    close: async () => undefined,
  };
  const handler = createMcpHandler(() => {
    const server = new Server(
      { name: "test-downstream", version: "1.2.3" },
      { capabilities: { tools: {}, logging: {} } },
    );
    server.setRequestHandler("tools/list", async () => ({ tools: state.tools }));
    server.setRequestHandler("tools/call", async (request, context: ServerContext) => {
      const run = state.handlers.get(request.params.name);
      if (run === undefined) return { content: [{ type: "text", text: "no such tool" }], isError: true };
      const token = request.params._meta?.progressToken;
      return run(request.params.arguments ?? {}, {
        progressToken: typeof token === "string" || typeof token === "number" ? token : undefined,
        notify: (method, params) => context.mcpReq.notify({ method, params } as never),
        log: (level, data) => context.mcpReq.log(level, data),
      });
    });
    return server;
  });
  const http: HttpServer = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      state.requests.push({ method: req.method ?? "", headers: req.headers, body });
      if (state.redirectTo !== undefined) {
        res.writeHead(307, { location: state.redirectTo });
        res.end();
        return;
      }
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (value !== undefined && name !== "host" && name !== "connection" && name !== "content-length")
          headers.set(name, Array.isArray(value) ? value.join(", ") : value);
      }
      const request = new Request(`${state.url}`, {
        method: req.method ?? "GET",
        headers,
        ...(req.method === "POST" ? { body } : {}),
      });
      handler
        .fetch(request)
        .then(async (response) => {
          res.writeHead(response.status, Object.fromEntries(response.headers));
          res.end(Buffer.from(await response.arrayBuffer()));
        })
        .catch(() => {
          res.writeHead(500);
          res.end();
        });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  const { port } = http.address() as AddressInfo;
  Object.assign(state, {
    url: `http://127.0.0.1:${port}/mcp`,
    close: () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  });
  return state;
}
