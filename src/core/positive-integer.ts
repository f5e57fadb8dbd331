/**
 * The one check of a positive whole-number option given to a constructor in code (cache sizes,
 * timeouts, batch sizes): the value, or its fallback when absent, must be a safe integer ≥ 1
 * (`fallback` undefined: the option is required — its default lives in a settings schema).
 * Each module reports through its own typed error, so `fail` is the caller's. User-facing
 * settings are parsed by src/config/validators.ts, which names the flag or variable instead.
 */
export function positiveIntegerOption(
  value: unknown,
  fallback: number | undefined,
  name: string,
  fail: (message: string) => never = (message) => {
    throw new TypeError(message);
  },
  max: number = Number.MAX_SAFE_INTEGER,
): number {
  const out = value ?? fallback;
  if (typeof out !== "number" || !Number.isSafeInteger(out) || out < 1 || out > max)
    fail(
      max === Number.MAX_SAFE_INTEGER
        ? `${name} must be a positive integer`
        : `${name} must be an integer from 1 to ${max}`,
    );
  return out;
}
