import { isAscii } from "node:buffer";

/**
 * JSON.parse of a UTF-8 body whose one large value is a top-level plain string (the authority's
 * policy answer: a 0.5 MB base64 `signed_policy` beside a few hundred bytes of facts), that
 * value set aside as its bytes. Decoding the whole body to a string and having JSON.parse scan
 * and copy that value again made two large strings per answer, each a fresh mapping of V8's
 * large-object space (decision 3131); here only the rest goes through JSON.parse, and the
 * caller decodes the value's bytes as it needs them (base64BytesDecoded).
 *
 * `{ json }` is JSON.parse's value, or JSON.parse refuses. `{ json, value }`: `json` is the
 * object JSON.parse makes, but for the top-level `key`, which is "" there and whose string is
 * exactly the characters of `value` (a view of the bytes: ASCII, nothing to decode). The value
 * is set aside only when its bytes are what the string is — the first `"key":"`, then characters
 * that need no decoding (ASCII, no backslash, no control character) up to the next quote — and
 * when the rest, parsed with two different stand-ins for the value, gives the top-level `key`
 * exactly each stand-in: only the text between those quotes differs, so that literal, and no
 * other, is the member JSON.parse keeps (a nested or repeated `key`, another spelling of it, or
 * a literal that is not a value gives something else, and the whole body is parsed).
 */
export function jsonParserSettingAside(
  key: string,
): (bytes: Uint8Array) => { readonly json: unknown; readonly value?: Buffer } {
  if (!/^[A-Za-z0-9_]+$/.test(key)) throw new TypeError("the key must be plain ASCII letters, digits or _");
  const opening = Buffer.from(`"${key}":"`);
  return (input) => {
    const bytes = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
    const whole = () => ({ json: JSON.parse(bytes.toString("utf8")) as unknown });
    const at = bytes.indexOf(opening);
    const start = at + opening.length;
    const end = at < 0 ? -1 : bytes.indexOf(QUOTE, start);
    if (end < 0 || !plainString(bytes, start, end)) return whole();
    const before = bytes.toString("utf8", 0, start);
    const after = bytes.toString("utf8", end);
    const first = parsedWith(before, "a", after, key);
    const second = first === undefined ? undefined : parsedWith(before, "b", after, key);
    if (first === undefined || second === undefined) return whole();
    first[key] = "";
    return { json: first, value: bytes.subarray(start, end) };
  };
}

/** Characters of base64 decoded a chunk at a time: each chunk's string stays out of V8's large-object space. */
const BASE64_CHUNK = 65_536;

/**
 * What `Buffer.from(chars.toString("latin1"), "base64")` gives, for characters that are strict
 * base64 (the alphabet, then at most two `=` at the end, a multiple of 4), decoded in 64 KiB
 * chunks into one buffer without the whole string being made; undefined for any other
 * characters (the caller decodes them whole, as before). Node's decoder skips a character
 * outside the alphabet and stops at `=`: for any such character the bytes decoded fall short of
 * three per four characters less the final padding, which is what tells them apart.
 */
export function base64BytesDecoded(chars: Uint8Array): Buffer | undefined {
  const text = Buffer.from(chars.buffer, chars.byteOffset, chars.byteLength);
  const length = text.length;
  if (length % 4 !== 0) return undefined;
  const padding = length === 0 ? 0 : text[length - 1] !== EQUALS ? 0 : text[length - 2] !== EQUALS ? 1 : 2;
  const expected = (length / 4) * 3 - padding;
  const out = Buffer.allocUnsafeSlow(expected);
  let written = 0;
  for (let at = 0; at < length; at += BASE64_CHUNK) {
    written += out.write(text.toString("latin1", at, Math.min(length, at + BASE64_CHUNK)), written, "base64");
  }
  return written === expected ? out : undefined;
}

const EQUALS = 0x3d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Whether bytes [start, end) are, as they stand, the characters of a JSON string (no `"` by construction). */
function plainString(bytes: Buffer, start: number, end: number): boolean {
  const value = bytes.subarray(start, end);
  return isAscii(value) && value.indexOf(BACKSLASH) < 0 && !hasControlByte(value);
}

/**
 * Whether an ASCII value holds a byte below 0x20 (JSON refuses those unescaped in a string): four
 * bytes at a time, `(w - 0x20202020) & ~w` setting a byte's top bit only where some byte of the
 * word is below 0x20 (a borrow starts only at such a byte), the bytes outside whole words one by one.
 */
function hasControlByte(value: Buffer): boolean {
  const { buffer, byteOffset: start } = value;
  const end = start + value.byteLength;
  const bytes = new Uint8Array(buffer);
  const wordsStart = (start + 3) & ~3;
  const wordsEnd = end & ~3;
  if (wordsEnd <= wordsStart) return bytes.subarray(start, end).some((byte) => byte < 0x20);
  for (let i = start; i < wordsStart; i++) if ((bytes[i] as number) < 0x20) return true;
  for (let i = wordsEnd; i < end; i++) if ((bytes[i] as number) < 0x20) return true;
  const words = new Uint32Array(buffer, wordsStart, (wordsEnd - wordsStart) >>> 2);
  let below = 0;
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as number;
    below |= (word - 0x20202020) & ~word;
  }
  return (below & 0x80808080) !== 0;
}

/** The rest parsed with `stand_in` as the value; the object when its own top-level `key` is exactly that. */
function parsedWith(
  before: string,
  standIn: string,
  after: string,
  key: string,
): Record<string, unknown> | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(`${before}${standIn}${after}`);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return undefined;
  return Object.hasOwn(parsed, key) && (parsed as Record<string, unknown>)[key] === standIn
    ? (parsed as Record<string, unknown>)
    : undefined;
}
