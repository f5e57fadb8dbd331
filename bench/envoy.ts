/**
 * `make bench ONLY=envoy`: what authorizing every request costs behind a real Envoy
 * (.tools/bin/envoy, 1.40), measured through ONE Envoy process in one run:
 *
 *   load generator ─HTTP/1.1─► Envoy ─┬─ listener "alone": no ext_authz ─────────────► upstream
 *   (own process, open loop)          ├─ listener "in_proxy": jwt_authn + rbac ────────► upstream
 *                                     └─ listener "sidecar": ext_authz gRPC ─► `authority sidecar`
 *                                                             then router ──────────► upstream
 *
 * "in_proxy" is Envoy's own authorization, the floor any external authorizer is measured
 * against: jwt_authn verifies the same bench token against the IdP's JWKS given inline (no
 * fetch), and rbac allows the bench policy's operations (method + path, a path parameter
 * held to its declared pattern) for the policy's subject, read from the verified token. It
 * decides method, path and subject only: none of the sidecar's request checks (schema,
 * signed constraints, header removal), so it is a floor, not an equal. Before anything is
 * measured, every authorizing listener answers DECISION_REQUESTS; a listener that allows
 * or denies differently from the sidecar stops the bench (it would compare unlike work).
 *
 * Each column is a listener of the same Envoy, cloned from deploy/envoy/envoy.yaml as shipped
 * (test/helpers/envoy.ts renders it: same filters, path normalization, fail-closed settings
 * and ext_authz timeout); "Envoy alone" is that listener without the ext_authz filter. The
 * upstream is a trivial HTTP server (its own process) answering a small JSON body.
 *
 * Per column, at a fixed open-loop rate (1,000 req/s; latency counted from when the request
 * was dispatched, so a stall shows in the tail): p50/p99, CPU µs per request of Envoy and of
 * the ext_authz server (utime + stime deltas from /proc/<pid>/stat over the measured phase),
 * and their max RSS. Columns run in alternating rounds (alone, sidecar, alone, …) and each
 * figure is the median of its rounds, so a burst of load from other jobs on the machine
 * touches every column alike.
 *
 * The sidecar's extra request checks (input schema, signed constraints, path templates with
 * literal siblings, headers_to_remove) are costed the same way, on the same sidecar at the
 * same rate, in two comparisons (docs/decisions/2201-extra-checks-bench.md says which one
 * carries the issue's 25 µs and why):
 *   - the checked request — to an operation that declares a schema and a signed constraint,
 *     beside a literal sibling, with a header the sidecar must remove — against GET /plain,
 *     an operation that declares nothing: everything the checks add, the larger request's
 *     decoding and recording included. This difference carries the target, measured over
 *     24 adjacent pairs of 2 s runs with the sidecar's CPU read per thread in nanoseconds
 *     (pairedChecks), beside its value from the rounds.
 *   - the same request bytes against the same operation in a second capability
 *     ("orders-bare", named by the route's context_extensions, so only that id differs in the
 *     CheckRequest) that declares the same parameters without rules: no pattern, enum or
 *     bounds, no signed constraint, no literal sibling. The difference is what the declared
 *     rules themselves cost, the request's size set aside.
 *
 * Another ext_authz server (e.g. OPA-Envoy) joins as one more entry of AUTHZ_SERVERS: a
 * function that starts it and says its gRPC port and pid; it gets its own listener and
 * cluster in the same Envoy, the same request and the same rate.
 */
import { request as httpRequest } from "node:http";
import { setTimeout as delay } from "node:timers/promises";
import { parse, stringify } from "yaml";
import { type EnvoyHandle, renderBootstrap, startEnvoy } from "../test/helpers/envoy.ts";
import { CAPABILITY, startBenchWorld, UPSTREAM_HOST } from "./lib/bench-world.ts";
import { startHttpLoader } from "./lib/http-load-process.ts";
import type { OpenLoopResult } from "./lib/open-loop-http.ts";
import {
  prepareServerEnv,
  rssBytes,
  schedCpuUs,
  startScriptProcess,
  startSidecarProcess,
  statCpuMs,
} from "./lib/processes.ts";
import type { Table } from "./report.ts";

export interface EnvoyBenchOptions {
  /** Requests per second, open loop (default 1000). */
  readonly rate?: number;
  /** Measured phase of one run (default 6000 ms). */
  readonly durationMs?: number;
  /** Unrecorded requests before each run, same rate (default 1000 ms). */
  readonly warmupMs?: number;
  /** Rounds over all columns; figures are medians of rounds (default 3). */
  readonly rounds?: number;
  /** Adjacent pairs of short runs (checked, plain) that cost the extra checks (default 24). */
  readonly checkPairs?: number;
  /** Measured length of each run of a pair (default 2000 ms). */
  readonly checkPairMs?: number;
  /** The ext_authz filter's timeout (default: deploy/envoy/envoy.yaml's, 0.25 s). */
  readonly extAuthzTimeout?: string;
  /** The sidecar's own decision deadline (default: its default, 200 ms, under Envoy's 250 ms). */
  readonly sidecarDecisionTimeoutMs?: number;
  /**
   * Start the servers as the sidecar's container does, with a warm compile cache and
   * MALLOC_ARENA_MAX=2 (default true; filling the cache takes seconds, so smoke runs skip it).
   */
  readonly warmCompileCache?: boolean;
}

/** An ext_authz gRPC server started for the bench. */
export interface AuthzServer {
  readonly pid: number | undefined;
  readonly grpcPort: number;
  stop(): Promise<void>;
}

/** What a column's server may use of the bench world. */
export interface AuthzContext {
  readonly sidecarEnv: Record<string, string>;
}

/** One "Envoy + X" column: X's name and how to start it. */
export interface AuthzColumn {
  readonly id: string;
  readonly name: string;
  start(context: AuthzContext): Promise<AuthzServer>;
}

