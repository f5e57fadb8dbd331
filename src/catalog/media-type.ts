import { isRecord } from "./json-pointer.ts";

/** "application/json; charset=utf-8" → "application/json". */
export function baseMediaType(mediaType: string): string {
  return (mediaType.split(";", 1)[0] ?? "").trim().toLowerCase();
}

export function isJsonMediaType(mediaType: string): boolean {
  const base = baseMediaType(mediaType);
  if (base === "application/json") return true;
  const slash = base.indexOf("/");
  return slash > 0 && base.slice(slash + 1).endsWith("+json");
}

/** The JSON entry of a content map: application/json first, then the first `+json` type. */
export function pickJsonMedia(
  content: Record<string, unknown>,
): { key: string; value: Record<string, unknown> } | undefined {
  const keys = Object.keys(content);
  const chosen =
    keys.find((k) => baseMediaType(k) === "application/json") ?? keys.find((k) => isJsonMediaType(k));
  if (chosen === undefined) return undefined;
  const value = content[chosen];
  return { key: chosen, value: isRecord(value) ? value : {} };
}
