/**
 * The sample upstream of `authority dev` and `authority demo`: the "Customer records" API of
 * examples/openapi/customers.yaml on node:http, with in-memory customers whose e-mails, phone
 * numbers, tax ids and card numbers make response redaction visible.
 *
 * Like a real partner API behind the authority it trusts no caller on its own:
 *  - every route needs the static API key the auth profile injects (`x-api-key`), except the
 *    admin export, which needs the admin bearer secret of the `customers-admin` profile;
 *  - a request carrying an authority envelope (`X-Authority-Envelope`, binding invoke) is
 *    answered only after `POST /v1/authority/verify` accepted it for the arguments this server
 *    actually received; a refused verification is a 403 and the handler does not run.
 *
 * Development and demo code, not production code.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { isRecord } from "../core/own-property.ts";
import { createPathMatcher } from "../core/path-template.ts";
import { createHelpdeskMcpHandler, HELPDESK_MCP_PATH } from "./sample-helpdesk-mcp.ts";

/** What the upstream needs to ask the authority about an envelope. */
export interface EnvelopeVerification {
  readonly authorityUrl: string;
  readonly bindingId: string;
  /** A bearer token with scope authority/authority.broker.execute (fetched and cached by the caller). */
  readonly workloadToken: () => Promise<string>;
}

export interface SampleCustomersApiOptions {
  /** The value the `x-api-key` header must carry. */
  readonly apiKey: string;
  /** The bearer secret the admin export needs (auth profile `customers-admin`). */
  readonly adminBearer: string;
  /**
   * How to verify authority envelopes. A function, so the binding can be seeded after the API
   * is listening; while it answers undefined, requests with an envelope are refused (503).
   */
  readonly envelopeVerification?: () => EnvelopeVerification | undefined;
  readonly host?: string;
  /** Default 0 (a free port). */
  readonly port?: number;
  /**
   * Verifies `user_bearer` routes' tokens (the user's own, from this issuer): a token it does
   * not sign is 401. Absent: any bearer token is taken, unverified.
   */
  readonly userTokens?: { readonly issuer: string; readonly jwksUrl: string };
}

/** One request as the upstream saw it (for the demo's narration; no header values, no bodies). */
export interface ReceivedRequest {
  readonly method: string;
  readonly path: string;
  readonly operationId: string | undefined;
  readonly status: number;
  readonly apiKeyOk: boolean;
  readonly hadEnvelope: boolean;
  /** HTTP status of the authority's verify answer (undefined when not asked). */
  readonly verifyStatus: number | undefined;
  /** `error` of a refused verification. */
  readonly verifyError: string | undefined;
}

export interface SampleCustomersApi {
  readonly url: string;
  readonly port: number;
  /** Every request received, oldest first (at most the last 1000). */
  readonly received: readonly ReceivedRequest[];
  close(): Promise<void>;
}

export class SampleApiOptionsError extends Error {
  readonly code = "sample_api_options_invalid";

  constructor(message: string) {
    super(`sample customers API: ${message}`);
    this.name = "SampleApiOptionsError";
  }
}

type Json = Record<string, unknown>;

interface Answer {
  readonly status: number;
  readonly body?: unknown;
}

interface RouteInput {
  readonly params: Record<string, string>;
  readonly query: URLSearchParams;
  readonly body: unknown;
  readonly headers: IncomingMessage["headers"];
  /** The signed-in user of a `user_bearer` route, when user tokens are verified. */
  readonly user?: string;
}

interface Route {
  readonly method: string;
  readonly template: string;
  readonly operationId: string;
  /** Which credential the route needs. */
  readonly auth: "api_key" | "admin_bearer" | "user_bearer";
  readonly handle: (input: RouteInput) => Answer;
}

const MAX_BODY_BYTES = 256 * 1024;
const MAX_RECEIVED = 1000;
const CUSTOMER_ID = /^cus_[A-Za-z0-9]{8,32}$/;

