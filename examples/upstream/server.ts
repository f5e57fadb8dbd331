/**
 * A small sample upstream: part of the "Customer records" API of
 * examples/openapi/customers.yaml, served with node:http. Before answering any request
 * it asks the authority whether the request is the one that was allowed:
 *
 *   POST {authorityUrl}/v1/authority/verify
 *   Authorization: Bearer <its own workload token, scope authority/authority.broker.execute>
 *   { profile: "partner-profile-v2", bindingId, operationId, arguments, protectedEnvelope }
 *
 * with `protectedEnvelope` = the received `X-Authority-Envelope` header and `arguments`
 * rebuilt from the request it received (path parameters of its own route, query
 * parameters, JSON body). Anything but a 200 verification is answered 403 and the
 * handler does not run. It also checks the API key the authority injects.
 *
 * Used by the tests and by the demo; not production code. It deliberately imports nothing
 * from src/: it stands for a partner's own service, written against the wire protocol only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface WorkloadCredentials {
  readonly clientId: string;
  readonly clientSecret: string;
}

export interface SampleUpstreamOptions {
  /** Base URL of the authority service. */
  readonly authorityUrl: string;
  /** The binding whose workload client this upstream is. */
  readonly bindingId: string;
  /** A ready workload token, or credentials to fetch (and renew) one. */
  readonly workloadToken?: string;
  readonly credentials?: WorkloadCredentials;
  /** Expected value of the `x-api-key` header the authority injects (unchecked when absent). */
  readonly apiKey?: string;
  /** Delay before answering, for tests of concurrent duplicates. */
  readonly delayMs?: number;
  readonly host?: string;
  readonly port?: number;
}

export interface ReceivedRequest {
  readonly method: string;
  readonly path: string;
  readonly operationId: string | undefined;
  readonly hadEnvelope: boolean;
  readonly apiKeyOk: boolean;
  /** HTTP status of the authority's verify answer (undefined when not asked). */
  readonly verifyStatus: number | undefined;
  /** `error` code of a refused verification. */
  readonly verifyError: string | undefined;
}

export interface SampleUpstream {
  readonly url: string;
  /** Every request received, in order. */
  readonly received: readonly ReceivedRequest[];
  /** Requests whose handler ran (verification passed). */
  handled(): number;
  close(): Promise<void>;
}

interface Route {
  readonly method: string;
  readonly template: string;
  readonly operationId: string;
  readonly handle: (params: Record<string, string>, query: URLSearchParams, body: unknown) => { status: number; body: unknown };
}

const customers = new Map<string, Record<string, unknown>>([
  [
    "cus_00000001",
    {
      id: "cus_00000001",
      name: "Ada Lovelace",
      email: "ada@example.com",
      phone: "+44 20 7946 0001",
      tax_id: "GB123456789",
      created_at: "2026-01-02T03:04:05Z",
      status: "active",
    },
  ],
  [
    "cus_00000002",
    {
      id: "cus_00000002",
      name: "Alan Turing",
      email: "alan@example.com",
      phone: "+44 20 7946 0002",
      tax_id: "GB987654321",
      created_at: "2026-01-03T03:04:05Z",
      status: "active",
    },
  ],
]);

const notFound = { status: 404, body: { type: "about:blank", title: "Not Found", status: 404 } };

const routes: readonly Route[] = [
  {
    method: "GET",
    template: "/customers",
    operationId: "listCustomers",
    handle: (_params, query) => {
      const limit = Number(query.get("limit") ?? "20");
      const email = query.get("email");
      const items = [...customers.values()].filter((c) => email === null || c.email === email).slice(0, limit);
      return { status: 200, body: { items, next_cursor: null } };
    },
  },
  {
    method: "POST",
    template: "/customers",
    operationId: "createCustomer",
    handle: (_params, _query, body) => {
      const fields = typeof body === "object" && body !== null ? (body as Record<string, unknown>) : {};
      const id = `cus_${String(customers.size + 1).padStart(8, "0")}`;
      const customer = { ...fields, id, created_at: new Date().toISOString(), status: "active" };
      customers.set(id, customer);
      return { status: 201, body: customer };
    },
  },
  {
    method: "GET",
    template: "/customers/{customerId}",
    operationId: "getCustomer",
    handle: (params) => {
      const customer = customers.get(params.customerId ?? "");
      return customer === undefined ? notFound : { status: 200, body: customer };
    },
  },
  {
    method: "GET",
    template: "/customers/{customerId}/payment-methods",
    operationId: "listPaymentMethods",
    handle: (params) =>
      customers.has(params.customerId ?? "")
        ? {
            status: 200,
            body: {
              items: [
                {
                  id: "pm_1",
                  type: "card",
                  brand: "visa",
                  card_number: "4242424242424242",
                  cvc: "123",
                  expiry: "12/29",
                  cardholder_name: "Ada Lovelace",
                },
              ],
            },
          }
        : notFound,
  },
];

