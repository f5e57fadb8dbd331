/**
 * JSON.parse of a UTF-8 body whose one large value is a top-level base64 string (the
 * authority's policy answer: a 0.5 MB `signed_policy` beside a few hundred bytes of facts), that
 * value decoded straight from its bytes. Decoding the whole body to a string, having JSON.parse
 * scan and copy the value, then decoding that string made two 0.5 MB strings per answer, each a
 * fresh mapping of V8's large-object space (decision 3131); here only the rest goes through
 * JSON.parse and the value is never a string.
 *
 * `{ json }`: JSON.parse's value, or JSON.parse refuses. `{ json, decoded }`: `json` is the object
 * JSON.parse makes but for the top-level `key`, which is "" there, and `decoded` is
 * `Buffer.from(<its string>, "base64")`. The value is decoded so only when its characters, up to
 * the next quote after the first `"key":"`, are strict base64 (base64BytesDecoded: then they are
 * what the string is, nothing to unescape) and the rest, parsed with two different stand-ins for
 * them, gives the top-level `key` exactly each stand-in: only the text between those quotes
 * differs, so that literal, and no other, is the member JSON.parse keeps (a nested or repeated
 * `key`, another spelling of it, or a literal that is not a value gives something else).
 * Anything else is parsed whole.
 */
export function jsonParserDecodingBase64(
  key: string,
): (bytes: Uint8Array) => { readonly json: unknown; readonly decoded?: Buffer } {
  if (!/^[A-Za-z0-9_]+$/.test(key)) throw new TypeError("the key must be plain ASCII letters, digits or _");
  const opening = Buffer.from(`"${key}":"`);
  return (input) => {
    const bytes = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
    const whole = () => ({ json: JSON.parse(bytes.toString("utf8")) as unknown });
    const at = bytes.indexOf(opening);
    const start = at + opening.length;
    const end = at < 0 ? -1 : bytes.indexOf(QUOTE, start);
    if (end < 0) return whole();
    const before = bytes.toString("utf8", 0, start);
    const after = bytes.toString("utf8", end);
    const first = parsedWith(before, "a", after, key);
    const second = first === undefined ? undefined : parsedWith(before, "b", after, key);
    const decoded = second === undefined ? undefined : base64BytesDecoded(bytes.subarray(start, end));
    if (first === undefined || decoded === undefined) return whole();
    first[key] = "";
    return { json: first, decoded };
  };
}

const QUOTE = 0x22;

/** Characters of base64 decoded a chunk at a time: each chunk's string stays out of V8's large-object space. */
const BASE64_CHUNK = 65_536;

/**
 * What `Buffer.from(chars.toString("latin1"), "base64")` gives, for characters that are strict
 * base64 (the alphabet, then at most two `=` at the end, a multiple of 4), decoded in 64 KiB
 * chunks into one buffer without the whole string being made; undefined for any other
 * characters (the caller decodes them whole, as before). Node's decoder skips a character
 * outside the alphabet (a control character, a backslash, anything not ASCII too) and stops at
 * `=`: for any such character the bytes decoded fall short of three per four characters less
 * the final padding, which is what tells them apart.
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
