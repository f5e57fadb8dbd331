/**
 * A model of a *lenient* upstream router: what common frameworks do with the path we send.
 * It folds case and Unicode compatibility forms, drops default-ignorable code points, `;…`,
 * an NTFS stream suffix (`:…`), extension suffixes and trailing whitespace, dots or `~`, and
 * decodes once more before comparing a segment with a route's literal; literal segments beat
 * mixed ones, which beat parameters, left to right. Used by the path-rule properties
 * (test/execute/path-rematch.property.test.ts, and across the real servers in
 * test/reliability/cross-path.property.test.ts) to check that a rendered request reaches
 * exactly the template that was allowed. (8.3 short names and lenient UTF-8 decoding have
 * their own property: test/core/path-normalizations.property.test.ts.)
 */
import { matchesMixedSegment, parsePathTemplate } from "../../src/core/path-template.ts";

export function decodeOnce(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

const IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

/** `form` and what remains of it before each `.`, `:` and `;`, trailing whitespace, dots and `~` trimmed. */
function reductions(form: string): string[] {
  const out = [form];
  for (let i = 0; i <= form.length; i++) {
    if (i < form.length && !".:;".includes(form[i] ?? "")) continue;
    out.push(
      form
        .slice(0, i)
        .replace(/[\s.~]+$/u, "")
        .replace(/^\s+/u, ""),
    );
  }
  return out;
}

/** Every spelling a lenient router may compare with a literal segment, folded. */
export function lenientKeys(value: string): Set<string> {
  const keys = new Set<string>();
  for (const base of [value, decodeOnce(value)]) {
    for (const form of [base, base.normalize("NFKC"), base.normalize("NFKC").replace(IGNORABLE, "")]) {
      for (const spelling of reductions(form)) {
        keys.add(spelling.toLowerCase());
        keys.add(spelling.toUpperCase().toLowerCase());
      }
    }
  }
  return keys;
}

/** The template a lenient router picks for decoded segments: literal matches first, left to right. */
export function lenientRoute(templates: readonly string[], segments: readonly string[]): string | undefined {
  const keys = segments.map(lenientKeys);
  let best: { template: string; rank: number[] } | undefined;
  for (const template of templates) {
    const parsed = parsePathTemplate(template);
    if (parsed.segments.length !== segments.length) continue;
    const rank: number[] = [];
    let ok = true;
    parsed.segments.forEach((segment, i) => {
      const value = segments[i] ?? "";
      if (segment.kind === "literal") {
        if (value === segment.value || keys[i]?.has(segment.value.toLowerCase())) rank.push(2);
        else ok = false;
      } else if (segment.kind === "mixed") {
        const spellings = [value, ...(keys[i] ?? [])];
        if (spellings.some((spelling) => matchesMixedSegment(segment, spelling))) rank.push(1);
        else ok = false;
      } else rank.push(0);
    });
    if (!ok) continue;
    const better =
      best === undefined ||
      rank.some((r, i) => r > (best?.rank[i] ?? 0) && rank.slice(0, i).every((x, j) => x === best?.rank[j]));
    if (better) best = { template, rank };
  }
  return best?.template;
}

/** `s` with every printable ASCII character in its full-width compatibility form. */
export function fullWidth(s: string): string {
  return [...s]
    .map((c) => (c >= "!" && c <= "~" ? String.fromCodePoint((c.codePointAt(0) ?? 0) + 0xfee0) : c))
    .join("");
}
