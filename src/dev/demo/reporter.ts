/**
 * How `authority demo` tells its story: numbered sections, one line per check with what was
 * expected and what happened, and a summary. The demo checks itself — a check whose outcome
 * differs from the expected one is a failure and makes the command exit non-zero.
 */

export interface CheckInput {
  /** What was done, e.g. "agent-demo  GET /customers". */
  readonly label: string;
  /** The outcome the demo expects, e.g. "allowed". */
  readonly expected: string;
  /** The outcome observed. */
  readonly actual: string;
  /** Default: actual === expected. */
  readonly ok?: boolean;
  /** A second line of detail (a redacted body, a permission id …). */
  readonly detail?: string;
}

export interface DemoSummary {
  readonly passed: number;
  readonly failed: number;
  readonly skipped: number;
  /** Labels of the failed checks. */
  readonly failures: readonly string[];
}

export interface DemoReporter {
  section(title: string, intro?: string): void;
  /** Records and prints one check; returns whether it passed. */
  check(input: CheckInput): boolean;
  /** Explanatory text under the current section. */
  note(text: string): void;
  /** A section whose component is not in the tree (yet). */
  skip(component: string): void;
  /** A step that threw instead of producing an outcome: a failure. */
  error(label: string, error: unknown): void;
  summary(): DemoSummary;
}

export interface ReporterOptions {
  readonly write: (line: string) => void;
  /** ANSI colours (default false). */
  readonly color?: boolean;
}

const LABEL_WIDTH = 58;

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" ? `${error.message} (${code})` : error.message;
  }
  return String(error);
}

export function createReporter(options: ReporterOptions): DemoReporter {
  const paint = (code: string, text: string): string =>
    options.color === true ? `\u001b[${code}m${text}\u001b[0m` : text;
  const green = (text: string) => paint("32", text);
  const red = (text: string) => paint("31", text);
  const yellow = (text: string) => paint("33", text);
  const dim = (text: string) => paint("2", text);
  const bold = (text: string) => paint("1", text);
  let sections = 0;
  let passed = 0;
  let skipped = 0;
  const failures: string[] = [];

  return {
    section(title, intro) {
      sections += 1;
      options.write("");
      options.write(bold(`${sections}. ${title}`));
      if (intro !== undefined) for (const line of intro.split("\n")) options.write(dim(`   ${line}`));
    },
    check(input) {
      const ok = input.ok ?? input.actual === input.expected;
      const label = input.label.length >= LABEL_WIDTH ? `${input.label} ` : input.label.padEnd(LABEL_WIDTH);
      if (ok) {
        passed += 1;
        options.write(`   ${green("✓")} ${label}→ ${input.actual}`);
      } else {
        failures.push(input.label);
        options.write(`   ${red("✗")} ${label}→ ${red(input.actual)} ${dim(`(expected ${input.expected})`)}`);
      }
      if (input.detail !== undefined)
        for (const line of input.detail.split("\n")) options.write(dim(`       ${line}`));
      return ok;
    },
    note(text) {
      for (const line of text.split("\n")) options.write(dim(`   ${line}`));
    },
    skip(component) {
      skipped += 1;
      options.write(`   ${yellow("–")} skipped: ${component} not built`);
    },
    error(label, error) {
      failures.push(label);
      options.write(`   ${red("✗")} ${label.padEnd(LABEL_WIDTH)}→ ${red(`failed: ${describe(error)}`)}`);
    },
    summary() {
      return { passed, failed: failures.length, skipped, failures: [...failures] };
    },
  };
}
