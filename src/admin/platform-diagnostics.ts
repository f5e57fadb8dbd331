/**
 * The parts of GET /admin/diagnostics about the platform around the service: the hosted MCP
 * settings, the OAuth settings (issuer, audiences, JWKS state) and the services this process
 * knows of (store, Redis, crypto service, managed API), each probed with a short timeout.
 *
 * Nothing secret leaves: URLs are shown without userinfo, query or fragment, probes never
 * send a credential (a Redis that wants one is "reachable, authentication required"), and a
 * failed probe is named by a fixed word, never by its error text.
 */
import { connect as connectTcp, type Socket } from "node:net";
import { connect as connectTls } from "node:tls";
import type { JwksStatus } from "../identity/jwt-verifier.ts";
import type { StoreHealth } from "../store/store.ts";

/** Services of the platform the process was configured with (URLs as configured). */
export interface PlatformEndpoints {
  readonly jwksUrl?: string;
  readonly redisUrl?: string;
  readonly cryptoUrl?: string;
  /** True when policies are protected by the crypto service (not by embedded key rings). */
  readonly cryptoInUse?: boolean;
  readonly managedUrl?: string;
}

/** The hosted MCP endpoint as configured (built by src/mcp/diagnostics-facts.ts). */
export interface McpFacts {
  readonly endpoint: string;
  readonly protocol_versions: readonly string[];
  readonly latest_protocol_version: string;
  readonly allowed_origins: readonly string[];
  readonly upstream_timeout_ms: number;
  readonly max_response_bytes: number;
  readonly scopes_supported: readonly string[];
  readonly tool_cache_size: number;
}

export interface OAuthFacts {
  readonly issuers: readonly {
    readonly issuer: string;
    readonly audiences: readonly string[];
    readonly jwks_url: string | null;
    /** null when the verifier does not expose its key set's state. */
    readonly jwks: JwksStatus | null;
  }[];
}

export interface ProbeResult {
  readonly reachable: boolean;
  /** A fixed word: `ok`, `authentication_required`, `http_<status>`, `timeout`, `connection_failed`, `invalid_url`. */
  readonly detail: string;
  /** What the service said its version is, when it said. */
  readonly version: string | null;
}

export type ServiceFacts =
  | { readonly configured: false }
  | ({ readonly configured: true; readonly url: string } & ProbeResult);

export interface ResourceFacts {
  readonly store: { readonly backend: string; readonly ok: boolean };
  readonly redis: ServiceFacts;
  readonly crypto_service: ServiceFacts & { readonly in_use: boolean };
  readonly managed_api: ServiceFacts;
}

/** Longest wait for one probe. */
export const PROBE_TIMEOUT_MS = 1500;
const MAX_VERSION_LENGTH = 64;
const VERSION = /^[A-Za-z0-9._+-]{1,64}$/;

/** The URL without anything that can carry a credential: userinfo, query, fragment. */
export function displayUrl(raw: string): string | null {
  try {
    const url = new URL(raw);
    // Shown as configured when nothing can carry a credential (an issuer is compared exactly).
    if (url.username === "" && url.password === "" && url.search === "" && url.hash === "") return raw;
    url.username = "";
    url.password = "";
    url.search = "";
    url.hash = "";
    return url.toString();
  } catch {
    return null;
  }
}

export function oauthFacts(
  config: { readonly issuer: string; readonly audience: string },
  platform: PlatformEndpoints | undefined,
  jwksStatus: (() => JwksStatus) | undefined,
): OAuthFacts {
  let jwks: JwksStatus | null = null;
  try {
    jwks = jwksStatus?.() ?? null;
  } catch {
    jwks = null;
  }
  return {
    issuers: [
      {
        issuer: displayUrl(config.issuer) ?? config.issuer,
        audiences: [config.audience],
        jwks_url: platform?.jwksUrl === undefined ? null : displayUrl(platform.jwksUrl),
        jwks,
      },
    ],
  };
}

function versionOf(value: unknown): string | null {
  return typeof value === "string" && value.length <= MAX_VERSION_LENGTH && VERSION.test(value)
    ? value
    : null;
}

