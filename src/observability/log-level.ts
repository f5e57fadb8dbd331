import { ConfigError } from "../core/config-error.ts";

/** The levels a logger takes; the `log-level` setting (src/config/validators.ts) accepts these. */
export const logLevels = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export type LogLevel = (typeof logLevels)[number];

/**
 * The log level of loggers created without one (library defaults, benches): AUTHORITY_LOG_LEVEL,
 * validated like the `log-level` setting, else `info`. Processes pass their resolved level.
 */
export function environmentLogLevel(
  env: Readonly<Record<string, string | undefined>> = process.env,
): LogLevel {
  const value = env.AUTHORITY_LOG_LEVEL;
  if (value === undefined || value === "") return "info";
  const level = value.trim();
  if (!(logLevels as readonly string[]).includes(level)) {
    throw new ConfigError(`AUTHORITY_LOG_LEVEL must be one of ${logLevels.join(", ")}`);
  }
  return level as LogLevel;
}