const problem = (status: number, title: string, detail?: string): Answer => ({
  status,
  body: { type: "about:blank", title, status, ...(detail === undefined ? {} : { detail }) },
});

function seedCustomers(): Map<string, Json> {
  const rows: Json[] = [
    {
      id: "cus_00000001",
      name: "Ada Lovelace",
      email: "ada.lovelace@example.com",
      phone: "+44 20 7946 0001",
      tax_id: "GB123456789",
      address: { line1: "12 St James's Square", city: "London", postal_code: "SW1Y 4JH", country: "GB" },
      created_at: "2026-01-02T03:04:05.000Z",
      status: "active",
    },
    {
      id: "cus_00000002",
      name: "Alan Turing",
      email: "alan.turing@example.com",
      phone: "+44 20 7946 0002",
      tax_id: "GB987654321",
      address: { line1: "Bletchley Park", city: "Milton Keynes", postal_code: "MK3 6EB", country: "GB" },
      created_at: "2026-01-03T03:04:05.000Z",
      status: "active",
    },
    {
      id: "cus_00000003",
      name: "Grace Hopper",
      email: "grace.hopper@example.com",
      phone: "+1 202 555 0103",
      tax_id: "US123456789",
      address: { line1: "1 Navy Yard", city: "Washington", postal_code: "20374", country: "US" },
      created_at: "2026-01-04T03:04:05.000Z",
      status: "active",
    },
  ];
  return new Map(rows.map((row) => [String(row.id), row]));
}

function seedPaymentMethods(): Map<string, Json[]> {
  return new Map([
    [
      "cus_00000001",
      [
        {
          id: "pm_00000001",
          type: "card",
          brand: "visa",
          card_number: "4242424242424242",
          cvc: "123",
          expiry: "12/29",
          cardholder_name: "Ada Lovelace",
        },
      ],
    ],
    [
      "cus_00000002",
      [
        {
          id: "pm_00000002",
          type: "card",
          brand: "mastercard",
          card_number: "5555555555554444",
          cvc: "456",
          expiry: "03/28",
          cardholder_name: "Alan Turing",
        },
        { id: "pm_00000003", type: "sepa_debit", cardholder_name: "Alan Turing" },
      ],
    ],
  ]);
}

const CUSTOMER_FIELDS = ["name", "email", "phone", "tax_id", "address"] as const;

function pickFields(body: unknown): Json {
  const out: Json = {};
  if (!isRecord(body)) return out;
  for (const field of CUSTOMER_FIELDS) if (body[field] !== undefined) out[field] = body[field];
  return out;
}

