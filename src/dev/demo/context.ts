/**
 * What every demo section works with: the running environment, the reporter, tokens from
 * the identity provider (over its real token endpoint, as a client would get them) and a
 * JSON-over-HTTP helper.
 */
import type { ClientRequest } from "node:http";
import { isRecord } from "../../core/own-property.ts";
import { requestToken } from "../../identity/token-client.ts";
import type { DevEnvironment } from "../environment.ts";
import { DEV_IDP, DEV_SUBJECTS, type DevSubjectRole } from "../names.ts";
import type { DemoReporter } from "./reporter.ts";

export interface HttpAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: unknown;
}

export interface DemoContext {
  readonly env: DevEnvironment;
  readonly report: DemoReporter;
  /** A client-credentials token of a seeded agent subject. */
  subjectToken(role: DevSubjectRole): Promise<string>;
  /** The admin's token (password grant of the admin service account). */
  adminToken(): Promise<string>;
  /** Any JSON request; only a transport failure throws. */
  json(
    method: string,
    url: string,
    options?: { headers?: Record<string, string>; body?: unknown },
  ): Promise<HttpAnswer>;
}

/** A field of a JSON object answer, as text ("-" when absent). */
export function field(body: unknown, name: string): string {
  return isRecord(body) && body[name] !== undefined ? String(body[name]) : "-";
}

async function json(
  method: string,
  url: string,
  options: { headers?: Record<string, string>; body?: unknown } = {},
): Promise<HttpAnswer> {
  const response = await fetch(url, {
    method,
    headers: {
      accept: "application/json",
      ...(options.body === undefined ? {} : { "content-type": "application/json" }),
      ...options.headers,
    },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = text.length === 0 ? null : JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, headers: response.headers, body };
}

/** JSON text as a value, other text as it is. */
function parsedBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * Sends a node:http(s) request (with `payload` as its body) and reads the whole answer: the
 * status and the body, parsed when it is JSON. The request's own `timeout` option ends it.
 */
export function answerOf(req: ClientRequest, payload?: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body: parsedBody(Buffer.concat(chunks).toString("utf8")) }),
      );
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
    req.end(payload);
  });
}

export function createDemoContext(env: DevEnvironment, report: DemoReporter): DemoContext {
  // Demo tool: a handful of keys for one run; no bound or TTL needed, so no lru-cache.
  const tokens = new Map<string, Promise<string>>();
  const cached = (key: string, get: () => Promise<string>): Promise<string> => {
    let pending = tokens.get(key);
    if (pending === undefined) {
      pending = get();
      tokens.set(key, pending);
      pending.catch(() => tokens.delete(key));
    }
    return pending;
  };
  const tokenUrl = env.urls.tokenEndpoint;
  return {
    env,
    report,
    subjectToken: (role) =>
      cached(`subject:${role}`, async () => {
        const clientId = DEV_SUBJECTS[role].subjectId;
        const token = await requestToken({
          tokenUrl,
          grant: {
            type: "client_credentials",
            clientId,
            clientSecret: env.secrets.subjectClientSecrets[role],
          },
        });
        return token.accessToken;
      }),
    adminToken: () =>
      cached("admin", async () => {
        const token = await requestToken({
          tokenUrl,
          grant: { type: "password", username: DEV_IDP.adminUsername, password: env.secrets.adminPassword },
        });
        return token.accessToken;
      }),
    json,
  };
}

export { isRecord };
