/**
 * `make bench ONLY=sidecar-input`: the CPU the sidecar's request enforcement adds to one
 * Check — the CheckRequest's body, the request as operation arguments, the input schema and
 * signed constraints (`enforceOperationInput`, the executor's own step) and the
 * headers_to_remove list — on warm caches (compiled schemas, declared-header sets), as in
 * steady state. Measured in-process with process.cpuUsage over many calls, so it is the
 * work added per Check whatever the rate; the bound is 25 µs per Check at 1,000 req/s.
 */
import type { OperationSnapshot } from "../src/core/operation-snapshot.ts";
import { enforceOperationInput } from "../src/execute/input.ts";
import { declaredHeaders, operationArguments } from "../src/pipeline/request-arguments.ts";
import { checkBody } from "../src/servers/sidecar/ext-authz.ts";
import type { CheckInput } from "../src/servers/sidecar/grpc/types.ts";
import { headersToRemove } from "../src/servers/sidecar/request-input.ts";

function object(properties: Record<string, unknown>, required: string[] = []): Record<string, unknown> {
  return {
    type: "object",
    properties,
    additionalProperties: false,
    ...(required.length ? { required } : {}),
  };
}

function operation(
  method: "GET" | "POST",
  path: string,
  extra: Partial<OperationSnapshot>,
): OperationSnapshot {
  return {
    operation_id: `${method}${path}`,
    method,
    path,
    input_schema: { path: object({}), query: object({}), headers: object({}), body: null },
    response_schema: null,
    upstream_url_template: `http://127.0.0.1:9${path}`,
    auth_profile_ref: "p",
    response_rules: [],
    parameter_constraints: [],
    ...extra,
  };
}

const envoyHeaders = (method: string, path: string): Record<string, string> => ({
  ":method": method,
  ":path": path,
  ":authority": "orders.internal",
  ":scheme": "http",
  authorization: `Bearer ${"x".repeat(600)}`,
  "user-agent": "bench/1.0",
  accept: "application/json",
  "x-request-id": "5f0c2b8e-8a53-4c4c-9d3a-1f6b2f0e9a11",
  "x-forwarded-proto": "http",
  "x-envoy-expected-rq-timeout-ms": "15000",
});

interface Case {
  readonly name: string;
  readonly operation: OperationSnapshot;
  readonly params: Record<string, string>;
  readonly input: CheckInput;
}

const cases: Case[] = [
  {
    name: "GET /orders/{orderId}?service_ms=5 (the sidecar bench's request)",
    operation: operation("GET", "/orders/{orderId}", {
      input_schema: {
        path: object({ orderId: { type: "string" } }, ["orderId"]),
        query: object({
          expand: { type: "string" },
          service_ms: { type: "integer", minimum: 0, maximum: 1000 },
        }),
        headers: object({}),
        body: null,
      },
    }),
    params: { orderId: "42" },
    input: {
      method: "GET",
      path: "/orders/42?service_ms=5",
      host: "orders.internal",
      scheme: "http",
      headers: envoyHeaders("GET", "/orders/42?service_ms=5"),
      contextExtensions: {},
    },
  },
  {
    name: "GET /payments?limit=5&q=abc, declared header, signed maximum",
    operation: operation("GET", "/payments", {
      input_schema: {
        path: object({}),
        query: object({ limit: { type: "integer" }, q: { type: "string", maxLength: 8 } }),
        headers: object({ "x-tenant": { type: "string", pattern: "^[a-z]+$" } }),
        body: null,
      },
      parameter_constraints: [{ in: "query", name: "limit", maximum: 50 }],
    }),
    params: {},
    input: {
      method: "GET",
      path: "/payments?limit=5&q=abc",
      host: "payments.internal",
      scheme: "http",
      headers: { ...envoyHeaders("GET", "/payments?limit=5&q=abc"), "x-tenant": "acme" },
      contextExtensions: {},
    },
  },
  {
    name: "POST /payments, 60-byte JSON body (with_request_body), body maximum",
    operation: operation("POST", "/payments", {
      input_schema: {
        path: object({}),
        query: object({}),
        headers: object({}),
        body: {
          type: "object",
          properties: { amount: { type: "number" }, memo: { type: "string" } },
          required: ["amount"],
        },
      },
      parameter_constraints: [{ in: "body", name: "/amount", maximum: 100 }],
    }),
    params: {},
    input: {
      method: "POST",
      path: "/payments",
      host: "payments.internal",
      scheme: "http",
      headers: {
        ...envoyHeaders("POST", "/payments"),
        "content-type": "application/json",
        "content-length": "60",
        "x-envoy-auth-partial-body": "false",
      },
      contextExtensions: {},
      body: '{"amount": 42.5, "memo": "invoice 2026-11 for order 42 ok"}',
    },
  },
];

const rollout = { enabled: true, partnerAllowlisted: true };
const setByAllow = { "x-api-key": "", "x-authority-request-id": "", "x-authority-permission-id": "" };

function once(c: Case): number {
  const args = operationArguments(c.operation, c.params, c.input.path, c.input.headers, checkBody(c.input));
  // Fresh arguments, coerced in place, as the sidecar's engine passes them.
  const validated = enforceOperationInput(c.operation, args, rollout, { fresh: true });
  const removed = headersToRemove(c.input.headers, declaredHeaders(c.operation), setByAllow);
  return removed.length + (validated.hasBody ? 1 : 0);
}

export async function benchSidecarInput(iterations = 200_000): Promise<object[]> {
  const warmup = Math.ceil(iterations / 10);
  const rows: object[] = [];
  for (const c of cases) {
    let sink = 0;
    for (let i = 0; i < warmup; i++) sink += once(c);
    const before = process.cpuUsage();
    const started = performance.now();
    for (let i = 0; i < iterations; i++) sink += once(c);
    const cpu = process.cpuUsage(before);
    const wallMs = performance.now() - started;
    rows.push({
      request: c.name,
      cpuUsPerCheck: Number(((cpu.user + cpu.system) / iterations).toFixed(2)),
      wallUsPerCheck: Number(((wallMs * 1000) / iterations).toFixed(2)),
      within25us: (cpu.user + cpu.system) / iterations <= 25,
      sink: sink > 0,
    });
  }
  return rows;
}

if (import.meta.main) console.table(await benchSidecarInput());