/** The ext_authz servers compared behind the same Envoy, beside Envoy alone. */
export const AUTHZ_SERVERS: readonly AuthzColumn[] = [
  {
    id: "sidecar",
    name: "Envoy + authority sidecar",
    async start(context) {
      const sidecar = await startSidecarProcess(context.sidecarEnv, "cli");
      return { pid: sidecar.child.pid, grpcPort: sidecar.ports.grpc, stop: () => sidecar.stop() };
    },
  },
];

/** Medians over the rounds of one column (or of one request mix). */
export interface ColumnFigures {
  readonly name: string;
  readonly request: string;
  readonly requests: number;
  readonly reqPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Non-2xx answers and transport errors, summed over rounds: 0 is expected. */
  readonly failed: number;
  /** Answers by HTTP status over all rounds ("0": none), to name what failed. */
  readonly statuses: Readonly<Record<string, number>>;
  readonly envoyCpuUsPerRequest: number;
  /** NaN for Envoy alone. */
  readonly authzCpuUsPerRequest: number;
  readonly envoyRssMb: number;
  readonly authzRssMb: number;
  /** p99 of how late the generator dispatched requests (its own health, not the server's). */
  readonly generatorLateP99Ms: number;
}

/** Sidecar CPU per Check, checked − plain, over pairs of adjacent short runs. */
export interface PairedDifference {
  readonly pairs: number;
  readonly runMs: number;
  /** One difference per pair, in µs per Check, in pair order. */
  readonly differencesUs: readonly number[];
  readonly medianUs: number;
  readonly meanUs: number;
  /** Standard error of the mean. */
  readonly standardErrorUs: number;
  /** Whether every run of every pair kept up with the rate. */
  readonly keptUp: boolean;
}

export interface EnvoyBenchResult {
  readonly envoyVersion: string;
  readonly rate: number;
  readonly durationMs: number;
  readonly warmupMs: number;
  readonly rounds: number;
  readonly extAuthzTimeout: string;
  readonly alone: ColumnFigures;
  /** Envoy's own jwt_authn + rbac: the floor. */
  readonly inProxy: ColumnFigures;
  readonly columns: readonly ColumnFigures[];
  /** Every authorizing setup's answers to DECISION_REQUESTS (all equal to the policy's, or no result). */
  readonly decisions: DecisionCheck;
  /** The sidecar with the checked request mix vs the same sidecar with the plain one. */
  readonly extraChecks: {
    readonly checked: ColumnFigures;
    readonly plain: ColumnFigures;
    /** checked − plain, median of per-round differences. */
    readonly cpuUsPerCheck: number;
    /** The per-round differences the median is taken of, in round order. */
    readonly cpuUsPerCheckRounds: readonly number[];
    readonly targetUs: number;
    /** checked − plain over adjacent short runs: carries the target. */
    readonly paired: PairedDifference;
    /** The checked request's bytes to BARE_CAPABILITY's operation (no rules). */
    readonly bare: ColumnFigures;
    /** checked − bare, median of per-round differences: the declared rules alone. */
    readonly rulesCpuUsPerCheck: number;
    readonly rulesCpuUsPerCheckRounds: readonly number[];
  };
}

const SUBJECT = "bench-agent";
const IN_PROXY_NAME = "Envoy + jwt_authn + rbac (in-proxy)";
/**
 * Keep-alive connections of the generator: a request waits (and that wait counts) when all
 * are busy, so enough for a few ms of latency at the rate, as a busy client pool would hold.
 */
const CONNECTIONS = 32;