function createRoutes(): readonly Route[] {
  const customers = seedCustomers();
  const paymentMethods = seedPaymentMethods();
  let nextId = customers.size + 1;
  let nextExport = 1;
  const customer = (params: Record<string, string>): Json | undefined => {
    const id = params.customerId ?? "";
    return CUSTOMER_ID.test(id) ? customers.get(id) : undefined;
  };
  return [
    {
      method: "GET",
      template: "/customers",
      operationId: "listCustomers",
      auth: "api_key",
      handle: ({ query }) => {
        const limit = Math.min(Math.max(Number.parseInt(query.get("limit") ?? "20", 10) || 20, 1), 100);
        const email = query.get("email");
        const items = [...customers.values()]
          .filter((c) => email === null || c.email === email)
          .reverse()
          .slice(0, limit);
        return { status: 200, body: { items, next_cursor: null } };
      },
    },
    {
      method: "POST",
      template: "/customers",
      operationId: "createCustomer",
      auth: "api_key",
      handle: ({ body }) => {
        const fields = pickFields(body);
        if (typeof fields.name !== "string" || typeof fields.email !== "string") {
          return problem(400, "Bad Request", "name and email are required");
        }
        if ([...customers.values()].some((c) => c.email === fields.email)) {
          return problem(409, "Conflict", "a customer with this e-mail exists");
        }
        const id = `cus_${String(nextId++).padStart(8, "0")}`;
        const created = { ...fields, id, created_at: new Date().toISOString(), status: "active" };
        customers.set(id, created);
        return { status: 201, body: created };
      },
    },
    {
      method: "GET",
      template: "/customers/me",
      operationId: "getCurrentCustomer",
      auth: "user_bearer",
      handle: ({ user }) => ({
        status: 200,
        body: { ...customers.get("cus_00000001"), signed_in_as: user ?? null },
      }),
    },
    {
      method: "GET",
      template: "/customers/{customerId}",
      operationId: "getCustomer",
      auth: "api_key",
      handle: ({ params }) => {
        const found = customer(params);
        return found === undefined ? problem(404, "Not Found") : { status: 200, body: found };
      },
    },
    {
      method: "PATCH",
      template: "/customers/{customerId}",
      operationId: "updateCustomer",
      auth: "api_key",
      handle: ({ params, body }) => {
        const found = customer(params);
        if (found === undefined) return problem(404, "Not Found");
        const updated = { ...found, ...pickFields(body) };
        customers.set(String(found.id), updated);
        return { status: 200, body: updated };
      },
    },
    {
      method: "DELETE",
      template: "/customers/{customerId}",
      operationId: "deleteCustomer",
      auth: "api_key",
      handle: ({ params }) => {
        const found = customer(params);
        if (found === undefined) return problem(404, "Not Found");
        customers.delete(String(found.id));
        paymentMethods.delete(String(found.id));
        return { status: 204 };
      },
    },
    {
      method: "GET",
      template: "/customers/{customerId}/payment-methods",
      operationId: "listPaymentMethods",
      auth: "api_key",
      handle: ({ params, query }) => {
        const found = customer(params);
        if (found === undefined) return problem(404, "Not Found");
        const type = query.get("type");
        const items = (paymentMethods.get(String(found.id)) ?? []).filter(
          (pm) => type === null || pm.type === type,
        );
        return { status: 200, body: { items } };
      },
    },
    {
      method: "POST",
      template: "/admin/customers/export",
      operationId: "exportCustomers",
      auth: "admin_bearer",
      handle: ({ body }) => {
        if (!isRecord(body) || (body.format !== "jsonl" && body.format !== "csv")) {
          return problem(400, "Bad Request", "format must be jsonl or csv");
        }
        return { status: 202, body: { export_id: `exp_${nextExport++}`, status: "queued" } };
      },
    },
  ];
}

/** Routes through the core path matcher: literal segments win over parameters. */
function createRouteMatcher(
  routes: readonly Route[],
): (method: string, path: string) => { route: Route; params: Record<string, string> } | undefined {
  const matcher = createPathMatcher(
    routes.map((route) => ({ template: route.template, method: route.method })),
  );
  return (method, path) => {
    const matched = matcher.match(method, path);
    const route = matched === undefined ? undefined : routes[matched.index];
    return route === undefined || matched === undefined
      ? undefined
      : { route, params: { ...matched.params } };
  };
}

/** The verify profile's arguments as this upstream observed them: path values, query values, JSON body. */
function observedArguments(params: Record<string, string>, query: URLSearchParams, body: unknown) {
  const queryArgs: Record<string, string | string[]> = {};
  for (const name of new Set(query.keys())) {
    const values = query.getAll(name);
    queryArgs[name] = values.length === 1 ? (values[0] ?? "") : values;
  }
  return { path: params, query: queryArgs, body };
}

class BodyError extends Error {
  readonly status: number;

  constructor(status: number, message: string) {
    super(message);
    this.name = "BodyError";
    this.status = status;
  }
}

async function readJsonBody(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    const buffer = chunk as Buffer;
    size += buffer.length;
    if (size > MAX_BODY_BYTES) throw new BodyError(413, "body too large");
    chunks.push(buffer);
  }
  if (size === 0) return null;
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new BodyError(400, "body is not JSON");
  }
}

