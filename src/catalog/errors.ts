import type { TableMapped } from "../errors.ts";
import { importLimits } from "./limits.ts";

/** One thing wrong with a submitted document: where (RFC 6901 pointer into it) and what. */
export interface ImportProblem {
  readonly pointer: string;
  readonly message: string;
}

const PUBLIC_MESSAGE = "The OpenAPI document is invalid.";

/**
 * A document that cannot become a catalog. Carries every problem found (not only the
 * first) so an admin can fix them in one round; messages hold no stack traces and no
 * file-system paths, so the whole error is safe to return as a 400 body.
 */
export class OpenApiImportError extends Error implements TableMapped {
  readonly code = "invalid_openapi";
  readonly status = 400;
  readonly problems: readonly ImportProblem[];

  constructor(problems: readonly ImportProblem[]) {
    super(`${PUBLIC_MESSAGE} ${problems.length} problem(s).`);
    this.name = "OpenApiImportError";
    this.problems = Object.freeze(problems.map((p) => Object.freeze({ ...p })));
  }

  toJSON(): { error: "invalid_openapi"; message: string; details: { problems: readonly ImportProblem[] } } {
    return { error: this.code, message: PUBLIC_MESSAGE, details: { problems: this.problems } };
  }

  /** The same failure in the shared error table (400 invalid_request), problems kept as details. */
  readonly authorityCode = "invalid_request";
  readonly publicMessage = PUBLIC_MESSAGE;
  get authorityDetails(): Readonly<Record<string, unknown>> {
    return { reason: this.code, problems: this.problems };
  }
}

/** Options given by the calling code (not the document) are wrong: a programming error. */
export class ImportOptionsError extends Error {
  readonly code = "invalid_import_options";

  constructor(message: string) {
    super(message);
    this.name = "ImportOptionsError";
  }
}

// Document pointers ("/paths/~1users/get") must survive, so only file URLs and paths under
// the usual file-system roots are blanked.
const LOCAL_PATH =
  /file:\/\/\S*|(?<![\w}~])\/(?:home|root|tmp|usr|var|opt|srv|etc|mnt|work|Users|private|proc|dev)\/\S*|\b[A-Za-z]:\\\S*/g;

/**
 * Third-party messages can carry a code frame or a resolved file path: keep the first
 * line only and blank out anything that looks like a path on this machine.
 */
export function sanitizeMessage(message: string): string {
  const firstLine = message.split("\n", 1)[0] ?? "";
  const cleaned = firstLine.replace(LOCAL_PATH, "<path>").trim();
  return cleaned.length > 500 ? `${cleaned.slice(0, 497)}...` : cleaned || "invalid document";
}

/** Collects problems up to the limit and counts the rest. */
export class ProblemList {
  readonly #items: ImportProblem[] = [];
  #dropped = 0;

  add(pointer: string, message: string): void {
    if (this.#items.some((p) => p.pointer === pointer && p.message === message)) return;
    if (this.#items.length >= importLimits.maxProblems) {
      this.#dropped++;
      return;
    }
    this.#items.push({ pointer, message });
  }

  get size(): number {
    return this.#items.length + this.#dropped;
  }

  toArray(): ImportProblem[] {
    if (this.#dropped === 0) return [...this.#items];
    return [...this.#items, { pointer: "", message: `... and ${this.#dropped} more problem(s)` }];
  }

  throwIfAny(): void {
    if (this.size > 0) throw new OpenApiImportError(this.toArray());
  }
}

/** Collects warnings (deduplicated) up to the limit. */
export class WarningList {
  readonly #items: string[] = [];
  readonly #seen = new Set<string>();
  #dropped = 0;

  add(message: string): void {
    if (this.#seen.has(message)) return;
    this.#seen.add(message);
    if (this.#items.length >= importLimits.maxWarnings) {
      this.#dropped++;
      return;
    }
    this.#items.push(message);
  }

  toArray(): string[] {
    if (this.#dropped === 0) return [...this.#items];
    return [...this.#items, `... and ${this.#dropped} more warning(s)`];
  }
}
