/** The methods an OpenAPI path item can hold; nothing else can name an operation. */
export const HTTP_METHODS = ["GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"] as const;

export type HttpMethod = (typeof HTTP_METHODS)[number];

const known: ReadonlySet<string> = new Set(HTTP_METHODS);

export function isHttpMethod(value: unknown): value is HttpMethod {
  return typeof value === "string" && known.has(value);
}

/** Case-insensitive; undefined for anything that is not one of HTTP_METHODS. */
export function normalizeMethod(value: unknown): HttpMethod | undefined {
  if (typeof value !== "string") return undefined;
  const upper = value.toUpperCase();
  return isHttpMethod(upper) ? upper : undefined;
}