function send(response: ServerResponse, answer: Answer): void {
  if (answer.body === undefined) {
    response.writeHead(answer.status);
    response.end();
    return;
  }
  const text = JSON.stringify(answer.body);
  const type = answer.status >= 400 ? "application/problem+json" : "application/json";
  response.writeHead(answer.status, { "content-type": type, "content-length": Buffer.byteLength(text) });
  response.end(text);
}

function headerIs(value: string | string[] | undefined, expected: string): boolean {
  return typeof value === "string" && value === expected;
}

function validateOptions(options: SampleCustomersApiOptions): void {
  if (typeof options !== "object" || options === null)
    throw new SampleApiOptionsError("options are required");
  if (typeof options.apiKey !== "string" || options.apiKey.length < 8) {
    throw new SampleApiOptionsError("apiKey must be a string of at least 8 characters");
  }
  if (typeof options.adminBearer !== "string" || options.adminBearer.length < 8) {
    throw new SampleApiOptionsError("adminBearer must be a string of at least 8 characters");
  }
  if (options.envelopeVerification !== undefined && typeof options.envelopeVerification !== "function") {
    throw new SampleApiOptionsError("envelopeVerification must be a function");
  }
  if (
    options.port !== undefined &&
    (!Number.isInteger(options.port) || options.port < 0 || options.port > 65535)
  ) {
    throw new SampleApiOptionsError("port must be 0-65535");
  }
}

