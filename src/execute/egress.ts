/**
 * The egress gate (docs/security.md, "Egress"; decisions 0601 and 2503). One object per
 * process, built from the platform admin's settings: it is asked at import and when a binding
 * is saved (is this URL acceptable?) and it guards every outbound connection to a destination a
 * partner can influence — upstream calls (the executor's fetch, the sidecar's forward proxy),
 * OAuth token requests, binding JWKS — on the address actually connected to, every redirect hop
 * included, so a name that resolves to a public address at import and to 127.0.0.1 later is
 * refused when it matters. test/architecture/outbound-clients.test.ts fails when an outbound
 * client is created anywhere else without a reason on its allow list.
 *
 * Refused: loopback, unspecified, link-local, metadata, multicast, broadcast and reserved
 * addresses (the IPv6 forms that embed one included), private and shared ranges, and the
 * platform's own service endpoints. The allow list (CIDRs, address:port, host names) opens the
 * private, loopback, link-local and reserved classes where the platform admin says so (a name
 * entry: the addresses that name resolves to, on a connection to that name); nothing opens the
 * metadata, unspecified, multicast and broadcast classes or the platform's own endpoints.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import {
  type ClientRequest,
  Agent as HttpAgent,
  type AgentOptions as HttpAgentOptions,
  request as httpRequest,
  type RequestOptions,
} from "node:http";
import {
  Agent as HttpsAgent,
  type AgentOptions as HttpsAgentOptions,
  request as httpsRequest,
} from "node:https";
import { createRequire } from "node:module";
import { isIP, type LookupFunction } from "node:net";
import { networkInterfaces } from "node:os";
import type { Duplex } from "node:stream";
import type { buildConnector, Dispatcher, Agent as UndiciAgent } from "undici";
import {
  type AddressClass,
  addressClassText,
  allowEntryMatches,
  allowEntryNames,
  classifyAddress,
  classifyHostName,
  type EgressAllowEntry,
  type IpAddress,
  isAllowable,
  normalizeHostName,
  parseIpAddress,
  sameAddress,
} from "../core/egress-address.ts";

/**
 * undici (the gated fetch's connection pool) is loaded by the first gated fetch: a process that
 * never makes one — the sidecar, whose forward proxy is on node:http — does not load its
 * ~0.8 MB of code (start-up time and memory; issue 30).
 */
const requireModule = createRequire(import.meta.url);
const loadUndici = (): typeof import("undici") => requireModule("undici") as typeof import("undici");

/** Why a destination is refused: an address class, or one of the platform's own endpoints. */
export type EgressRule = Exclude<AddressClass, "public"> | "platform_service";

export type EgressVerdict =
  | { readonly ok: true; readonly unresolved?: true }
  | { readonly ok: false; readonly rule: EgressRule; readonly resolved: boolean };

/** One address a name resolves to (dns.lookup's shape). */
export interface ResolvedAddress {
  readonly address: string;
  readonly family: number;
}

/** Resolves a host name to every address (the seam tests use to play a rebinding resolver). */
export type Resolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

/** A service of the platform itself: host name or address, and port. */
export interface PlatformEndpoint {
  readonly host: string;
  readonly port: number;
}

/** node:http(s) requests through the gate's own agents (EgressPolicy.httpClient). */
export interface EgressHttpClient {
  /** `protocol` (http: or https:) picks the client; the connection is always one of the gate's. */
  request(options: RequestOptions): ClientRequest;
  /** Closes the kept-alive connections. */
  destroy(): void;
}

/** fetch's shape, as the gate and its callers use it. */
export type FetchLike = (input: string | URL, init?: RequestInit) => Promise<Response>;

/** What `EgressPolicy.request` answers: the status, the headers and the body as sent (still content-coded). */
export interface GatedReply {
  readonly status: number;
  readonly headers: Headers;
  /** Read it whole (bounded-body.ts) or destroy it: the connection goes back to the pool after. */
  readonly body: {
    on(event: "data", listener: (chunk: Buffer) => void): unknown;
    on(event: "end", listener: () => void): unknown;
    on(event: "error", listener: (error: Error) => void): unknown;
    destroy(error?: Error): void;
  };
}

/** One HTTP exchange through the gate; redirects are returned as they are. */
export type GatedRequest = (
  url: URL,
  init: {
    readonly method: string;
    readonly headers: Readonly<Record<string, string>>;
    readonly body?: string;
    readonly signal: AbortSignal;
  },
) => Promise<GatedReply>;

