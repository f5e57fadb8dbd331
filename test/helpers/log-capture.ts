/**
 * Collects every log line of the servers a test starts, written through the project's own
 * logger settings (level, redaction), so leak checks read exactly what production would
 * write.
 *
 *   const logs = createLogCapture();
 *   createIdpServer({ logger: logs.logger("idp") });
 *   logs.lines()   // the JSON lines written so far
 */
import { pino } from "pino";
import { type Logger, loggerOptions } from "../../src/observability/logger.ts";

export interface LogCapture {
  /** A logger named `name` writing into this capture. */
  logger(name: string): Logger;
  lines(): readonly string[];
  /** Lines at level `error` (50) or above. */
  errors(): readonly string[];
}

/** Default level "debug": more lines to scan than production's "info" would write. */
export function createLogCapture(level = "debug"): LogCapture {
  const lines: string[] = [];
  const destination = {
    write(line: string): void {
      lines.push(line);
    },
  };
  const root = pino({ ...loggerOptions(level), name: "test" }, destination);
  return {
    logger: (name) => root.child({ name }),
    lines: () => lines,
    errors: () =>
      lines.filter((line) => {
        try {
          const level = (JSON.parse(line) as { level?: unknown }).level;
          return typeof level === "number" && level >= 50;
        } catch {
          return false;
        }
      }),
  };
}