export async function startSampleCustomersApi(
  options: SampleCustomersApiOptions,
): Promise<SampleCustomersApi> {
  validateOptions(options);
  const host = options.host ?? "127.0.0.1";
  const matchRoute = createRouteMatcher(createRoutes());
  const userKeys =
    options.userTokens === undefined ? undefined : createRemoteJWKSet(new URL(options.userTokens.jwksUrl));
  /** The subject of a verified user token; undefined when it is not one. */
  async function signedInUser(headers: IncomingMessage["headers"]): Promise<string | undefined> {
    const token = /^Bearer (\S+)$/.exec(headers.authorization ?? "")?.[1];
    if (token === undefined || userKeys === undefined || options.userTokens === undefined) return undefined;
    try {
      const { payload } = await jwtVerify(token, userKeys, { issuer: options.userTokens.issuer });
      return typeof payload.sub === "string" ? payload.sub : undefined;
    } catch {
      return undefined;
    }
  }
  const received: ReceivedRequest[] = [];
  const remember = (entry: ReceivedRequest): void => {
    received.push(entry);
    if (received.length > MAX_RECEIVED) received.shift();
  };

  async function verify(
    settings: EnvelopeVerification,
    operationId: string,
    args: unknown,
    envelope: string,
  ): Promise<{ status: number; error: string | undefined }> {
    const answer = await fetch(`${settings.authorityUrl.replace(/\/+$/, "")}/v1/authority/verify`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${await settings.workloadToken()}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({
        profile: "partner-profile-v2",
        bindingId: settings.bindingId,
        operationId,
        arguments: args,
        protectedEnvelope: envelope,
      }),
      signal: AbortSignal.timeout(5000),
    });
    const body = (await answer.json().catch(() => ({}))) as { error?: unknown };
    return { status: answer.status, error: typeof body.error === "string" ? body.error : undefined };
  }

  function authorized(route: Route, headers: IncomingMessage["headers"]): boolean {
    if (route.auth === "api_key") return headerIs(headers["x-api-key"], options.apiKey);
    if (route.auth === "admin_bearer")
      return headerIs(headers.authorization, `Bearer ${options.adminBearer}`);
    return typeof headers.authorization === "string" && headers.authorization.startsWith("Bearer ");
  }

  const helpdesk = createHelpdeskMcpHandler();

  /** The downstream MCP server at /mcp, behind the same API key as the REST routes. */
  async function handleMcp(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (!headerIs(request.headers["x-api-key"], options.apiKey)) {
      send(response, problem(401, "Unauthorized", "missing or wrong credentials"));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of request) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY_BYTES) return send(response, problem(413, "Payload Too Large"));
      chunks.push(chunk as Buffer);
    }
    const headers = new Headers();
    for (const [name, value] of Object.entries(request.headers)) {
      if (value !== undefined && !["host", "connection", "content-length"].includes(name))
        headers.set(name, Array.isArray(value) ? value.join(", ") : value);
    }
    const method = request.method ?? "GET";
    const answer = await helpdesk.fetch(
      new Request(`http://${host}${HELPDESK_MCP_PATH}`, {
        method,
        headers,
        ...(method === "POST" ? { body: Buffer.concat(chunks) } : {}),
      }),
    );
    response.writeHead(answer.status, Object.fromEntries(answer.headers));
    response.end(Buffer.from(await answer.arrayBuffer()));
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", "http://upstream.invalid");
    if (url.pathname === HELPDESK_MCP_PATH) return handleMcp(request, response);
    const method = (request.method ?? "GET").toUpperCase();
    const matched = matchRoute(method, url.pathname);
    const envelope = request.headers["x-authority-envelope"];
    const base = {
      method,
      path: url.pathname,
      operationId: matched?.route.operationId,
      hadEnvelope: typeof envelope === "string",
    };
    const finish = (answer: Answer, extra: Partial<ReceivedRequest> & { apiKeyOk: boolean }): void => {
      remember({ ...base, verifyStatus: undefined, verifyError: undefined, ...extra, status: answer.status });
      send(response, answer);
    };
    if (matched === undefined) {
      finish(problem(404, "Not Found"), { apiKeyOk: false });
      return;
    }
    const user =
      matched.route.auth === "user_bearer" && userKeys !== undefined
        ? await signedInUser(request.headers)
        : undefined;
    const apiKeyOk =
      authorized(matched.route, request.headers) &&
      (matched.route.auth !== "user_bearer" || userKeys === undefined || user !== undefined);
    if (!apiKeyOk) {
      finish(problem(401, "Unauthorized", "missing or wrong credentials"), { apiKeyOk });
      return;
    }
    let body: unknown;
    try {
      body = await readJsonBody(request);
    } catch (error) {
      const status = error instanceof BodyError ? error.status : 400;
      finish(problem(status, status === 413 ? "Payload Too Large" : "Bad Request"), { apiKeyOk });
      return;
    }
    const input: RouteInput = {
      params: matched.params,
      query: url.searchParams,
      body,
      headers: request.headers,
      ...(user === undefined ? {} : { user }),
    };
    if (typeof envelope === "string") {
      const settings = options.envelopeVerification?.();
      if (settings === undefined) {
        finish(problem(503, "Service Unavailable", "envelope verification is not configured"), { apiKeyOk });
        return;
      }
      let verdict: { status: number; error: string | undefined };
      try {
        verdict = await verify(
          settings,
          matched.route.operationId,
          observedArguments(matched.params, url.searchParams, body),
          envelope,
        );
      } catch {
        finish(problem(503, "Service Unavailable", "the authority could not be asked"), { apiKeyOk });
        return;
      }
      if (verdict.status !== 200) {
        finish(
          {
            status: 403,
            body: { type: "about:blank", title: "Forbidden", status: 403, code: verdict.error },
          },
          { apiKeyOk, verifyStatus: verdict.status, verifyError: verdict.error },
        );
        return;
      }
      finish(matched.route.handle(input), {
        apiKeyOk,
        verifyStatus: verdict.status,
      });
      return;
    }
    finish(matched.route.handle(input), {
      apiKeyOk,
    });
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch(() => {
      if (!response.headersSent) send(response, problem(500, "Internal Server Error"));
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host}:${port}`,
    port,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