export interface EgressPolicyOptions {
  /** The platform admin's allow list (src/config: `egress-allow`). */
  readonly allow?: readonly EgressAllowEntry[];
  /**
   * Exact URLs from the operator's own configuration (its trusted issuers' JWKS): `fetch`
   * sends a request for exactly one of them as the operator configured it, without redirects.
   * A partner who names one makes the process fetch nothing it does not fetch already.
   */
  readonly operatorUrls?: readonly string[];
  /** The platform's own services (authority, managed API, crypto service, IdP, Redis, sidecar ports…). */
  readonly platformEndpoints?: readonly PlatformEndpoint[];
  /** Default: the system resolver (dns.lookup, every address). */
  readonly resolve?: Resolver;
}

/** A destination refused by the egress policy; `authorityCode` maps it onto the public error table. */
export class EgressDeniedError extends Error {
  readonly code = "egress_denied";
  readonly authorityCode = "egress_denied";
  readonly rule: EgressRule;

  constructor(rule: EgressRule) {
    super(`The upstream destination is refused by the egress policy (${ruleText(rule)}).`);
    this.name = "EgressDeniedError";
    this.rule = rule;
  }
}

export function ruleText(rule: EgressRule): string {
  return rule === "platform_service" ? "a service of the platform itself" : addressClassText[rule];
}

/** The setting that opens a refused destination, as an error names it to the user. */
export const EGRESS_ALLOW_SETTING = "egress-allow";

/**
 * How a refusal of `rule` can be lifted, for the people who see it (an importer, a partner
 * admin): the platform admin's setting for the classes it opens, nothing for those it never
 * opens (metadata, unspecified, multicast, broadcast, the platform's own services).
 */
export function egressAllowHint(rule: EgressRule): string | undefined {
  if (rule === "platform_service" || !isAllowable(rule)) return undefined;
  return `the platform admin can allow it with the ${EGRESS_ALLOW_SETTING} setting (AUTHORITY_EGRESS_ALLOW, --${EGRESS_ALLOW_SETTING}; docs/configuration.md)`;
}

/** The refusal somewhere in an error's cause chain (fetch wraps connect errors in a TypeError). */
export function egressDenialOf(error: unknown): EgressDeniedError | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    if (current instanceof EgressDeniedError) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

export interface EgressPolicy {
  readonly allow: readonly EgressAllowEntry[];
  /**
   * Checks a URL's destination (one of the operator's own URLs passes as it is). With
   * `resolve` (import, a binding's JWKS URL), a host name is resolved and every
   * address checked; a name that does not resolve now passes (`unresolved`): it is checked
   * again when a connection is made. Without it, only what needs no DNS (literal addresses,
   * metadata names, the platform's own names) is checked: the connection's lookup does the rest.
   */
  checkUrl(url: URL | string, options?: { readonly resolve?: boolean }): Promise<EgressVerdict>;
  /** The `lookup` of a connection to `port`: resolves, checks every address, refuses or returns them. */
  lookupFor(port: number): LookupFunction;
  /** For fetch (`dispatcher`): every connection it opens is checked. */
  readonly dispatcher: UndiciAgent;
  /**
   * The gate's fetch: every connection it opens (each redirect hop's too) is checked on the
   * address connected to; a refused one rejects with an EgressDeniedError in its cause chain.
   */
  readonly fetch: FetchLike;
  /**
   * `fetch` for requests a partner shapes (OAuth token endpoints of auth profiles): an operator
   * URL skips the gate only for a GET or HEAD without a body — its decision export and traces
   * endpoints take the process's own POSTs (by `fetch`), never a partner's.
   */
  readonly partnerFetch: FetchLike;
  /**
   * The same gate as `fetch`, without its WHATWG machinery (Request, Response, web streams):
   * undici's `request` on the gate's dispatcher, about half of fetch's CPU per call (decision
   * 2841). Nothing is decoded or followed. Only for upstream calls a partner shapes: an operator
   * URL skips the gate for a GET or HEAD without a body, never for anything else.
   */
  readonly request: GatedRequest;
  /** node:http / node:https agents whose connections are checked the same way. */
  httpAgent(options?: HttpAgentOptions): HttpAgent;
  /** A node:http(s) client on two such agents (the forward proxy streams bodies fetch would buffer). */
  httpClient(options?: HttpAgentOptions): EgressHttpClient;
  httpsAgent(options?: HttpsAgentOptions): HttpsAgent;
  /** Adds services of the platform known only once they listen (a port chosen at start). */
  addPlatformEndpoints(...endpoints: readonly (PlatformEndpoint | undefined)[]): void;
  close(): Promise<void>;
}

