/**
 * What scrubbing injected secrets and fail-closed decoding add per proxied response: the
 * forward proxy's buffered path for a typical 2 KiB JSON body and six response headers,
 * without (parse + redact + serialize, as before) and with the scrubber and the strict
 * decoder (the whole scrub → redact stage, scrub-redact.ts: every decoded view searched, every
 * string checked for embedded members), for an API-key profile and for a Basic credential
 * (the most patterns: the value, the credential, user:pass and the password). Also a 2 KiB
 * binary body's byte scan (NUL bytes: UTF-16 readings too), and a JSON body with `\/`
 * escapes (the decoded view is checked before any re-scan). CPU time, median of batches.
 *
 *   node bench/response-scrub.ts
 */
import { randomBytes } from "node:crypto";
import { redactResponseBody, sanitizeResponseHeaders } from "../src/core/redaction.ts";
import { scrubAndRedact } from "../src/execute/scrub-redact.ts";
import { createSecretScrubber, injectedSecrets, type SecretScrubber } from "../src/execute/secret-scrub.ts";

export interface ScrubBenchRow {
  readonly name: string;
  readonly usPerResponse: number;
  readonly addedUs?: number;
}

const HEADERS = {
  "content-type": "application/json",
  "content-length": "2048",
  date: new Date().toUTCString(),
  etag: '"abc123def456"',
  "cache-control": "no-cache",
  "x-request-id": "req_0123456789abcdef",
};

/** An order list of about 2 KiB, as an API would answer it. */
/** `escapes`: with `\/` in URLs, as PHP's json_encode writes them (strings re-scanned). */
function body2k(escapes: boolean): Buffer {
  const items = [];
  for (let i = 0; items.length === 0 || JSON.stringify(items).length < 1900; i++) {
    items.push({
      id: `order-${i}`,
      customer: { name: 'Ada "Q" Lovelace', email: "ada@example.com" },
      card_number: "4111111111111111",
      total: 42.5 + i,
      status: "shipped",
    });
  }
  const text = JSON.stringify({ items, next: escapes ? "https://api.example.com/orders?page=2" : null });
  return Buffer.from(escapes ? text.replaceAll("/", "\\/") : text);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

function cpuUs(fn: () => unknown, n: number): number {
  const started = process.cpuUsage();
  for (let i = 0; i < n; i++) fn();
  const used = process.cpuUsage(started);
  return (used.user + used.system) / n;
}

/**
 * CPU µs per call of each function (user + system of this process, so a loaded machine's
 * waiting is not counted): batches interleaved so drift hits all alike; medians.
 */
function compare(fns: ReadonlyArray<() => unknown>, n = 3000, batches = 7): number[] {
  for (const fn of fns) cpuUs(fn, n);
  const results: number[][] = fns.map(() => []);
  for (let b = 0; b < batches; b++) {
    for (const [i, fn] of fns.entries()) results[i]?.push(cpuUs(fn, n));
  }
  return results.map(median);
}

const RULES = [{ path: "/items/*/card_number", mode: "mask", keep_last: 4 }] as const;

function before(bytes: Buffer): string {
  sanitizeResponseHeaders(HEADERS);
  const parsed = JSON.parse(bytes.toString("utf8"));
  return JSON.stringify(redactResponseBody(parsed, RULES).body);
}

function after(bytes: Buffer, scrubber: SecretScrubber): string {
  const sanitized = sanitizeResponseHeaders(HEADERS);
  for (const [name, value] of Object.entries(sanitized.headers)) scrubber.headerHoldsSecret(name, value);
  const read = scrubAndRedact(bytes, HEADERS["content-type"], RULES, scrubber);
  if (read.kind !== "json") throw new Error("expected JSON");
  return JSON.stringify(read.value);
}

export function benchResponseScrub(): ScrubBenchRow[] {
  const apiKey = createSecretScrubber(
    injectedSecrets({ headers: { "x-api-key": `key-${randomBytes(16).toString("hex")}` }, query: {} }),
  );
  const basicHeader = `Basic ${Buffer.from(`svc-user:${randomBytes(12).toString("base64url")}`).toString("base64")}`;
  const basic = createSecretScrubber(injectedSecrets({ headers: { authorization: basicHeader }, query: {} }));
  const plain = body2k(false);
  const escaped = body2k(true);
  const binary = randomBytes(2048);
  const round = (us: number) => Math.round(us * 10) / 10;
  const [base = 0, withKey = 0, withBasic = 0] = compare([
    () => before(plain),
    () => after(plain, apiKey),
    () => after(plain, basic),
  ]);
  const [escapedBase = 0, escapedBasic = 0] = compare([() => before(escaped), () => after(escaped, basic)]);
  const [headers = 0, bytesKey = 0, bytesBasic = 0, binaryBasic = 0] = compare([
    () => {
      for (const [name, value] of Object.entries(HEADERS)) basic.headerHoldsSecret(name, value);
    },
    () => apiKey.scrubBytes(plain),
    () => basic.scrubBytes(plain),
    () => basic.scrubBytes(binary),
  ]);
  const [build = 0] = compare(
    [() => createSecretScrubber(injectedSecrets({ headers: { authorization: basicHeader }, query: {} }))],
    200,
    5,
  );
  return [
    { name: `2 KiB JSON (${plain.length} B): redaction only, as before`, usPerResponse: round(base) },
    {
      name: "… + header check + body scrub + strict decode, API-key profile",
      usPerResponse: round(withKey),
      addedUs: round(withKey - base),
    },
    {
      name: "… + header check + body scrub + strict decode, Basic credential",
      usPerResponse: round(withBasic),
      addedUs: round(withBasic - base),
    },
    {
      name: "2 KiB JSON with \\/ escapes (decoded view checked), Basic credential",
      usPerResponse: round(escapedBasic),
      addedUs: round(escapedBasic - escapedBase),
    },
    { name: "component: 6 response headers checked, Basic credential", usPerResponse: round(headers) },
    { name: "component: 2 KiB JSON byte scan, API-key profile", usPerResponse: round(bytesKey) },
    { name: "component: 2 KiB JSON byte scan, Basic credential", usPerResponse: round(bytesBasic) },
    {
      name: "component: 2 KiB binary byte scan (NUL bytes: UTF-16 readings too), Basic",
      usPerResponse: round(binaryBasic),
    },
    {
      name: "building a Basic credential's scrubber (once per cached credentials)",
      usPerResponse: round(build),
    },
  ];
}

if (import.meta.main) console.table(benchResponseScrub());