function matchRoute(method: string, path: string): { route: Route; params: Record<string, string> } | undefined {
  const segments = path.split("/").slice(1);
  for (const route of routes) {
    if (route.method !== method) continue;
    const parts = route.template.split("/").slice(1);
    if (parts.length !== segments.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    parts.forEach((part, i) => {
      const segment = segments[i] ?? "";
      if (part.startsWith("{") && part.endsWith("}")) {
        try {
          params[part.slice(1, -1)] = decodeURIComponent(segment);
        } catch {
          ok = false;
        }
      } else if (part !== segment) ok = false;
    });
    if (ok) return { route, params };
  }
  return undefined;
}

/** The profile's arguments as this upstream observed them: path values, query values, JSON body. */
function observedArguments(params: Record<string, string>, query: URLSearchParams, body: unknown) {
  const queryArgs: Record<string, string | string[]> = {};
  for (const name of new Set(query.keys())) {
    const values = query.getAll(name);
    queryArgs[name] = values.length === 1 ? (values[0] ?? "") : values;
  }
  return { path: params, query: queryArgs, body };
}

async function readBody(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > 1024 * 1024) throw new Error("body too large");
    chunks.push(chunk as Buffer);
  }
  if (size === 0) return null;
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function send(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  response.end(text);
}

export async function startSampleUpstream(options: SampleUpstreamOptions): Promise<SampleUpstream> {
  if (options.workloadToken === undefined && options.credentials === undefined) {
    throw new TypeError("give workloadToken or credentials");
  }
  const authorityUrl = options.authorityUrl.replace(/\/+$/, "");
  const received: ReceivedRequest[] = [];
  let handledCount = 0;
  let cached: { token: string; renewAt: number } | undefined =
    options.workloadToken === undefined ? undefined : { token: options.workloadToken, renewAt: Number.POSITIVE_INFINITY };

  async function workloadToken(): Promise<string> {
    if (cached !== undefined && Date.now() < cached.renewAt) return cached.token;
    const credentials = options.credentials;
    if (credentials === undefined) throw new Error("no workload credentials");
    const basic = Buffer.from(
      `${encodeURIComponent(credentials.clientId)}:${encodeURIComponent(credentials.clientSecret)}`,
    ).toString("base64");
    const answer = await fetch(`${authorityUrl}/v1/bindings/${encodeURIComponent(options.bindingId)}/token`, {
      method: "POST",
      headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=client_credentials&scope=authority%2Fauthority.broker.execute",
    });
    if (answer.status !== 200) throw new Error(`workload token request failed with ${answer.status}`);
    const issued = (await answer.json()) as { access_token: string; expires_in: number };
    cached = { token: issued.access_token, renewAt: Date.now() + (issued.expires_in - 30) * 1000 };
    return issued.access_token;
  }

  async function verify(operationId: string, args: unknown, envelope: string) {
    const answer = await fetch(`${authorityUrl}/v1/authority/verify`, {
      method: "POST",
      headers: { authorization: `Bearer ${await workloadToken()}`, "content-type": "application/json" },
      body: JSON.stringify({
        profile: "partner-profile-v2",
        bindingId: options.bindingId,
        operationId,
        arguments: args,
        protectedEnvelope: envelope,
      }),
    });
    const body = (await answer.json().catch(() => ({}))) as { error?: string };
    return { status: answer.status, error: typeof body.error === "string" ? body.error : undefined };
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", "http://upstream.invalid");
    const method = request.method ?? "GET";
    const matched = matchRoute(method, url.pathname);
    const envelope = request.headers["x-authority-envelope"];
    const apiKeyOk = options.apiKey === undefined || request.headers["x-api-key"] === options.apiKey;
    const base = { method, path: url.pathname, operationId: matched?.route.operationId, hadEnvelope: typeof envelope === "string", apiKeyOk };
    if (matched === undefined) {
      received.push({ ...base, verifyStatus: undefined, verifyError: undefined });
      send(response, 404, notFound.body);
      return;
    }
    if (!apiKeyOk) {
      received.push({ ...base, verifyStatus: undefined, verifyError: undefined });
      send(response, 401, { title: "Unauthorized", status: 401 });
      return;
    }
    const body = await readBody(request);
    if (typeof envelope !== "string") {
      received.push({ ...base, verifyStatus: undefined, verifyError: "missing_envelope" });
      send(response, 403, { title: "Forbidden", status: 403, detail: "authority envelope required" });
      return;
    }
    const verdict = await verify(matched.route.operationId, observedArguments(matched.params, url.searchParams, body), envelope);
    received.push({ ...base, verifyStatus: verdict.status, verifyError: verdict.error });
    if (verdict.status !== 200) {
      send(response, 403, { title: "Forbidden", status: 403, detail: "authority verification failed", code: verdict.error });
      return;
    }
    if (options.delayMs !== undefined) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
    handledCount++;
    const result = matched.route.handle(matched.params, url.searchParams, body);
    send(response, result.status, result.body);
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch(() => {
      if (!response.headersSent) send(response, 500, { title: "Internal Server Error", status: 500 });
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => resolve());
  });
  const address = server.address() as AddressInfo;
  return {
    url: `http://${options.host ?? "127.0.0.1"}:${address.port}`,
    received,
    handled: () => handledCount,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
