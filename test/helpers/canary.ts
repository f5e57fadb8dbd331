/**
 * Planted canaries and a leak watch, for the reliability and security suite.
 *
 * Every secret the suite plants (passwords, partner keys, auth-profile secrets, plaintexts
 * given to encrypt) embeds `CANARY-<16 hex>`, so one pattern finds any of them in a log
 * line, a response body or the test runner's whole output (scripts/scan-canaries.ts uses
 * the same pattern). Secrets the system generates itself (workload client secrets) and
 * every bearer token the suite sends are watched as exact strings.
 *
 *   const watch = new LeakWatch();
 *   const password = canary("pw-");              // "pw-CANARY-0123456789abcdef"
 *   watch.secret(generatedClientSecret);
 *   watch.token(bearer);                          // before sending it
 *   watch.checkResponse("POST /v1/encrypt", text);
 *   watch.checkLogs(capture.lines());
 *   assert.deepEqual(watch.findings(), []);
 */
import { randomBytes } from "node:crypto";

export const CANARY_MARKER = "CANARY-";
/** A planted canary: the marker and 16 lower-case hex digits. */
export const CANARY_PATTERN = /CANARY-[0-9a-f]{16}/g;

/** A fresh canary value, optionally after a prefix that satisfies a format (`apk_`, …). */
export function canary(prefix = ""): string {
  return `${prefix}${CANARY_MARKER}${randomBytes(8).toString("hex")}`;
}

/** Every canary in `text` (deduplicated, in order of appearance). */
export function findCanaries(text: string): string[] {
  return [...new Set(text.match(CANARY_PATTERN) ?? [])];
}

export type LeakKind = "canary" | "secret" | "token" | "stack_trace" | "internal_path";

export interface LeakFinding {
  /** Where it was seen: "log" or the request that got the response. */
  readonly where: string;
  readonly kind: LeakKind;
  /** The first characters of the leaked value only, so the report does not leak it again. */
  readonly hint: string;
}

/** Lines of a V8 stack (`    at fn (/path/file.ts:12:3)`), or an Error's `stack` property. */
const STACK_TRACE = /\n\s+at [^\n]*(?:\(|\s)[^\s()]+:\d+:\d+\)?|"stack"\s*:/;
/** Paths that reveal the deployment: the work tree, dependencies, source files. */
const INTERNAL_PATH = /\/work\/|node_modules|file:\/\/|\/src\/[a-z/-]+\.ts\b/;

export interface ResponseCheckOptions {
  /**
   * The response may carry planted canaries and watched secrets (e.g. a decrypt of the
   * caller's own ciphertext returns its plaintext; a client-creation answer shows its secret).
   * Tokens, stack traces and internal paths are still refused.
   */
  readonly expectsSecrets?: boolean;
}

function hint(value: string): string {
  return `${value.slice(0, 6)}…(${value.length} chars)`;
}

export class LeakWatch {
  readonly #secrets = new Set<string>();
  readonly #tokens = new Set<string>();
  readonly #findings: LeakFinding[] = [];
  #responses = 0;
  #logLines = 0;

  /** A generated secret that must never appear in a log line or a later response. */
  secret(value: string): void {
    if (value.length >= 8) this.#secrets.add(value);
  }

  /** A bearer token (or user assertion) the suite sends: never in a log line or a response. */
  token(value: string): void {
    if (value.length >= 16) this.#tokens.add(value);
  }

  get counts(): { responses: number; logLines: number; secrets: number; tokens: number } {
    return {
      responses: this.#responses,
      logLines: this.#logLines,
      secrets: this.#secrets.size,
      tokens: this.#tokens.size,
    };
  }

  #scan(where: string, text: string, options: { secrets: boolean; internals: boolean }): void {
    if (options.secrets) {
      for (const found of findCanaries(text))
        this.#findings.push({ where, kind: "canary", hint: hint(found) });
      for (const secret of this.#secrets) {
        if (text.includes(secret)) this.#findings.push({ where, kind: "secret", hint: hint(secret) });
      }
    }
    for (const token of this.#tokens) {
      if (text.includes(token)) this.#findings.push({ where, kind: "token", hint: hint(token) });
    }
    if (options.internals) {
      if (STACK_TRACE.test(text)) this.#findings.push({ where, kind: "stack_trace", hint: "" });
      const path = INTERNAL_PATH.exec(text);
      if (path !== null) this.#findings.push({ where, kind: "internal_path", hint: path[0] });
    }
  }

  /** Scans one response body (and header text, when given) this suite received. */
  checkResponse(where: string, text: string, options: ResponseCheckOptions = {}): void {
    this.#responses++;
    this.#scan(where, text, { secrets: options.expectsSecrets !== true, internals: true });
  }

  /**
   * Scans log lines. Logs may hold stacks and paths (operators read them); never a canary,
   * a watched secret or a token.
   */
  checkLogs(lines: readonly string[]): void {
    for (const line of lines) {
      this.#logLines++;
      this.#scan("log", line, { secrets: true, internals: false });
    }
  }

  findings(): readonly LeakFinding[] {
    return this.#findings;
  }
}
