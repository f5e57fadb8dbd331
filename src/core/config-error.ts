/** A setting is missing, malformed or inconsistent; found once, at start. Never holds a secret value. */
export class ConfigError extends Error {
  readonly code = "config_invalid";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ConfigError";
  }
}
