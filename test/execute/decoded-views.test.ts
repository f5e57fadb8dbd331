import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  baseView,
  type DecodedView,
  forEachView,
  VIEW_BUDGET_FACTOR,
  ViewBudgetError,
} from "../../src/execute/decoded-views.ts";
import {
  htmlDecimal,
  htmlHex,
  htmlNamed,
  jsEscaped,
  mimeBase64,
  percentAll,
  quotedPrintable,
  spaced,
} from "../helpers/client-encodings.ts";

const SECRET = "s3cr/t+key=v:al.ue_x";

/** Every view of `text`, with the source span of each occurrence of `needle`. */
function occurrences(text: string, needle: string): Array<readonly [number, number]> {
  const spans: Array<readonly [number, number]> = [];
  forEachView(baseView(text), (view: DecodedView) => {
    for (let at = view.text.indexOf(needle); at !== -1; at = view.text.indexOf(needle, at + 1))
      spans.push(view.source(at, at + needle.length));
    return false;
  });
  return spans;
}

const ENCODINGS: Record<string, (s: string) => string> = {
  "MIME base64 (CRLF lines)": (s) => mimeBase64(Buffer.from(s), 8),
  "base64url, spaced, after one byte": (s) => spaced(Buffer.from(`!${s}`).toString("base64url"), 3, " \n"),
  "base64, after two bytes": (s) => Buffer.from(`!!${s}`).toString("base64"),
  "HTML decimal references": htmlDecimal,
  "HTML hex references, mixed case": htmlHex,
  "HTML named references": htmlNamed,
  "every byte percent-encoded, mixed case": percentAll,
  "%uXXXX": (s) => Array.from(s, (c) => `%u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join(""),
  "JavaScript \\u and \\x escapes": jsEscaped,
  "\\u{…} escapes": (s) => Array.from(s, (c) => `\\u{${c.charCodeAt(0).toString(16)}}`).join(""),
  "hex, mixed case": (s) =>
    Array.from(Buffer.from(s), (b, i) =>
      b.toString(16).padStart(2, "0")[i % 2 ? "toUpperCase" : "toLowerCase"](),
    ).join(""),
  "quoted-printable with soft line breaks": quotedPrintable,
  "percent-encoded HTML references": (s) => encodeURIComponent(htmlHex(s)),
  "base64 of JavaScript escapes": (s) => Buffer.from(jsEscaped(s)).toString("base64"),
  "HTML references of percent-encoding": (s) => htmlDecimal(percentAll(s)),
};

describe("decoded views", () => {
  for (const [name, encode] of Object.entries(ENCODINGS)) {
    it(`reads the text through ${name}, and maps it back to where it came from`, () => {
      const encoded = encode(SECRET);
      const text = `<p>before ${encoded} after</p>`;
      const spans = occurrences(text, SECRET);
      assert.ok(spans.length > 0, `${name}: ${encoded}`);
      const at = text.indexOf(encoded);
      for (const [start, end] of spans) {
        // Within the encoded part (a base64 span may take one neighbouring character of the blob).
        assert.ok(start >= at - 1 && end <= at + encoded.length + 1, `${name}: ${start}-${end}`);
        assert.ok(end - start >= SECRET.length / 2, name);
      }
    });
  }

  it("an escape of one family inside another is read both ways (a client decodes one at a time)", () => {
    // HTML-escaped text holding a literal %41: the HTML reader sees `%41`, not `A`.
    const secret = 'x%41"yyyyyyy';
    const text = secret.replace('"', "&quot;");
    assert.ok(occurrences(text, secret).length > 0);
  });

  it("text without escapes or long runs is one view", () => {
    let views = 0;
    forEachView(baseView("plain words, short ones: a b c."), () => {
      views++;
      return false;
    });
    assert.equal(views, 1);
  });

  it("the work grows linearly with nested encodings (complexity guard)", () => {
    // Every layer decodes into the next: percent of HTML of JS escapes of base64, repeated.
    const unit = encodeURIComponent(htmlHex(jsEscaped(Buffer.from("QUJDREVGR0hJSktM").toString("base64"))));
    const visited = (copies: number) => {
      let chars = 0;
      forEachView(baseView(unit.repeat(copies)), (view) => {
        chars += view.text.length;
        return false;
      });
      return chars;
    };
    const small = visited(16);
    const large = visited(128);
    assert.ok(large <= small * 8 * 1.1, `${small} → ${large}`);
    assert.ok(large <= VIEW_BUDGET_FACTOR * unit.length * 128);
  });

  it("a text whose views would exceed the budget is refused", () => {
    const text = percentAll("a".repeat(64)).repeat(4);
    assert.throws(() => forEachView(baseView(text), () => false, 0, 64, 10), ViewBudgetError);
  });
});