const defaultResolve: Resolver = async (hostname) => await dnsLookup(hostname, { all: true });

const bare = (host: string): string =>
  host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;

/** Default ports of the URL schemes platform services use. */
const DEFAULT_PORTS: Readonly<Record<string, number>> = {
  "http:": 80,
  "https:": 443,
  "redis:": 6379,
  "rediss:": 6379,
  "postgres:": 5432,
  "postgresql:": 5432,
};

/** The endpoint a service URL points at (undefined for sqlite: and other non-network URLs). */
export function endpointOfUrl(raw: string | undefined): PlatformEndpoint | undefined {
  if (raw === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return undefined;
  }
  const port = url.port === "" ? DEFAULT_PORTS[url.protocol] : Number(url.port);
  if (port === undefined || url.hostname === "") return undefined;
  return { host: bare(url.hostname), port };
}

/** Addresses of this machine's interfaces: what a service listening on 0.0.0.0 is reachable at. */
function localInterfaceAddresses(): IpAddress[] {
  const out: IpAddress[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const entry of list ?? []) {
      const parsed = parseIpAddress(entry.address);
      if (parsed !== undefined) out.push(parsed);
    }
  }
  return out;
}

const PLATFORM_NAME_TTL_MS = 30_000;

/** A URL as fetch would request it (normalized), or undefined when it is none. */
function requestedHref(input: string | URL): string | undefined {
  try {
    return new URL(input).href;
  } catch {
    return undefined;
  }
}

