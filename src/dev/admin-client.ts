import { isRecord } from "../core/own-property.ts";
/**
 * A minimal JSON client of the authority service's admin API, used by the dev seeding
 * (the headless-binding part goes through the public routes) and by the demo.
 */

export interface AdminResponse {
  readonly status: number;
  readonly body: unknown;
}

export class AdminRequestError extends Error {
  readonly code = "dev_admin_request_failed";
  readonly status: number;
  /** The `error` code of the answer, when it had one. */
  readonly error: string | undefined;

  constructor(method: string, path: string, status: number, error: string | undefined) {
    super(`${method} ${path} answered ${status}${error === undefined ? "" : ` (${error})`}`);
    this.name = "AdminRequestError";
    this.status = status;
    this.error = error;
  }
}

export interface AdminClient {
  /** Any answer; only a transport failure throws. */
  request(method: string, path: string, body?: unknown): Promise<AdminResponse>;
  /** The body of a 2xx answer; anything else throws AdminRequestError. */
  expect<T>(method: string, path: string, body?: unknown): Promise<T>;
}

export function createAdminClient(options: {
  readonly baseUrl: string;
  readonly token: () => Promise<string>;
}): AdminClient {
  const base = options.baseUrl.replace(/\/+$/, "");
  async function request(method: string, path: string, body?: unknown): Promise<AdminResponse> {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${await options.token()}`,
        accept: "application/json",
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await response.text();
    let parsed: unknown = null;
    if (text.length > 0) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    }
    return { status: response.status, body: parsed };
  }
  return {
    request,
    async expect<T>(method: string, path: string, body?: unknown): Promise<T> {
      const answer = await request(method, path, body);
      if (answer.status < 200 || answer.status > 299) {
        const error =
          isRecord(answer.body) && typeof answer.body.error === "string" ? answer.body.error : undefined;
        throw new AdminRequestError(method, path, answer.status, error);
      }
      return answer.body as T;
    },
  };
}

export { isRecord };
