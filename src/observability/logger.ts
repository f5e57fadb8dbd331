import { type Logger, type LoggerOptions, pino } from "pino";
import { environmentLogLevel } from "./log-level.ts";

/**
 * Structured JSON logs. Paths that could carry a credential are censored at the logger,
 * so a careless `log.info({ headers })` still never writes a token or a key.
 */
export const redactedLogPaths = [
  "*.authorization",
  "*.Authorization",
  "*.password",
  "*.secret_key",
  "*.access_key",
  "*.api_key",
  "*.client_secret",
  "*.token",
  "*.access_token",
  "*.refresh_token",
  '*["x-authority-user-assertion"]',
  "req.headers.authorization",
  "req.headers.cookie",
  "req.headers.password",
  "req.headers.secret_key",
  "req.headers.access_key",
  "req.headers.api_key",
  'req.headers["x-authority-user-assertion"]',
];

export function loggerOptions(level: string = environmentLogLevel()): LoggerOptions {
  return { level, redact: { paths: redactedLogPaths, censor: "[redacted]" }, base: undefined };
}

export function createLogger(name: string, level?: string): Logger {
  return pino({ ...loggerOptions(level), name });
}

export type { Logger };