export function createEgressPolicy(options: EgressPolicyOptions = {}): EgressPolicy {
  // Configuration only: nothing a partner sends reaches this list, and nothing may change it later.
  const allow: readonly EgressAllowEntry[] = Object.freeze([...(options.allow ?? [])]);
  const operatorUrls: ReadonlySet<string> = new Set(
    (options.operatorUrls ?? []).map(requestedHref).filter((href) => href !== undefined),
  );
  const resolve = options.resolve ?? defaultResolve;
  const toKnown = (endpoint: PlatformEndpoint) => {
    const host = bare(endpoint.host);
    return { port: endpoint.port, name: normalizeHostName(host), address: parseIpAddress(host) };
  };
  const endpoints = (options.platformEndpoints ?? []).map(toKnown);
  const platformNames = new Map<string, { addresses: IpAddress[]; until: number }>();

  /** The addresses a platform service's name has (cached briefly; a failure counts as none). */
  async function platformAddresses(name: string): Promise<IpAddress[]> {
    const cached = platformNames.get(name);
    if (cached !== undefined && cached.until > Date.now()) return cached.addresses;
    let addresses: IpAddress[] = [];
    try {
      addresses = (await resolve(name))
        .map((entry) => parseIpAddress(entry.address))
        .filter((a): a is IpAddress => a !== undefined);
    } catch {
      addresses = [];
    }
    platformNames.set(name, { addresses, until: Date.now() + PLATFORM_NAME_TTL_MS });
    return addresses;
  }

  function isPlatformName(name: string, port: number): boolean {
    const normalized = normalizeHostName(name);
    return endpoints.some((e) => e.port === port && e.address === undefined && e.name === normalized);
  }

  async function isPlatformAddress(address: IpAddress, port: number): Promise<boolean> {
    for (const endpoint of endpoints) {
      if (endpoint.port !== port) continue;
      if (endpoint.address === undefined) {
        if ((await platformAddresses(endpoint.name)).some((a) => sameAddress(a, address))) return true;
        continue;
      }
      if (classifyAddress(endpoint.address) === "unspecified") {
        // Listening on every interface: reachable at loopback and at each interface address.
        const kind = classifyAddress(address);
        if (kind === "loopback" || kind === "unspecified") return true;
        if (localInterfaceAddresses().some((a) => sameAddress(a, address))) return true;
        continue;
      }
      if (sameAddress(endpoint.address, address)) return true;
    }
    return false;
  }

  /** `named`: the connection is to a host name an entry lists, so its addresses pass as listed. */
  async function addressVerdict(
    address: IpAddress,
    port: number,
    resolved: boolean,
    named = false,
  ): Promise<EgressVerdict> {
    const kind = classifyAddress(address);
    if (kind !== "public" && !isAllowable(kind)) return { ok: false, rule: kind, resolved };
    if (await isPlatformAddress(address, port)) return { ok: false, rule: "platform_service", resolved };
    if (kind === "public" || named) return { ok: true };
    if (allow.some((entry) => allowEntryMatches(entry, address, port))) return { ok: true };
    return { ok: false, rule: kind, resolved };
  }

  /** What needs no DNS: a literal address, a metadata name, a platform service's name. */
  async function staticVerdict(host: string, port: number): Promise<EgressVerdict | undefined> {
    const literal = parseIpAddress(bare(host));
    if (literal !== undefined) return addressVerdict(literal, port, false);
    const named = classifyHostName(host);
    if (named !== undefined) return { ok: false, rule: named, resolved: false };
    if (isPlatformName(host, port)) return { ok: false, rule: "platform_service", resolved: false };
    return undefined;
  }

  /** Resolves a name and checks every address: one refused address refuses the name. */
  async function resolveChecked(host: string, port: number): Promise<ResolvedAddress[]> {
    const early = await staticVerdict(host, port);
    if (early !== undefined && !early.ok) throw new EgressDeniedError(early.rule);
    const literal = parseIpAddress(bare(host));
    if (literal !== undefined) {
      return [{ address: bare(host), family: literal.version }];
    }
    const answers = await resolve(host);
    const named = allow.some((entry) => allowEntryNames(entry, host, port));
    const out: ResolvedAddress[] = [];
    for (const answer of answers) {
      const parsed = parseIpAddress(answer.address);
      // An answer that is not an address cannot be connected to safely.
      if (parsed === undefined) throw new EgressDeniedError("reserved");
      const verdict = await addressVerdict(parsed, port, true, named);
      if (!verdict.ok) throw new EgressDeniedError(verdict.rule);
      out.push({ address: answer.address, family: answer.family });
    }
    return out;
  }

  async function checkUrl(url: URL | string, checkOptions: { readonly resolve?: boolean } = {}) {
    const parsed = typeof url === "string" ? new URL(url) : url;
    if (operatorUrls.has(parsed.href)) return { ok: true } as const;
    const port = parsed.port === "" ? (DEFAULT_PORTS[parsed.protocol] ?? 0) : Number(parsed.port);
    const host = parsed.hostname;
    const early = await staticVerdict(host, port);
    if (early !== undefined) return early;
    if (checkOptions.resolve !== true) return { ok: true } as const;
    try {
      await resolveChecked(host, port);
      return { ok: true } as const;
    } catch (error) {
      if (error instanceof EgressDeniedError) return { ok: false, rule: error.rule, resolved: true } as const;
      return { ok: true, unresolved: true } as const;
    }
  }

  function lookupFor(port: number): LookupFunction {
    return (hostname, lookupOptions, callback) => {
      resolveChecked(hostname, port).then(
        (answers) => {
          const family =
            lookupOptions.family === "IPv4" ? 4 : lookupOptions.family === "IPv6" ? 6 : lookupOptions.family;
          const wanted = family === 4 || family === 6 ? answers.filter((a) => a.family === family) : answers;
          const first = wanted[0];
          if (first === undefined) {
            const error = Object.assign(new Error(`no address for the upstream host`), { code: "ENOTFOUND" });
            callback(error, "", 0);
            return;
          }
          if (lookupOptions.all === true) {
            (callback as unknown as (e: null, a: ResolvedAddress[]) => void)(null, wanted);
          } else callback(null, first.address, first.family);
        },
        (error: NodeJS.ErrnoException) => callback(error, "", 0),
      );
    };
  }

  /** Literal addresses skip a connection's lookup: they are checked before connecting. */
  async function checkLiteral(host: string, port: number): Promise<void> {
    const literal = parseIpAddress(bare(host));
    if (literal === undefined || isIP(bare(host)) === 0) return;
    const verdict = await addressVerdict(literal, port, false);
    if (!verdict.ok) throw new EgressDeniedError(verdict.rule);
  }

  const connectors = new Map<number, buildConnector.connector>();
  const connectorFor = (port: number): buildConnector.connector => {
    let connector = connectors.get(port);
    if (connector === undefined) {
      connector = loadUndici().buildConnector({ lookup: lookupFor(port) });
      connectors.set(port, connector);
    }
    return connector;
  };
  let dispatcher: UndiciAgent | undefined;

  function guard<A extends HttpAgent>(agent: A, defaultPort: number): A {
    const original = agent.createConnection.bind(agent) as (options: object) => Duplex;
    type Callback = (error: Error | null, socket?: Duplex) => void;
    const guarded = (
      connectOptions: { host?: string | null; port?: number | string | null },
      callback: Callback,
    ) => {
      const port = Number(connectOptions.port) || defaultPort;
      const host = connectOptions.host ?? "localhost";
      checkLiteral(host, port).then(
        () => {
          let socket: Duplex;
          try {
            socket = original({ ...connectOptions, lookup: lookupFor(port) });
          } catch (error) {
            callback(error as Error);
            return;
          }
          callback(null, socket);
        },
        (error: Error) => callback(error),
      );
      return undefined;
    };
    (agent as unknown as { createConnection: typeof guarded }).createConnection = guarded;
    return agent;
  }

  function gatedDispatcher(): UndiciAgent {
    dispatcher ??= new (loadUndici().Agent)({
      connect: (connectOptions, callback) => {
        const port = Number(connectOptions.port) || (connectOptions.protocol === "https:" ? 443 : 80);
        checkLiteral(connectOptions.hostname, port).then(
          () => connectorFor(port)(connectOptions, callback),
          (error: Error) => callback(error, null),
        );
      },
    });
    return dispatcher;
  }

  const gatedFetch: FetchLike = (input, init) => {
    const href = requestedHref(input);
    if (href !== undefined && operatorUrls.has(href)) {
      // The operator's own URL, as configured: not where a redirect would lead.
      return globalThis.fetch(input, { ...init, redirect: "manual" });
    }
    return globalThis.fetch(input, { ...init, dispatcher: gatedDispatcher() } as unknown as RequestInit);
  };

  /** A read as the process itself makes of an operator URL (its issuers' key sets): GET or HEAD, no body. */
  const readsOnly = (method: string | undefined, body: unknown): boolean =>
    (method === undefined || method.toUpperCase() === "GET" || method.toUpperCase() === "HEAD") &&
    (body === undefined || body === null);

  const partnerFetch: FetchLike = (input, init) =>
    readsOnly(init?.method, init?.body)
      ? gatedFetch(input, init)
      : globalThis.fetch(input, { ...init, dispatcher: gatedDispatcher() } as unknown as RequestInit);

  const gatedRequest: GatedRequest = async (url, init) => {
    // The operator's own URL, as configured, goes without the gate only as the process itself
    // reads one (a GET without a body: its issuers' key sets). Its decision export and traces
    // endpoints are operator URLs too: a partner's upstream call must not post its body there.
    const dispatcher =
      readsOnly(init.method, init.body) && operatorUrls.has(url.href)
        ? loadUndici().getGlobalDispatcher()
        : gatedDispatcher();
    const reply = await dispatcher.request({
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: init.method as Dispatcher.HttpMethod,
      headers: init.headers,
      ...(init.body === undefined ? {} : { body: init.body }),
      signal: init.signal,
    });
    const headers = new Headers();
    for (const [name, value] of Object.entries(reply.headers)) {
      if (value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
    }
    return { status: reply.statusCode, headers, body: reply.body };
  };

  function httpClient(agentOptions: HttpAgentOptions = {}): EgressHttpClient {
    const http = guard(new HttpAgent(agentOptions), 80);
    const https = guard(new HttpsAgent(agentOptions), 443);
    return {
      request(requestOptions) {
        // Whatever the options say, the socket comes from one of the gate's agents.
        const { createConnection: _c, socketPath: _s, lookup: _l, agent: _a, ...rest } = requestOptions;
        return rest.protocol === "https:"
          ? httpsRequest({ ...rest, agent: https })
          : httpRequest({ ...rest, agent: http });
      },
      destroy() {
        http.destroy();
        https.destroy();
      },
    };
  }

  return {
    allow,
    checkUrl,
    lookupFor,
    get dispatcher() {
      return gatedDispatcher();
    },
    fetch: gatedFetch,
    partnerFetch,
    request: gatedRequest,
    httpAgent: (agentOptions = {}) => guard(new HttpAgent(agentOptions), 80),
    httpsAgent: (agentOptions = {}) => guard(new HttpsAgent(agentOptions), 443),
    httpClient,
    addPlatformEndpoints(...added) {
      for (const endpoint of added) if (endpoint !== undefined) endpoints.push(toKnown(endpoint));
    },
    async close() {
      await dispatcher?.close();
    },
  };
}
