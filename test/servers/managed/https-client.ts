/**
 * Minimal HTTPS client for the managed API tests: trusts only the test certificate, opens
 * a fresh connection per request (nothing lingers after a test), and records every
 * response body so a test can check that none of them leaks a credential.
 */

import { request } from "node:https";

export interface Answer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly text: string;
  readonly json: Record<string, unknown>;
}

export const recordedBodies: string[] = [];

export function post(
  url: string,
  options: {
    ca: string;
    /** A header given as undefined is left out (e.g. no Content-Type at all). */
    headers?: Readonly<Record<string, string | undefined>>;
    body?: unknown;
    rawBody?: string;
  },
): Promise<Answer> {
  const payload = options.rawBody ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
  const headers = Object.fromEntries(
    Object.entries({
      ...(payload === undefined ? {} : { "content-type": "application/json" }),
      ...options.headers,
    }).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: "POST",
        ca: options.ca,
        agent: false,
        headers,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          recordedBodies.push(text);
          let json: Record<string, unknown> = {};
          try {
            json = JSON.parse(text) as Record<string, unknown>;
          } catch {
            // Not JSON: the test asserting on it will say so.
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}
