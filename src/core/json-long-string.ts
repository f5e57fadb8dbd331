import { isAscii } from "node:buffer";

/**
 * JSON.parse of a UTF-8 body whose one large value is a top-level plain string (the authority's
 * policy answer: a 0.5 MB base64 `signed_policy` beside a few hundred bytes of facts). Decoding
 * the whole body to a string and having JSON.parse scan and copy that value again made two
 * large strings per answer, each a fresh mapping of V8's large-object space (decision 3131);
 * here the value is decoded once, straight from its bytes, and only the rest goes through
 * JSON.parse.
 *
 * The result is JSON.parse's, or JSON.parse decides: the shortcut is taken only when the value's
 * bytes are what the string is — the first `"key":"`, then characters that need no decoding
 * (ASCII, no backslash, no control character) up to the next quote — and when the rest, parsed
 * with two different stand-ins for the value, gives the top-level `key` exactly each stand-in:
 * only the text between those quotes differs, so that literal, and no other, is the member
 * JSON.parse keeps (a nested or repeated `key`, another spelling of it, or a literal that is
 * not a value gives something else, and the whole body is parsed).
 * Anything else is parsed whole, as JSON.parse parses it, and refused where it refuses.
 */
export function jsonParserTakingString(key: string): (bytes: Uint8Array) => unknown {
  if (!/^[A-Za-z0-9_]+$/.test(key)) throw new TypeError("the key must be plain ASCII letters, digits or _");
  const opening = Buffer.from(`"${key}":"`);
  return (input) => {
    const bytes = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
    const at = bytes.indexOf(opening);
    const start = at + opening.length;
    const end = at < 0 ? -1 : bytes.indexOf(QUOTE, start);
    if (end < 0 || !plainString(bytes, start, end)) return JSON.parse(bytes.toString("utf8"));
    const before = bytes.toString("utf8", 0, start);
    const after = bytes.toString("utf8", end);
    const first = parsedWith(before, "a", after, key);
    const second = first === undefined ? undefined : parsedWith(before, "b", after, key);
    if (first === undefined || second === undefined) return JSON.parse(bytes.toString("utf8"));
    first[key] = bytes.toString("latin1", start, end);
    return first;
  };
}

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
