/**
 * Encodings an upstream may wrap an echoed credential in, as clients decode them (issue 26):
 * the encoders the hostile upstream and the scrubber tests use, and `clientReadings`, a naive
 * oracle of what a client could read out of an answer — deliberately independent of the
 * scrubber's own decoders (src/execute/decoded-views.ts).
 */

/** MIME base64 (RFC 2045): lines of `width` characters, each ending in CRLF. */
export function mimeBase64(bytes: Buffer, width = 76): string {
  const encoded = bytes.toString("base64");
  const lines: string[] = [];
  for (let i = 0; i < encoded.length; i += width) lines.push(encoded.slice(i, i + width));
  return lines.join("\r\n");
}

/** Inserts `gap` after every `every` characters. */
export function spaced(text: string, every: number, gap: string): string {
  let out = "";
  for (let i = 0; i < text.length; i += every) out += text.slice(i, i + every) + gap;
  return out;
}

/** Hex digits in alternating case, so a case-sensitive match on either case misses. */
export function mixedHex(byte: number, i: number): string {
  const hex = byte.toString(16).padStart(2, "0");
  return i % 2 === 0 ? hex.toUpperCase() : hex;
}

export function percentAll(text: string): string {
  return Array.from(Buffer.from(text, "utf8"), (byte, i) => `%${mixedHex(byte, i)}`).join("");
}

export function htmlDecimal(text: string): string {
  return Array.from(text, (c) => `&#${c.codePointAt(0)};`).join("");
}

export function htmlHex(text: string): string {
  return Array.from(
    text,
    (c, i) => `&#${i % 2 === 0 ? "x" : "X"}${mixedHex(c.codePointAt(0) ?? 0, i)};`,
  ).join("");
}

/** HTML5 named references where one exists (punctuation), a hex reference otherwise. */
export const NAMED: Readonly<Record<string, string>> = {
  ":": "&colon;",
  "=": "&equals;",
  "/": "&sol;",
  ".": "&period;",
  "\n": "&NewLine;",
  _: "&lowbar;",
  "+": "&plus;",
  ",": "&comma;",
  "?": "&quest;",
  "%": "&percnt;",
  "&": "&amp;",
};
export function htmlNamed(text: string): string {
  return Array.from(text, (c) => NAMED[c] ?? htmlHex(c)).join("");
}

/** JavaScript string escapes: `\uXXXX` and `\xHH` in turn, in mixed case. */
export function jsEscaped(text: string): string {
  return Array.from(text, (c, i) => {
    const code = c.codePointAt(0) ?? 0;
    if (i % 2 === 1 && code < 0x100) return `\\x${mixedHex(code, i)}`;
    return `\\u${code.toString(16).padStart(4, "0").toUpperCase()}`;
  }).join("");
}

/** Quoted-printable (RFC 2045): every byte as `=XX`, soft line breaks every 24 bytes. */
export function quotedPrintable(text: string): string {
  return Array.from(
    Buffer.from(text, "utf8"),
    (byte, i) => `=${byte.toString(16).padStart(2, "0").toUpperCase()}${i % 24 === 23 ? "=\r\n" : ""}`,
  ).join("");
}

/**
 * What a client could read out of `text` by decoding it: the text, and every reading one or
 * two decodings give (JavaScript/JSON escapes, HTML references, percent-encoding,
 * quoted-printable, hex runs, base64/base64url runs with any whitespace at every alignment).
 * A naive oracle for the tests, independent of the scrubber's own decoders.
 */
export function clientReadings(text: string): string[] {
  const named: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };
  for (const [char, ref] of Object.entries(NAMED)) named[ref.slice(1, -1)] = char;
  const decoders: Array<(t: string) => string[]> = [
    (t) => [
      t.replace(/\\u\{([0-9a-f]+)\}|\\u([0-9a-f]{4})|\\x([0-9a-f]{2})|\\([^ux])/gi, (_m, cp, u, x, c) => {
        if (c !== undefined) return ({ n: "\n", r: "\r", t: "\t" } as Record<string, string>)[c] ?? c;
        return String.fromCodePoint(Number.parseInt(cp ?? u ?? x, 16));
      }),
    ],
    (t) => [
      t.replace(
        /&#(x[0-9a-f]+|\d+);?|&([a-z]+);/gi,
        (m, num: string | undefined, name: string | undefined) => {
          if (name !== undefined) return named[name] ?? m;
          const n = num?.[0]?.toLowerCase() === "x" ? Number.parseInt(num.slice(1), 16) : Number(num);
          return String.fromCodePoint(n);
        },
      ),
    ],
    (t) => [
      t.replace(/%([0-9a-f]{2})/gi, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16))),
    ],
    (t) => [
      t
        .replace(/=\r?\n/g, "")
        .replace(/=([0-9A-F]{2})/gi, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16))),
    ],
    (t) =>
      (t.match(/[0-9a-f]{16,}/gi) ?? []).flatMap((run) =>
        [0, 1].map((at) => Buffer.from(run.slice(at), "hex").toString("latin1")),
      ),
    (t) =>
      (t.match(/[A-Za-z0-9+/_\-\s]{12,}/g) ?? []).flatMap((run) => {
        const compact = run.replace(/\s+/g, "").replaceAll("-", "+").replaceAll("_", "/");
        return [0, 1, 2, 3].map((at) => Buffer.from(compact.slice(at), "base64").toString("latin1"));
      }),
  ];
  const once = (t: string) => decoders.flatMap((decode) => decode(t));
  const first = once(text);
  return [text, ...first, ...first.flatMap(once)];
}
