import { readFile } from "node:fs/promises";
import type { JsonFetch } from "../../core/json-fetch.ts";
import { requestToken } from "../../identity/token-client.ts";
import { SidecarConfigError } from "./errors.ts";

/**
 * The sidecar's own bearer token for the authority service (a principal with role
 * `sidecar` or scope `authority/sidecar`). Either a file that an orchestrator keeps fresh
 * (re-read every `reloadMs`, like a projected service-account token), or the client
 * credentials grant against the identity provider (renewed before it expires).
 */
export interface ServiceTokenSource {
  token(): Promise<string>;
  /** The authority answered 401: drop the cached token so the next call gets a new one. */
  invalidate(): void;
}

const TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

export function fileTokenSource(path: string, reloadMs = 60_000): ServiceTokenSource {
  if (typeof path !== "string" || path.length === 0)
    throw new SidecarConfigError("token file path is required");
  let cached: { value: string; until: number } | undefined;
  return {
    async token() {
      if (cached !== undefined && Date.now() < cached.until) return cached.value;
      const value = (await readFile(path, "utf8")).trim();
      if (!TOKEN.test(value)) throw new SidecarConfigError("the token file does not hold a bearer token");
      cached = { value, until: Date.now() + reloadMs };
      return value;
    },
    invalidate() {
      cached = undefined;
    },
  };
}

export interface ClientCredentialsSourceOptions {
  readonly tokenUrl: string;
  readonly clientId: string;
  readonly clientSecret: string;
  readonly scope?: string;
  readonly audience?: string;
  readonly timeoutMs?: number;
  /** Sends the token request (the sidecar's node:http transport); default the global fetch. */
  readonly fetch?: JsonFetch;
}

export function clientCredentialsTokenSource(options: ClientCredentialsSourceOptions): ServiceTokenSource {
  for (const name of ["tokenUrl", "clientId", "clientSecret"] as const) {
    if (typeof options[name] !== "string" || options[name].length === 0) {
      throw new SidecarConfigError(`${name} is required for the client credentials grant`);
    }
  }
  let cached: { value: string; renewAt: number } | undefined;
  let pending: Promise<string> | undefined;
  const fetchToken = async (): Promise<string> => {
    const response = await requestToken({
      tokenUrl: options.tokenUrl,
      grant: { type: "client_credentials", clientId: options.clientId, clientSecret: options.clientSecret },
      ...(options.scope === undefined ? {} : { scope: options.scope }),
      ...(options.audience === undefined ? {} : { audience: options.audience }),
      timeoutMs: options.timeoutMs ?? 5000,
      ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    });
    const lifetimeMs = (response.expiresIn ?? 60) * 1000;
    // Renew at 80 % of the lifetime, so a token in use never expires on the way.
    cached = { value: response.accessToken, renewAt: Date.now() + lifetimeMs * 0.8 };
    return response.accessToken;
  };
  return {
    token() {
      if (cached !== undefined && Date.now() < cached.renewAt) return Promise.resolve(cached.value);
      pending ??= fetchToken().finally(() => {
        pending = undefined;
      });
      return pending;
    },
    invalidate() {
      cached = undefined;
    },
  };
}

/** A fixed token (tests, benchmarks). */
export function staticTokenSource(value: string): ServiceTokenSource {
  if (!TOKEN.test(value)) throw new SidecarConfigError("not a bearer token");
  return { token: async () => value, invalidate: () => undefined };
}