/** The capability behind the checked listener: one operation with everything to check, one with nothing. */
export function benchApi(): Record<string, unknown> {
  const json = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  return {
    openapi: "3.1.0",
    info: { title: "Orders", version: "1.0.0" },
    paths: {
      "/orders/{orderId}": {
        parameters: [
          { name: "orderId", in: "path", required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
        ],
        get: {
          operationId: "getOrder",
          parameters: [
            { name: "expand", in: "query", schema: { type: "string", enum: ["items", "customer"] } },
            { name: "limit", in: "query", schema: { type: "integer", minimum: 1, maximum: 100 } },
            { name: "x-tenant", in: "header", schema: { type: "string", pattern: "^[a-z]+$" } },
          ],
          "x-authority-constraints": [{ in: "query", name: "limit", maximum: 50 }],
          responses: json,
        },
      },
      // A literal sibling of the template: the path rule must tell them apart.
      "/orders/summary": { get: { operationId: "getOrdersSummary", responses: json } },
      "/plain": { get: { operationId: "getPlain", responses: json } },
    },
  };
}

const ALLOWED = [
  `${CAPABILITY}:get:/orders/{orderId}`,
  `${CAPABILITY}:get:/orders/summary`,
  `${CAPABILITY}:get:/plain`,
];

/** The capability the same request bytes reach on the "bare" listener. */
export const BARE_CAPABILITY = "orders-bare";
const BARE_LABEL = `the same request, routed to "${BARE_CAPABILITY}": same parameters declared, no rule on them (no pattern, enum, bounds, signed constraint or literal sibling)`;

/**
 * benchApi()'s checked operation with the same parameters declared but no rule on them: no
 * pattern, enum or bounds (every value a string), no signed constraint, no literal sibling.
 */
export function bareApi(): Record<string, unknown> {
  const json = {
    "200": { description: "ok", content: { "application/json": { schema: { type: "object" } } } },
  };
  const text = { type: "string" };
  return {
    openapi: "3.1.0",
    info: { title: "Orders, no rules", version: "1.0.0" },
    paths: {
      "/orders/{orderId}": {
        parameters: [{ name: "orderId", in: "path", required: true, schema: text }],
        get: {
          operationId: "getOrder",
          parameters: [
            { name: "expand", in: "query", schema: text },
            { name: "limit", in: "query", schema: text },
            { name: "x-tenant", in: "header", schema: text },
          ],
          responses: json,
        },
      },
    },
  };
}

interface Mix {
  readonly label: string;
  readonly path: string;
  readonly headers: Record<string, string>;
}

const mixes = (token: string) => {
  const base = { host: UPSTREAM_HOST, authorization: `Bearer ${token}`, accept: "application/json" };
  return {
    checked: {
      label:
        "GET /orders/42?expand=items&limit=5, x-tenant + 1 undeclared header (schema, constraint, removal)",
      path: "/orders/42?expand=items&limit=5",
      headers: { ...base, "x-tenant": "acme", "x-debug": "1" },
    },
    plain: { label: "GET /plain (nothing declared)", path: "/plain", headers: base },
  } satisfies Record<string, Mix>;
};

// biome-ignore lint/suspicious/noExplicitAny: an Envoy bootstrap is walked and edited field by field
type Yaml = any;

/** What Envoy's in-proxy authorization (jwt_authn + rbac) needs: the token's issuer and keys, the policy. */
export interface InProxyAuthz {
  readonly issuer: string;
  readonly audience: string;
  /** The issuer's JWKS document, given to jwt_authn inline (local_jwks). */
  readonly jwks: string;
  /** The subject the policy allows (the token's `sub`). */
  readonly subject: string;
  /** The policy's permission ids of CAPABILITY (`<capability>:<method>:<path template>`). */
  readonly allowed: readonly string[];
  /** The capability's OpenAPI document: a path parameter's declared pattern bounds its segment. */
  readonly document: Record<string, unknown>;
}

/**
 * A path template as an anchored RE2 regex: a `{name}` segment matches the declared
 * `pattern` of that path parameter (anchors dropped), else any one non-empty segment.
 */
export function templateRegex(template: string, document: Record<string, unknown>): string {
  const item = (document.paths as Record<string, Yaml>)[template] ?? {};
  const parameters: Yaml[] = [...(item.parameters ?? []), ...(item.get?.parameters ?? [])];
  const body = template
    .split(/(\{[^}]+\})/)
    .map((part) => {
      const name = /^\{([^}]+)\}$/.exec(part)?.[1];
      if (name === undefined) return part.replace(/[.*+?^$()[\]{}|\\]/g, "\\$&");
      const pattern = parameters.find((p) => p.in === "path" && p.name === name)?.schema?.pattern;
      return typeof pattern === "string" ? `(?:${pattern.replace(/^\^|\$$/g, "")})` : "[^/]+";
    })
    .join("");
  return `^${body}$`;
}

/** The jwt_authn and rbac filters (in that order) making the bench policy's decisions inside Envoy. */
export function inProxyFilters(authz: InProxyAuthz): Yaml[] {
  const permissions = authz.allowed.map((id) => {
    const [, method, ...path] = id.split(":");
    return {
      and_rules: {
        rules: [
          { header: { name: ":method", string_match: { exact: String(method).toUpperCase() } } },
          { url_path: { path: { safe_regex: { regex: templateRegex(path.join(":"), authz.document) } } } },
        ],
      },
    };
  });
  return [
    {
      name: "envoy.filters.http.jwt_authn",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        providers: {
          bench_idp: {
            issuer: authz.issuer,
            audiences: [authz.audience],
            local_jwks: { inline_string: authz.jwks },
            payload_in_metadata: "jwt_payload",
          },
        },
        // Named per route (routes carry requirement_name, /healthz is disabled as for ext_authz).
        requirement_map: { bench: { provider_name: "bench_idp" } },
      },
    },
    {
      name: "envoy.filters.http.rbac",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
        rules: {
          action: "ALLOW",
          policies: {
            bench_policy: {
              permissions: [{ or_rules: { rules: permissions } }],
              principals: [
                {
                  metadata: {
                    filter: "envoy.filters.http.jwt_authn",
                    path: [{ key: "jwt_payload" }, { key: "sub" }],
                    value: { string_match: { exact: authz.subject } },
                  },
                },
              ],
            },
          },
        },
      },
    },
  ];
}

/**
 * The shipped listener's routes for the in-proxy filters: where ext_authz is disabled
 * (/healthz) both are, every other route requires the bench token.
 */
function inProxyRoutes(hcm: Yaml): void {
  for (const host of hcm.route_config.virtual_hosts)
    for (const route of host.routes) {
      const disabled = route.typed_per_filter_config?.["envoy.filters.http.ext_authz"]?.disabled === true;
      route.typed_per_filter_config = {
        "envoy.filters.http.jwt_authn": {
          "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig",
          ...(disabled ? { disabled: true } : { requirement_name: "bench" }),
        },
        ...(disabled
          ? {
              // An RBACPerRoute without `rbac` turns the filter off for the route.
              "envoy.filters.http.rbac": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute",
              },
            }
          : {}),
      };
    }
}

/**
 * The shipped bootstrap with one listener per column: "alone" without the ext_authz filter,
 * and for each ext_authz server a listener whose filter calls its own cluster.
 */
