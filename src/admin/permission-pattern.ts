/**
 * Permission-id patterns of permission boundaries: `*` matches any run of characters
 * (including none, ":" and "/"); every other character matches itself. Matching is
 * linear-time greedy wildcard matching, so a pattern with many stars cannot make a
 * boundary check slow (a regular expression could backtrack exponentially).
 */
export function permissionPatternMatches(pattern: string, id: string): boolean {
  let p = 0;
  let s = 0;
  let star = -1;
  let resume = 0;
  while (s < id.length) {
    if (p < pattern.length && pattern[p] !== "*" && pattern[p] === id[s]) {
      p++;
      s++;
    } else if (p < pattern.length && pattern[p] === "*") {
      star = p++;
      resume = s;
    } else if (star !== -1) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === "*") p++;
  return p === pattern.length;
}

export const MAX_PATTERN_LENGTH = 2048;

/** A pattern is printable text of bounded length; "" would match nothing and is refused. */
export function isValidPermissionPattern(pattern: unknown): pattern is string {
  return (
    typeof pattern === "string" &&
    pattern.length > 0 &&
    pattern.length <= MAX_PATTERN_LENGTH &&
    /^[\x21-\x7e]+$/.test(pattern)
  );
}