/** GET <base>/healthz without credentials: any HTTP answer means reachable. */
export async function probeHttp(base: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<ProbeResult> {
  const shown = displayUrl(base);
  if (shown === null) return { reachable: false, detail: "invalid_url", version: null };
  const url = new URL("healthz", shown.endsWith("/") ? shown : `${shown}/`);
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
    let version: string | null = null;
    if (response.headers.get("content-type")?.includes("application/json") === true) {
      const body = (await response.json().catch(() => undefined)) as { version?: unknown } | undefined;
      version = versionOf(body?.version);
    } else {
      await response.body?.cancel();
    }
    return { reachable: true, detail: response.ok ? "ok" : `http_${response.status}`, version };
  } catch (error) {
    const timedOut = error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
    return { reachable: false, detail: timedOut ? "timeout" : "connection_failed", version: null };
  }
}

/**
 * PING (and INFO server) over a fresh connection, without AUTH: `+PONG` is ok (with the
 * version INFO gives), `-NOAUTH` is reachable with authentication required.
 */
export function probeRedis(raw: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<ProbeResult> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return Promise.resolve({ reachable: false, detail: "invalid_url", version: null });
  }
  const tls = url.protocol === "rediss:";
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = url.port === "" ? 6379 : Number(url.port);
  return new Promise((resolve) => {
    let received = "";
    let done = false;
    const socket: Socket = tls ? connectTls({ host, port, servername: host }) : connectTcp({ host, port });
    const finish = (result: ProbeResult) => {
      if (done) return;
      done = true;
      socket.destroy();
      resolve(result);
    };
    const judge = (ended: boolean) => {
      const lines = received.split("\r\n");
      const first = lines[0] ?? "";
      if (first.startsWith("+PONG")) {
        const version = /redis_version:([^\r\n]+)/.exec(received)?.[1];
        if (version !== undefined || ended) {
          finish({ reachable: true, detail: "ok", version: versionOf(version?.trim()) });
        }
        return;
      }
      if (first.startsWith("-NOAUTH") || first.startsWith("-WRONGPASS") || first.startsWith("-NOPERM")) {
        finish({ reachable: true, detail: "authentication_required", version: null });
        return;
      }
      if (first.startsWith("-") || (ended && received.length > 0)) {
        finish({ reachable: true, detail: "unexpected_reply", version: null });
      } else if (ended) finish({ reachable: false, detail: "connection_failed", version: null });
    };
    socket.setTimeout(timeoutMs, () =>
      finish(
        received.length > 0
          ? { reachable: true, detail: "unexpected_reply", version: null }
          : { reachable: false, detail: "timeout", version: null },
      ),
    );
    socket.on(tls ? "secureConnect" : "connect", () => socket.write("PING\r\nINFO server\r\n"));
    socket.on("data", (chunk: Buffer) => {
      if (received.length < 64 * 1024) received += chunk.toString("latin1");
      judge(false);
    });
    socket.on("error", () => judge(true));
    socket.on("close", () => judge(true));
  });
}

async function service(
  url: string | undefined,
  probe: (url: string) => Promise<ProbeResult>,
): Promise<ServiceFacts> {
  if (url === undefined) return { configured: false };
  const shown = displayUrl(url);
  if (shown === null)
    return { configured: true, url: "(invalid)", reachable: false, detail: "invalid_url", version: null };
  return { configured: true, url: shown, ...(await probe(url)) };
}

export async function resourceFacts(
  store: { readonly backend: string },
  health: StoreHealth,
  platform: PlatformEndpoints | undefined,
): Promise<ResourceFacts> {
  const [redis, crypto, managed] = await Promise.all([
    service(platform?.redisUrl, (url) => probeRedis(url)),
    service(platform?.cryptoUrl, (url) => probeHttp(url)),
    service(platform?.managedUrl, (url) => probeHttp(url)),
  ]);
  return {
    store: { backend: store.backend, ok: health.ok },
    redis,
    crypto_service: { ...crypto, in_use: platform?.cryptoInUse === true },
    managed_api: managed,
  };
}