export async function benchBootstrap(
  appPort: number,
  servers: ReadonlyArray<{ id: string; grpcPort: number }>,
  extAuthzTimeout: string | undefined,
  /** Adds listener `bench_<id>_bare`: server `id`'s, its routes naming `capability` instead. */
  bare?: { readonly id: string; readonly capability: string },
  /** Adds listener `bench_in_proxy`: no ext_authz, jwt_authn + rbac instead. */
  inProxy?: InProxyAuthz,
): Promise<string> {
  const rendered: Yaml = parse(
    await renderBootstrap({
      sidecarPort: servers[0]?.grpcPort ?? 1,
      appPort,
      capability: CAPABILITY,
      ...(extAuthzTimeout === undefined ? {} : { timeout: extAuthzTimeout }),
    }),
  );
  const shipped = rendered.static_resources.listeners[0];
  const sidecarCluster = rendered.static_resources.clusters.find((c: Yaml) => c.name === "authority_sidecar");
  const isExtAuthz = (filter: Yaml) => filter.name === "envoy.filters.http.ext_authz";
  const listener = (id: string): Yaml => {
    const copy: Yaml = structuredClone(shipped);
    copy.name = `bench_${id}`;
    copy.filter_chains[0].filters[0].typed_config.stat_prefix = `bench_${id}`;
    return copy;
  };
  const alone = listener("alone");
  const hcm = alone.filter_chains[0].filters[0].typed_config;
  hcm.http_filters = hcm.http_filters.filter((filter: Yaml) => !isExtAuthz(filter));
  for (const host of hcm.route_config.virtual_hosts)
    for (const route of host.routes) delete route.typed_per_filter_config;
  const listeners = [alone];
  if (inProxy !== undefined) {
    const own = listener("in_proxy");
    const ownHcm = own.filter_chains[0].filters[0].typed_config;
    ownHcm.http_filters = [
      ...inProxyFilters(inProxy),
      ...ownHcm.http_filters.filter((filter: Yaml) => !isExtAuthz(filter)),
    ];
    inProxyRoutes(ownHcm);
    listeners.push(own);
  }
  const clusters = rendered.static_resources.clusters.filter((c: Yaml) => c.name !== "authority_sidecar");
  for (const server of servers) {
    const copy = listener(server.id);
    const filter = copy.filter_chains[0].filters[0].typed_config.http_filters.find(isExtAuthz);
    filter.typed_config.grpc_service.envoy_grpc.cluster_name = `authz_${server.id}`;
    listeners.push(copy);
    if (bare?.id === server.id) {
      const other: Yaml = structuredClone(copy);
      other.name = `bench_${server.id}_bare`;
      const otherHcm = other.filter_chains[0].filters[0].typed_config;
      otherHcm.stat_prefix = other.name;
      for (const host of otherHcm.route_config.virtual_hosts)
        for (const route of host.routes) {
          const settings = route.typed_per_filter_config?.["envoy.filters.http.ext_authz"]?.check_settings;
          if (settings?.context_extensions !== undefined)
            settings.context_extensions.capability_id = bare.capability;
        }
      listeners.push(other);
    }
    const cluster: Yaml = structuredClone(sidecarCluster);
    cluster.name = `authz_${server.id}`;
    cluster.load_assignment.cluster_name = cluster.name;
    cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value =
      server.grpcPort;
    clusters.push(cluster);
  }
  rendered.static_resources.listeners = listeners;
  rendered.static_resources.clusters = clusters;
  return stringify(rendered);
}

/** Who a decision request presents itself as. */
type Caller = "subject" | "stranger" | "no token" | "forged";

/** One request of the decision set, and the decision the bench policy makes on it. */
export interface DecisionRequest {
  readonly method: string;
  readonly path: string;
  readonly caller: Caller;
  readonly allowed: boolean;
}

/**
 * The requests every authorizing setup must decide alike before it is measured: each allowed
 * operation, its literal sibling, other methods, segments the pattern or the template refuse,
 * the unchecked health path, and callers the policy does not name (another subject, none, a
 * token whose signature does not verify).
 */
export const DECISION_REQUESTS: readonly DecisionRequest[] = [
  { method: "GET", path: "/orders/42?expand=items&limit=5", caller: "subject", allowed: true },
  { method: "GET", path: "/orders/42", caller: "subject", allowed: true },
  { method: "GET", path: "/orders/summary", caller: "subject", allowed: true },
  { method: "GET", path: "/plain", caller: "subject", allowed: true },
  { method: "GET", path: "/healthz", caller: "no token", allowed: true },
  { method: "POST", path: "/orders/42", caller: "subject", allowed: false },
  { method: "DELETE", path: "/orders/42", caller: "subject", allowed: false },
  { method: "PUT", path: "/plain", caller: "subject", allowed: false },
  { method: "GET", path: "/orders/abc", caller: "subject", allowed: false },
  { method: "GET", path: "/orders/42/items", caller: "subject", allowed: false },
  { method: "GET", path: "/orders", caller: "subject", allowed: false },
  { method: "GET", path: "/plainer", caller: "subject", allowed: false },
  { method: "GET", path: "/admin", caller: "subject", allowed: false },
  { method: "GET", path: "/orders/42", caller: "stranger", allowed: false },
  { method: "GET", path: "/plain", caller: "no token", allowed: false },
  { method: "GET", path: "/plain", caller: "forged", allowed: false },
  { method: "POST", path: "/healthz", caller: "no token", allowed: false },
];

/** Each authorizing listener's answers to DECISION_REQUESTS: allowed (2xx) or not, in order. */
export interface DecisionCheck {
  readonly requests: readonly DecisionRequest[];
  /** Listener id → allowed per request. */
  readonly allowedBy: Readonly<Record<string, readonly boolean[]>>;
}

function statusOf(port: number, method: string, path: string, headers: Record<string, string>) {
  return new Promise<number>((resolve, reject) => {
    const request = httpRequest({ host: "127.0.0.1", port, method, path, headers }, (response) => {
      response.resume();
      response.on("end", () => resolve(response.statusCode ?? 0));
    });
    request.on("error", reject);
    request.end();
  });
}

/**
 * Sends DECISION_REQUESTS through each listener; throws, naming the requests, when a listener
 * decides one differently from the bench policy: its figures would measure other work.
 */
