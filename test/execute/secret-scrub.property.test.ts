/**
 * Property tests of the scrubber, as an upstream trying to smuggle a credential back would
 * see it: the secret anywhere in random text, bytes or JSON, in any spelling the scrubber
 * supports or one or two nested encodings a client may decode → never readable afterwards;
 * content without a secret is returned exactly, and with one only the overwritten characters
 * change.
 */
import { describe, it } from "node:test";
import fc from "fast-check";
import { createSecretScrubber, injectedSecrets, ScrubError } from "../../src/execute/secret-scrub.ts";
import {
  clientReadings,
  htmlDecimal,
  htmlHex,
  htmlNamed,
  jsEscaped,
  mimeBase64,
  percentAll,
  quotedPrintable,
  spaced,
} from "../helpers/client-encodings.ts";

const RUNS = 300;

/** Header-safe secrets (visible ASCII, inner spaces), as the injector allows them. */
const headerSecret = fc
  .string({
    unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
    minLength: 8,
    maxLength: 48,
  })
  .filter((s) => !s.includes("*"));

/** Any secret, e.g. a client secret or refresh token (any Unicode, no fill character). */
const anySecret = fc
  .string({ unit: "grapheme", minLength: 8, maxLength: 32 })
  .filter((s) => !s.includes("*"));

type Spelling = (secret: string) => string;

const htmlEscape = (s: string) =>
  s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;");

const spellings: Record<string, Spelling> = {
  raw: (s) => s,
  percent: (s) => encodeURIComponent(s),
  percentLower: (s) => encodeURIComponent(s).replace(/%[0-9A-F]{2}/g, (h) => h.toLowerCase()),
  form: (s) => new URLSearchParams({ k: s }).toString().slice(2),
  json: (s) => JSON.stringify(s).slice(1, -1),
  jsonSlash: (s) => JSON.stringify(s).slice(1, -1).replaceAll("/", "\\/"),
  html: htmlEscape,
  base64: (s) => Buffer.from(s).toString("base64"),
  base64url: (s) => Buffer.from(s).toString("base64url"),
};

const spellingName = fc.constantFrom(...Object.keys(spellings));

function onlyOverwritten(before: string, after: string): boolean {
  if (after.length !== before.length) return false;
  for (let i = 0; i < before.length; i++) if (after[i] !== before[i] && after[i] !== "*") return false;
  return true;
}

/** Encodings a client may decode (issue 26); a property nests one or two of them. */
const clientEncodings: Record<string, Spelling> = {
  mime: (s) => mimeBase64(Buffer.from(s), 16),
  base64urlSpaced: (s) => spaced(Buffer.from(`#${s}`).toString("base64url"), 4, "\n "),
  htmlDecimal,
  htmlHex,
  htmlNamed,
  percentAll,
  jsEscaped,
  hex: (s) => Buffer.from(s, "latin1").toString("hex"),
  quotedPrintable,
};

