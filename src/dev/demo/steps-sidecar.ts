/**
 * Demo section on the sidecar: Envoy's ext_authz `Check` called the way Envoy calls it — a
 * grpc-js client built from the protos in `proto/` — allowed, denied by the allowlist and by a
 * signed parameter constraint — then one
 * request through the forward proxy whose response comes back redacted.
 */
import { randomUUID } from "node:crypto";
import { request } from "node:http";
import * as grpc from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { protoDir } from "../../servers/sidecar/grpc/proto.ts";
import { answerOf, type DemoContext, isRecord } from "./context.ts";

interface CheckResponse {
  readonly status?: { readonly code?: number; readonly message?: string } | null;
  readonly http_response?: string;
  readonly denied_response?: {
    readonly status?: { readonly code?: number } | null;
    readonly body?: string;
  } | null;
}

type CheckClient = grpc.Client & {
  Check(
    request: unknown,
    options: grpc.CallOptions,
    callback: (error: grpc.ServiceError | null, response?: CheckResponse) => void,
  ): grpc.ClientUnaryCall;
};

function authorizationClient(address: string): CheckClient {
  const definition = loadSync("envoy/service/auth/v3/external_auth.proto", {
    keepCase: true,
    longs: String,
    defaults: true,
    oneofs: true,
    includeDirs: [protoDir],
  });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    envoy: { service: { auth: { v3: { Authorization: grpc.ServiceClientConstructor } } } };
  };
  const Authorization = loaded.envoy.service.auth.v3.Authorization;
  return new Authorization(address, grpc.credentials.createInsecure()) as unknown as CheckClient;
}

function check(client: CheckClient, input: { method: string; path: string; host: string; token: string }) {
  return new Promise<CheckResponse>((resolve, reject) => {
    client.Check(
      {
        attributes: {
          request: {
            http: {
              method: input.method,
              path: input.path,
              host: input.host,
              scheme: "http",
              headers: { authorization: `Bearer ${input.token}`, "x-request-id": randomUUID() },
            },
          },
        },
      },
      { deadline: Date.now() + 5000 },
      (error, response) => (error === null && response !== undefined ? resolve(response) : reject(error)),
    );
  });
}

function reasonOf(response: CheckResponse): string {
  try {
    const body: unknown = JSON.parse(response.denied_response?.body ?? "{}");
    return isRecord(body) && typeof body.reason === "string" ? body.reason : "-";
  } catch {
    return "-";
  }
}

function viaProxy(
  proxyUrl: string,
  target: string,
  token: string,
): Promise<{ status: number; body: unknown }> {
  const proxy = new URL(proxyUrl);
  const upstream = new URL(target);
  const req = request({
    host: proxy.hostname,
    port: proxy.port,
    method: "GET",
    path: target,
    headers: {
      host: upstream.host,
      "proxy-authorization": `Bearer ${token}`,
      accept: "application/json",
    },
    timeout: 10_000,
  });
  return answerOf(req);
}