async function checkDecisions(
  ports: ReadonlyMap<string, number>,
  listeners: readonly string[],
  tokens: Readonly<Record<Caller, string | undefined>>,
): Promise<DecisionCheck> {
  const allowedBy: Record<string, boolean[]> = {};
  const wrong: string[] = [];
  for (const id of listeners) {
    const port = ports.get(`bench_${id}`);
    if (port === undefined) throw new Error(`Envoy has no listener bench_${id}`);
    const answers: boolean[] = [];
    for (const { method, path, caller, allowed } of DECISION_REQUESTS) {
      const token = tokens[caller];
      const headers = {
        host: UPSTREAM_HOST,
        "x-tenant": "acme",
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      };
      // A 503 is no decision (a fresh sidecar's first Checks may miss their deadline on a
      // loaded machine): asked again, for at most 20 s.
      const deadline = Date.now() + 20_000;
      let status = await statusOf(port, method, path, headers);
      while (status === 503 && Date.now() < deadline) {
        await delay(200);
        status = await statusOf(port, method, path, headers);
      }
      const answer = status >= 200 && status < 300;
      answers.push(answer);
      if (answer !== allowed) wrong.push(`${id}: ${method} ${path} as ${caller} → ${status}`);
    }
    allowedBy[id] = answers;
  }
  if (wrong.length > 0)
    throw new Error(`not measured: a setup decides unlike the bench policy (${wrong.join("; ")})`);
  return { requests: DECISION_REQUESTS, allowedBy };
}

async function listenerPorts(envoy: EnvoyHandle): Promise<Map<string, number>> {
  const status: Yaml = await (await fetch(`${envoy.adminUrl}/listeners?format=json`)).json();
  const ports = new Map<string, number>();
  for (const entry of status.listener_statuses ?? [])
    ports.set(String(entry.name), Number(entry.local_address?.socket_address?.port_value));
  return ports;
}

async function envoyVersion(envoy: EnvoyHandle): Promise<string> {
  const info: Yaml = await (await fetch(`${envoy.adminUrl}/server_info`)).json();
  const version = String(info.version ?? "");
  // "<sha>/1.40.0/Clean/RELEASE/BoringSSL"
  return version.split("/")[1] ?? version;
}

/** A trivial upstream (its own process): 200 and a small JSON body for any request. */
function startTrivialUpstream() {
  return startScriptProcess(
    `
    const http = await import("node:http");
    const body = JSON.stringify({ id: "42", status: "shipped", total: 42 });
    const server = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    });
    server.keepAliveTimeout = 60_000;
    server.listen(0, "127.0.0.1", () => console.log("upstream-port " + server.address().port));
    `,
    "upstream-port",
  );
}

interface RunFigures {
  readonly result: OpenLoopResult;
  readonly envoyCpuUs: number;
  readonly authzCpuUs: number;
  readonly envoyRss: number;
  readonly authzRss: number;
}

function median(values: readonly number[]): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] ?? Number.NaN)
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

function sumStatuses(all: ReadonlyArray<Readonly<Record<string, number>>>): Record<string, number> {
  const sum: Record<string, number> = {};
  for (const statuses of all)
    for (const [status, count] of Object.entries(statuses)) sum[status] = (sum[status] ?? 0) + count;
  return sum;
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));

function figures(name: string, request: string, runs: readonly RunFigures[]): ColumnFigures {
  const of = (pick: (run: RunFigures) => number, digits = 3) => round(median(runs.map(pick)), digits);
  const mb = (bytes: number) => bytes / (1024 * 1024);
  return {
    name,
    request,
    requests: runs.reduce((sum, run) => sum + run.result.requests, 0),
    reqPerSec: of((run) => run.result.reqPerSec, 0),
    p50Ms: of((run) => run.result.p50Ms),
    p99Ms: of((run) => run.result.p99Ms),
    maxMs: of((run) => run.result.maxMs),
    failed: runs.reduce((sum, run) => sum + run.result.errors + run.result.non2xx, 0),
    statuses: sumStatuses(runs.map((run) => run.result.statuses)),
    envoyCpuUsPerRequest: of((run) => run.envoyCpuUs, 1),
    authzCpuUsPerRequest: of((run) => run.authzCpuUs, 1),
    envoyRssMb: round(Math.max(...runs.map((run) => mb(run.envoyRss))), 1),
    authzRssMb: round(Math.max(...runs.map((run) => mb(run.authzRss))), 1),
    generatorLateP99Ms: of((run) => run.result.lateP99Ms),
  };
}

/**
 * The extra checks' CPU by difference over many adjacent pairs of short runs (checked, then
 * plain; the order flips every pair, so a steady drift in the machine's load cancels), the
 * sidecar's CPU read per thread in nanoseconds. A round of the main table is 7 s per request
 * kind with runs of other setups in between: its difference moves by tens of µs with the
 * machine's load and the sidecar's collections, more than the bound (decision 2201).
 */
async function pairedChecks(options: {
  readonly pairs: number;
  readonly runMs: number;
  readonly run: (request: Mix, runMs: number) => Promise<{ cpuUsPerCheck: number; keptUp: boolean }>;
  readonly checked: Mix;
  readonly plain: Mix;
}): Promise<PairedDifference> {
  const differences: number[] = [];
  let keptUp = true;
  for (let i = 0; i < options.pairs; i++) {
    const order = i % 2 === 0 ? [options.checked, options.plain] : [options.plain, options.checked];
    const runs = new Map<Mix, { cpuUsPerCheck: number; keptUp: boolean }>();
    for (const request of order) runs.set(request, await options.run(request, options.runMs));
    const checked = runs.get(options.checked);
    const plain = runs.get(options.plain);
    if (checked === undefined || plain === undefined) throw new Error("a run of the pair is missing");
    keptUp &&= checked.keptUp && plain.keptUp;
    differences.push(round(checked.cpuUsPerCheck - plain.cpuUsPerCheck, 1));
  }
  const mean = differences.reduce((sum, d) => sum + d, 0) / differences.length;
  const variance = differences.reduce((sum, d) => sum + (d - mean) ** 2, 0) / (differences.length - 1);
  return {
    pairs: options.pairs,
    runMs: options.runMs,
    differencesUs: differences,
    medianUs: round(median(differences), 1),
    meanUs: round(mean, 1),
    standardErrorUs: round(Math.sqrt(variance / differences.length), 1),
    keptUp,
  };
}

