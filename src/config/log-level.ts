import { type LogLevel, logLevel } from "./validators.ts";

/**
 * The log level of loggers created without one (library defaults, benches): AUTHORITY_LOG_LEVEL,
 * validated like the `log-level` setting, else `info`. Processes pass their resolved level.
 */
export function environmentLogLevel(
  env: Readonly<Record<string, string | undefined>> = process.env,
): LogLevel {
  const value = env.AUTHORITY_LOG_LEVEL;
  return value === undefined || value === "" ? "info" : logLevel(value, "AUTHORITY_LOG_LEVEL");
}