describe("secret scrubber properties", () => {
  it("a secret in one or two nested client encodings, anywhere in random text, cannot be read back", () => {
    const names = fc.constantFrom(...Object.keys(clientEncodings));
    fc.assert(
      fc.property(
        headerSecret,
        fc.array(names, { minLength: 1, maxLength: 2 }),
        fc.string({ maxLength: 12 }),
        fc.string({ maxLength: 12 }),
        (secret, chain, before, after) => {
          const encoded = chain.reduce((text, name) => (clientEncodings[name] as Spelling)(text), secret);
          const text = `${before} ${encoded} ${after}`;
          let out: string;
          try {
            out = createSecretScrubber([secret]).scrubText(text).value;
          } catch (error) {
            // Refused, never passed: acceptable.
            return error instanceof ScrubError;
          }
          return (
            onlyOverwritten(text, out) && clientReadings(out).every((reading) => !reading.includes(secret))
          );
        },
      ),
      { numRuns: 150 },
    );
  });

  it("a secret in any supported spelling, anywhere in random text, is gone; the rest is unchanged", () => {
    fc.assert(
      fc.property(headerSecret, spellingName, fc.string(), fc.string(), (secret, name, before, after) => {
        const spell = spellings[name] as Spelling;
        const scrubber = createSecretScrubber([secret]);
        const text = `${before}${spell(secret)}${after}`;
        let out: string;
        try {
          out = scrubber.scrubText(text).value;
        } catch (error) {
          // Refused, never passed: acceptable.
          return error instanceof ScrubError;
        }
        return !out.includes(spell(secret)) && !out.includes(secret) && onlyOverwritten(text, out);
      }),
      { numRuns: RUNS },
    );
  });

  it("base64 at any offset inside a blob cannot be decoded back to the secret", () => {
    fc.assert(
      fc.property(
        headerSecret,
        fc.uint8Array({ maxLength: 40 }),
        fc.uint8Array({ maxLength: 40 }),
        (secret, pre, post) => {
          const scrubber = createSecretScrubber([secret]);
          const blob = Buffer.concat([pre, Buffer.from(secret), post]).toString("base64");
          const out = scrubber.scrubText(blob).value;
          // Whatever the overwritten characters stood for, the secret's bytes are not all there.
          for (const filler of ["A", "/", "g"]) {
            const decoded = Buffer.from(out.replaceAll("*", filler), "base64").toString("latin1");
            if (decoded.includes(secret)) return false;
          }
          return true;
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("in bytes: UTF-8, UTF-16LE and UTF-16BE echoes of any secret are gone, length kept", () => {
    const encodings = fc.constantFrom("utf8", "utf16le", "utf16be");
    fc.assert(
      fc.property(
        anySecret,
        encodings,
        fc.uint8Array({ maxLength: 64 }),
        fc.uint8Array({ maxLength: 64 }),
        (secret, encoding, pre, post) => {
          const scrubber = createSecretScrubber([secret]);
          const encode = (s: string) =>
            encoding === "utf16be"
              ? Buffer.from(s, "utf16le").swap16()
              : Buffer.from(s, encoding as BufferEncoding);
          const body = Buffer.concat([pre, encode(secret), post]);
          const out = scrubber.scrubBytes(body).value;
          return out.length === body.length && out.indexOf(encode(secret)) === -1;
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("text without the secret comes back exactly (no false positives)", () => {
    fc.assert(
      fc.property(headerSecret, fc.string({ maxLength: 300 }), (secret, text) => {
        fc.pre(!createSecretScrubber([secret]).scrubText(text).found);
        const scrubber = createSecretScrubber([secret]);
        const bytes = Buffer.from(text);
        return scrubber.scrubText(text).value === text && scrubber.scrubBytes(bytes).value === bytes;
      }),
      { numRuns: RUNS },
    );
  });

  it("JSON: a secret as a value, inside a longer string or as a key, at any depth, in any escaping, is gone", () => {
    const where = fc.constantFrom("value", "inside", "key");
    // none; every character as \u; some characters as \u; "/" as "\/" (as PHP writes it).
    const escaping = fc.constantFrom("none", "all", "some", "slash");
    fc.assert(
      fc.property(
        headerSecret,
        fc.jsonValue({ maxDepth: 4 }),
        where,
        escaping,
        fc.integer({ min: 0, max: 7 }),
        (secret, doc, place, mode, seed) => {
          const scrubber = createSecretScrubber(
            injectedSecrets({ headers: { "x-api-key": secret }, query: {} }),
          );
          const planted =
            place === "value"
              ? { doc, echo: secret }
              : place === "inside"
                ? { doc, note: `received ${secret} from you` }
                : { doc, [secret]: true };
          let text = JSON.stringify([planted]);
          if (mode !== "none") {
            const u = (c: string) => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, "0")}`;
            const spelled = Array.from(secret, (c, i) => {
              if (mode === "all" || (mode === "some" && (i + seed) % 3 === 0)) return u(c);
              if (c === '"' || c === "\\") return `\\${c}`;
              return mode === "slash" && c === "/" ? "\\/" : c;
            }).join("");
            text = text.replaceAll(JSON.stringify(secret).slice(1, -1), () => spelled);
          }
          // As the executor and the proxy do: bytes first, then, when the text uses an
          // optional escape, every parsed string and key.
          const bytes = scrubber.scrubBytes(Buffer.from(text)).value;
          const parsed = JSON.parse(bytes.toString("utf8"));
          const clean = scrubber.jsonNeedsRescan(bytes.toString("utf8"))
            ? scrubber.scrubJson(parsed).value
            : parsed;
          return !JSON.stringify(clean).includes(secret);
        },
      ),
      { numRuns: RUNS },
    );
  });
});