export async function benchEnvoy(options: EnvoyBenchOptions = {}): Promise<EnvoyBenchResult> {
  const rate = options.rate ?? 1000;
  const durationMs = options.durationMs ?? 6000;
  const warmupMs = options.warmupMs ?? 1000;
  const rounds = Math.max(1, options.rounds ?? 3);
  const cleanups: Array<() => Promise<void>> = [];
  try {
    const upstream = await startTrivialUpstream();
    cleanups.unshift(() => upstream.stop());
    const upstreamUrl = `http://127.0.0.1:${upstream.port}`;
    const world = await startBenchWorld({
      document: benchApi(),
      upstreamUrl,
      subjects: [SUBJECT],
      allowed: ALLOWED,
      parameterScoping: true,
      moreCapabilities: [
        {
          capabilityId: BARE_CAPABILITY,
          document: bareApi(),
          allowed: [`${BARE_CAPABILITY}:get:/orders/{orderId}`],
        },
      ],
    });
    cleanups.unshift(() => world.close());
    if (options.warmCompileCache !== false) await prepareServerEnv(world.dir);
    const servers: Array<AuthzColumn & { server: AuthzServer }> = [];
    for (const column of AUTHZ_SERVERS) {
      const sidecarEnv = {
        ...world.sidecarEnv,
        ...(options.sidecarDecisionTimeoutMs === undefined
          ? {}
          : { AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS: String(options.sidecarDecisionTimeoutMs) }),
      };
      const server = await column.start({ sidecarEnv });
      cleanups.unshift(() => server.stop());
      servers.push({ ...column, server });
    }
    const issuer = world.sidecarEnv.AUTHORITY_ISSUER ?? "";
    const inProxy: InProxyAuthz = {
      issuer,
      audience: world.sidecarEnv.AUTHORITY_AUDIENCE ?? "",
      jwks: await (await fetch(`${issuer}/.well-known/jwks.json`)).text(),
      subject: SUBJECT,
      allowed: ALLOWED,
      document: benchApi(),
    };
    const envoy = await startEnvoy(() =>
      benchBootstrap(
        upstream.port,
        servers.map((s) => ({ id: s.id, grpcPort: s.server.grpcPort })),
        options.extAuthzTimeout,
        { id: "sidecar", capability: BARE_CAPABILITY },
        inProxy,
      ),
    );
    cleanups.unshift(() => envoy.stop());
    const envoyPid = await envoy.pid;
    const ports = await listenerPorts(envoy);
    const loader = startHttpLoader();
    cleanups.unshift(() => loader.close());
    const token = await world.token(SUBJECT);
    const mix = mixes(token);
    // One character of the signature changed: the same claims, a signature that does not verify.
    const [head, payload, signature = ""] = token.split(".");
    const flipped = signature[10] === "A" ? "B" : "A";
    const forged = `${head}.${payload}.${signature.slice(0, 10)}${flipped}${signature.slice(11)}`;
    const decisions = await checkDecisions(ports, ["in_proxy", ...servers.map((s) => s.id)], {
      subject: token,
      stranger: await world.token("bench-stranger"),
      "no token": undefined,
      forged,
    });

    /** The generator's load for `request` through Envoy's listener `bench_<listener>`. */
    const loadOf = (listener: string, request: Mix) => {
      const port = ports.get(`bench_${listener}`);
      if (port === undefined) throw new Error(`Envoy has no listener bench_${listener}`);
      return {
        url: `http://127.0.0.1:${port}${request.path}`,
        method: "GET",
        headers: request.headers,
        rate,
        connections: CONNECTIONS,
      };
    };

    const measure = async (
      listener: string,
      request: Mix,
      authzPid: number | undefined,
      warmup = warmupMs,
    ): Promise<RunFigures> => {
      const load = loadOf(listener, request);
      // Warm-up (JIT, the sidecar's caches, Envoy's connections), not recorded.
      await loader.run({ ...load, durationMs: warmup });
      const envoyBefore = statCpuMs(envoyPid);
      const authzBefore = statCpuMs(authzPid);
      let envoyRss = 0;
      let authzRss = 0;
      const sample = setInterval(() => {
        envoyRss = Math.max(envoyRss, rssBytes(envoyPid));
        authzRss = Math.max(authzRss, rssBytes(authzPid));
      }, 200);
      const result = await loader.run({ ...load, durationMs }).finally(() => clearInterval(sample));
      const answered = Math.max(1, result.requests + result.non2xx);
      return {
        result,
        envoyCpuUs: ((statCpuMs(envoyPid) - envoyBefore) * 1000) / answered,
        authzCpuUs: ((statCpuMs(authzPid) - authzBefore) * 1000) / answered,
        envoyRss: Math.max(envoyRss, rssBytes(envoyPid)),
        authzRss: Math.max(authzRss, rssBytes(authzPid)),
      };
    };

    const aloneRuns: RunFigures[] = [];
    const inProxyRuns: RunFigures[] = [];
    const columnRuns = new Map<string, RunFigures[]>(servers.map((s) => [s.id, []]));
    const plainRuns: RunFigures[] = [];
    const bareRuns: RunFigures[] = [];
    const sidecar = servers.find((s) => s.id === "sidecar");
    // Per round: Envoy alone, then per server the checked request; the sidecar's checked run
    // sits between its plain run and its same-bytes run, so both differences are of adjacent runs.
    // The first round warms each request kind three times as long: the first requests of a
    // kind compile its code paths and fill its caches, which later rounds no longer pay.
    for (let i = 0; i < rounds; i++) {
      const warmup = i === 0 ? 3 * warmupMs : warmupMs;
      aloneRuns.push(await measure("alone", mix.checked, undefined, warmup));
      inProxyRuns.push(await measure("in_proxy", mix.checked, undefined, warmup));
      for (const server of servers) {
        const pid = server.server.pid;
        if (server === sidecar) plainRuns.push(await measure("sidecar", mix.plain, pid, warmup));
        columnRuns.get(server.id)?.push(await measure(server.id, mix.checked, pid, warmup));
        if (server === sidecar) bareRuns.push(await measure("sidecar_bare", mix.checked, pid, warmup));
      }
    }
    const paired = await pairedChecks({
      pairs: Math.max(2, options.checkPairs ?? 24),
      runMs: options.checkPairMs ?? 2000,
      run: async (request, runMs) => {
        const pid = sidecar?.server.pid;
        const load = loadOf("sidecar", request);
        await loader.run({ ...load, durationMs: 300 });
        const before = schedCpuUs(pid);
        const result = await loader.run({ ...load, durationMs: runMs });
        const answered = Math.max(1, result.requests + result.non2xx);
        return {
          cpuUsPerCheck: (schedCpuUs(pid) - before) / answered,
          keptUp: result.reqPerSec >= 0.95 * rate && result.errors + result.non2xx <= 0.01 * answered,
        };
      },
      checked: mix.checked,
      plain: mix.plain,
    });
    const columns = servers.map((s) => figures(s.name, mix.checked.label, columnRuns.get(s.id) ?? []));
    const checked = columns[servers.findIndex((s) => s.id === "sidecar")];
    if (checked === undefined) throw new Error("the sidecar column is missing");
    const plain = figures("Envoy + authority sidecar", mix.plain.label, plainRuns);
    const bare = figures("Envoy + authority sidecar", BARE_LABEL, bareRuns);
    // Per round (same round, adjacent runs), then the median: less exposed to load drifting.
    const checkedRuns = columnRuns.get("sidecar") ?? [];
    const perRound = (others: readonly RunFigures[]) =>
      others.map((run, i) => round((checkedRuns[i]?.authzCpuUs ?? Number.NaN) - run.authzCpuUs, 1));
    return {
      envoyVersion: await envoyVersion(envoy),
      rate,
      durationMs,
      warmupMs,
      rounds,
      extAuthzTimeout: `${options.extAuthzTimeout ?? "0.25s (as shipped)"}${options.sidecarDecisionTimeoutMs === undefined ? "" : `, sidecar decision deadline ${options.sidecarDecisionTimeoutMs} ms`}`,
      alone: figures("Envoy alone", mix.checked.label, aloneRuns),
      inProxy: figures(IN_PROXY_NAME, mix.checked.label, inProxyRuns),
      columns,
      decisions,
      extraChecks: {
        checked,
        plain,
        paired,
        cpuUsPerCheck: round(median(perRound(plainRuns)), 1),
        cpuUsPerCheckRounds: perRound(plainRuns),
        targetUs: 25,
        bare,
        rulesCpuUsPerCheck: round(median(perRound(bareRuns)), 1),
        rulesCpuUsPerCheckRounds: perRound(bareRuns),
      },
    };
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}

/**
 * Whether a setup served the rate without queueing: ≥ 95 % of it achieved, ≤ 1 % failed, and
 * a median under Envoy's shipped ext_authz timeout (a median of seconds is a queue: the
 * process did not get the CPU it needed, and its CPU per request is then not comparable).
 */
function keptUp(figures: ColumnFigures, rate: number): boolean {
  return (
    figures.reqPerSec >= 0.95 * rate &&
    figures.failed <= 0.01 * (figures.requests + figures.failed) &&
    figures.p50Ms < 250
  );
}

/** Envoy's CPU per request plus the ext_authz server's (none: Envoy's alone). */
function totalCpu(figures: ColumnFigures): number {
  return (
    figures.envoyCpuUsPerRequest +
    (Number.isNaN(figures.authzCpuUsPerRequest) ? 0 : figures.authzCpuUsPerRequest)
  );
}

/** "0", or how many failed: by HTTP status, and those never answered (or never sent in time). */
function failures(figures: ColumnFigures): string {
  if (figures.failed === 0) return "0";
  const by = Object.entries(figures.statuses)
    .filter(([status]) => !status.startsWith("2") && status !== "0")
    .map(([status, count]) => `${status}: ${count}`);
  const statused = Object.entries(figures.statuses)
    .filter(([status]) => !status.startsWith("2") && status !== "0")
    .reduce((sum, [, count]) => sum + count, 0);
  const unanswered = figures.failed - statused;
  if (unanswered > 0) by.push(`unanswered: ${unanswered}`);
  return `${figures.failed} (${by.join(", ")})`;
}

/** The report's tables: each setup, what each ext_authz server adds to Envoy alone, the extra checks. */
export function envoyTables(result: EnvoyBenchResult): Table[] {
  const setup = (figures: ColumnFigures) => ({
    setup: figures.name,
    p50Ms: figures.p50Ms,
    p99Ms: figures.p99Ms,
    maxMs: figures.maxMs,
    achievedReqPerSec: figures.reqPerSec,
    failed: failures(figures),
    envoyCpuUsPerRequest: figures.envoyCpuUsPerRequest,
    authzServerCpuUsPerRequest: figures.authzCpuUsPerRequest,
    envoyRssMb: figures.envoyRssMb,
    authzServerRssMb: figures.authzRssMb,
    generatorLateP99Ms: figures.generatorLateP99Ms,
  });
  const ratio = (a: number, b: number) => (b > 0 ? round(a / b, 2) : Number.NaN);
  const { alone, inProxy } = result;
  const added = [inProxy, ...result.columns].map((column) => ({
    authzServer: column.name.replace(/^Envoy \+ /, ""),
    addedP50Ms: round(column.p50Ms - alone.p50Ms, 3),
    addedP99Ms: round(column.p99Ms - alone.p99Ms, 3),
    p50Ratio: ratio(column.p50Ms, alone.p50Ms),
    p99Ratio: ratio(column.p99Ms, alone.p99Ms),
    addedEnvoyCpuUsPerRequest: round(column.envoyCpuUsPerRequest - alone.envoyCpuUsPerRequest, 1),
    serverCpuUsPerRequest: column.authzCpuUsPerRequest,
    totalCpuPerRequestRatio: ratio(totalCpu(column), alone.envoyCpuUsPerRequest),
  }));
  const overFloor = result.columns.map((column) => ({
    authzServer: column.name.replace(/^Envoy \+ /, ""),
    addedP50Ms: round(column.p50Ms - inProxy.p50Ms, 3),
    addedP99Ms: round(column.p99Ms - inProxy.p99Ms, 3),
    p50Ratio: ratio(column.p50Ms, inProxy.p50Ms),
    p99Ratio: ratio(column.p99Ms, inProxy.p99Ms),
    totalCpuPerRequestRatio: ratio(totalCpu(column), totalCpu(inProxy)),
    rssRatio: ratio(column.envoyRssMb + column.authzRssMb, inProxy.envoyRssMb),
  }));
  const setups = Object.keys(result.decisions.allowedBy);
  const decisions = result.decisions.requests.map((request, i) => ({
    request: `${request.method} ${request.path} (${request.caller})`,
    policy: request.allowed ? "allow" : "deny",
    ...Object.fromEntries(
      setups.map((id) => [id, result.decisions.allowedBy[id]?.[i] === true ? "allow" : "deny"]),
    ),
  }));
  const { checked, plain, cpuUsPerCheck, targetUs, bare, rulesCpuUsPerCheck, paired } = result.extraChecks;
  const rounds = (values: readonly number[]) => values.join(" / ");
  const measured = (...all: ColumnFigures[]) => all.every((figures) => keptUp(figures, result.rate));
  const notMeasured =
    "not measured: the sidecar did not keep up with the rate (queueing; CPU per request under overload is not comparable)";
  const checks = [
    {
      request: checked.request,
      sidecarCpuUsPerCheck: checked.authzCpuUsPerRequest,
      p50Ms: checked.p50Ms,
      p99Ms: checked.p99Ms,
      failed: failures(checked),
    },
    {
      request: plain.request,
      sidecarCpuUsPerCheck: plain.authzCpuUsPerRequest,
      p50Ms: plain.p50Ms,
      p99Ms: plain.p99Ms,
      failed: failures(plain),
    },
    {
      request: bare.request,
      sidecarCpuUsPerCheck: bare.authzCpuUsPerRequest,
      p50Ms: bare.p50Ms,
      p99Ms: bare.p99Ms,
      failed: failures(bare),
    },
    {
      request: `the extra checks: checked − plain over ${paired.pairs} adjacent pairs of ${paired.runMs / 1000} s runs (median of the pairs; mean ${paired.meanUs} ± ${paired.standardErrorUs} standard error; carries the target: everything the checks add, the larger request's decoding and recording included)`,
      sidecarCpuUsPerCheck: paired.medianUs,
      perRoundUs: rounds(paired.differencesUs),
      target: `≤ ${targetUs} µs`,
      met: paired.keptUp ? paired.medianUs <= targetUs : notMeasured,
    },
    {
      request: "checked − plain, the rounds above (median of per-round differences)",
      sidecarCpuUsPerCheck: cpuUsPerCheck,
      perRoundUs: rounds(result.extraChecks.cpuUsPerCheckRounds),
      ...(measured(checked, plain) ? {} : { met: notMeasured }),
    },
    {
      request:
        "of which the declared rules: checked − the same request without rules (median of per-round differences; same request bytes)",
      sidecarCpuUsPerCheck: rulesCpuUsPerCheck,
      perRoundUs: rounds(result.extraChecks.rulesCpuUsPerCheckRounds),
      ...(measured(checked, bare) ? {} : { met: notMeasured }),
    },
  ];
  const how = `${result.rate} req/s open loop, HTTP/1.1 on ${CONNECTIONS} keep-alive connections, ${result.durationMs / 1000} s measured after ${result.warmupMs / 1000} s warm-up (${(3 * result.warmupMs) / 1000} s in the first round), median of ${result.rounds} alternating rounds; Envoy ${result.envoyVersion} (--concurrency 1), ext_authz timeout ${result.extAuthzTimeout}; request: ${checked.request}`;
  return [
    {
      title: `Per setup, through the same Envoy (${how}).`,
      rows: [setup(alone), setup(inProxy), ...result.columns.map(setup)],
    },
    { title: "Added to Envoy alone, and ratios, same run:", rows: added },
    {
      title: `Against the floor, Envoy's own authorization (jwt_authn verifying the same token against an inline JWKS, rbac allowing the policy's method + path for its subject; none of the sidecar's request checks), same run: what the ext_authz server adds over it, and ratios (total CPU: Envoy + server over Envoy with its filters; RSS: both processes over Envoy).`,
      rows: overFloor,
    },
    {
      title: `Same decisions: each authorizing setup's answer to the ${decisions.length} requests of the decision set (2xx = allow), checked before anything is measured; a setup that differs from the policy stops the bench.`,
      rows: decisions,
    },
    {
      title: `The sidecar's extra checks (input schema, signed constraint, path template beside a literal sibling, header removal): the same sidecar at ${result.rate} req/s with and without them. The target (issue 15) is on checked − plain over adjacent pairs of short runs; checked − the same request without rules isolates the rules from the request's size (docs/decisions/2201-extra-checks-bench.md).`,
      rows: checks,
    },
  ];
}

if (import.meta.main) {
  const { renderTable } = await import("./report.ts");
  for (const table of envoyTables(await benchEnvoy()))
    console.log(`${table.title}\n${renderTable(table.rows)}\n`);
  process.exit(0);
}