export async function sidecarSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  report.section(
    "Sidecar: Envoy ext_authz (gRPC) and the forward proxy",
    "A grpc-js client built from proto/ sends CheckRequests as Envoy does; the capability comes from\n" +
      "the sidecar's capability map (the sample API's host → customers).",
  );
  const urls = env.urls.sidecar;
  if (env.sidecar === undefined || urls === undefined) {
    report.error(
      "sidecar started",
      new Error(env.warnings.find((w) => w.includes("sidecar")) ?? "not running"),
    );
    return;
  }
  const token = await ctx.subjectToken("agent");
  const host = new URL(env.urls.sampleApi).host;
  const client = authorizationClient(urls.grpc);
  try {
    const allowed = await check(client, { method: "GET", path: "/customers?limit=5", host, token });
    report.check({
      label: "Check  GET /customers?limit=5",
      expected: "OK (code 0)",
      actual: `${allowed.http_response === "ok_response" ? "OK" : "DENIED"} (code ${allowed.status?.code ?? "-"})`,
      ok: allowed.status?.code === 0 && allowed.http_response === "ok_response",
    });
    const denied = await check(client, { method: "DELETE", path: "/customers/cus_00000001", host, token });
    report.check({
      label: "Check  DELETE /customers/cus_00000001",
      expected: "denied 403 operation_not_allowed (code 7)",
      actual: `denied ${String(denied.denied_response?.status?.code ?? "-")} ${reasonOf(denied)} (code ${denied.status?.code ?? "-"})`,
      ok:
        denied.http_response === "denied_response" &&
        denied.denied_response?.status?.code === 403 &&
        reasonOf(denied) === "operation_not_allowed" &&
        denied.status?.code === 7,
    });
    // The signed constraint (limit ≤ 50) holds on ext_authz as it does on MCP and invoke.
    const constrained = await check(client, { method: "GET", path: "/customers?limit=80", host, token });
    report.check({
      label: "Check  GET /customers?limit=80",
      expected: "denied 403 constraint_violation (code 7)",
      actual: `denied ${String(constrained.denied_response?.status?.code ?? "-")} ${reasonOf(constrained)} (code ${constrained.status?.code ?? "-"})`,
      ok:
        constrained.http_response === "denied_response" &&
        constrained.denied_response?.status?.code === 403 &&
        reasonOf(constrained) === "constraint_violation",
    });
  } finally {
    client.close();
  }
  const target = `${env.urls.sampleApi}/customers/cus_00000001/payment-methods`;
  const proxied = await viaProxy(urls.proxy, target, token);
  const item =
    isRecord(proxied.body) && Array.isArray(proxied.body.items) && isRecord(proxied.body.items[0])
      ? proxied.body.items[0]
      : {};
  const masked =
    typeof item.card_number === "string" &&
    item.card_number.endsWith("4242") &&
    item.card_number.includes("*");
  report.check({
    label: "proxy  GET …/customers/cus_00000001/payment-methods",
    expected: "200, card number masked, cvc removed",
    actual: `${proxied.status}${masked ? ", card number masked" : ", card number NOT masked"}${
      item.cvc === undefined ? ", cvc removed" : ", cvc SHOWN"
    }`,
    ok: proxied.status === 200 && masked && item.cvc === undefined,
    detail: `card_number ${String(item.card_number ?? "(absent)")}; the API key was injected by the sidecar`,
  });
  await auditedStep(ctx);
}

interface AuditItem {
  readonly transport?: string;
  readonly decision?: string;
  readonly reason?: string | null;
  readonly method?: string | null;
  readonly path?: string | null;
}

/** The sidecar ships its decisions to the authority's audit log within about 100 ms. */
async function auditedStep(ctx: DemoContext): Promise<void> {
  const admin = await ctx.adminToken();
  const read = async (): Promise<AuditItem[]> => {
    const items: AuditItem[] = [];
    for (const transport of ["grpc", "proxy"]) {
      const answer = await ctx.json(
        "GET",
        `${ctx.env.urls.authority}/admin/audit?kind=decision&transport=${transport}&limit=10`,
        { headers: { authorization: `Bearer ${admin}` } },
      );
      if (isRecord(answer.body) && Array.isArray(answer.body.items))
        items.push(...(answer.body.items as AuditItem[]));
    }
    return items;
  };
  let items = await read();
  for (let waited = 0; items.length < 4 && waited < 3000; waited += 100) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    items = await read();
  }
  const line = (item: AuditItem): string =>
    `${item.transport} ${item.method} ${item.path} ${item.decision}${item.reason ? ` ${item.reason}` : ""}`;
  reportAudit(ctx, items, line);
}

function reportAudit(ctx: DemoContext, items: readonly AuditItem[], line: (item: AuditItem) => string): void {
  const grpc = items.filter((item) => item.transport === "grpc");
  const proxy = items.filter((item) => item.transport === "proxy");
  ctx.report.check({
    label: "GET /admin/audit?transport=grpc|proxy (authority)",
    expected: "the 4 sidecar decisions, recorded by the authority",
    actual: `${grpc.length} grpc + ${proxy.length} proxy decision records`,
    ok:
      grpc.some((item) => item.decision === "allowed") &&
      grpc.some((item) => item.reason === "operation_not_allowed") &&
      grpc.some((item) => item.reason === "constraint_violation") &&
      proxy.some((item) => item.decision === "allowed"),
    detail: items.map(line).join("; "),
  });
}
