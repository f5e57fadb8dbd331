import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  createSecretScrubber,
  injectedSecrets,
  MIN_SECRET_LENGTH,
  ScrubError,
  SecretTooShortError,
  secretForms,
} from "../../src/execute/secret-scrub.ts";
import { canary } from "../helpers/canary.ts";
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

const SECRET = canary("key-");

function utf16be(text: string): Buffer {
  return Buffer.from(text, "utf16le").swap16();
}

function utf32le(text: string): Buffer {
  const points = Array.from(text, (c) => c.codePointAt(0) ?? 0);
  const out = Buffer.alloc(points.length * 4);
  points.forEach((point, i) => {
    out.writeUInt32LE(point, i * 4);
  });
  return out;
}

/** Only `*` where something was overwritten, every other character as it was. */
function assertOnlyOverwritten(before: string, after: string): void {
  assert.equal(after.length, before.length);
  for (let i = 0; i < before.length; i++) {
    if (after[i] !== before[i]) assert.equal(after[i], "*", `position ${i}`);
  }
}

describe("secretForms and injectedSecrets", () => {
  it("refuses secrets shorter than the minimum, naming the kind and never the value", () => {
    assert.equal(MIN_SECRET_LENGTH, 8);
    for (const value of ["", "tiny", "1234567"]) {
      assert.throws(
        () => secretForms(value),
        (error: unknown) =>
          error instanceof SecretTooShortError && !error.message.includes(value || "\u0000"),
      );
    }
    // The credential after a scheme, and a Basic password, must be long enough on their own.
    assert.throws(() => secretForms("Bearer abc"), SecretTooShortError);
    const shortPassword = `Basic ${Buffer.from("a-long-user-name:pw").toString("base64")}`;
    assert.throws(() => secretForms(shortPassword), SecretTooShortError);
    assert.throws(() => injectedSecrets({ headers: {}, query: { api_key: "tiny" } }), SecretTooShortError);
  });

  it("derives the credential after the scheme and, for Basic, user:pass and the password", () => {
    const password = canary("pw-");
    const basic = `Basic ${Buffer.from(`svc-user:${password}`).toString("base64")}`;
    const forms = secretForms(basic);
    assert.ok(forms.includes(basic));
    assert.ok(forms.includes(basic.slice("Basic ".length)));
    assert.ok(forms.includes(`svc-user:${password}`));
    assert.ok(forms.includes(password));
    assert.deepEqual(secretForms(`Bearer ${SECRET}`), [`Bearer ${SECRET}`, SECRET]);
    const all = injectedSecrets({ headers: { authorization: basic }, query: { key: SECRET } }, [
      canary("rt-"),
    ]);
    assert.ok(all.includes(password) && all.includes(SECRET));
  });
});

describe("createSecretScrubber", () => {
  const scrubber = createSecretScrubber(injectedSecrets({ headers: { "x-api-key": SECRET }, query: {} }));

  it("overwrites every spelling an echo commonly uses, in place, and leaves the rest alone", () => {
    const special = "s3cr/t+key&value=\"quoted\" <tag> 'x'";
    const specialScrubber = createSecretScrubber([special]);
    const spellings = [
      special,
      encodeURIComponent(special),
      encodeURIComponent(special).toLowerCase(),
      new URLSearchParams({ k: special }).toString().slice(2),
      JSON.stringify(special).slice(1, -1),
      JSON.stringify(special).slice(1, -1).replaceAll("/", "\\/"),
      special
        .replaceAll("&", "&amp;")
        .replaceAll("<", "&lt;")
        .replaceAll(">", "&gt;")
        .replaceAll('"', "&quot;"),
      Buffer.from(special).toString("base64"),
      Buffer.from(special).toString("base64url"),
    ];
    for (const spelling of spellings) {
      const text = `before ${spelling} after`;
      const { value, found } = specialScrubber.scrubText(text);
      assert.ok(found > 0, spelling);
      assert.equal(value.includes(spelling), false, spelling);
      assert.ok(value.startsWith("before ") && value.endsWith(" after"), value);
      assertOnlyOverwritten(text, value);
    }
  });

  it("finds a secret base64-encoded at any offset inside a longer blob", () => {
    for (let offset = 0; offset < 6; offset++) {
      const blob = Buffer.from(`${"p".repeat(offset)}{"x-api-key":"${SECRET}"}tail`).toString("base64");
      const { value } = scrubber.scrubText(`data=${blob}`);
      const decoded = Buffer.from(value.slice(5).replaceAll("*", "A"), "base64").toString("latin1");
      assert.equal(decoded.includes(SECRET), false, `offset ${offset}`);
    }
  });

  it("scrubs bytes in UTF-8, UTF-16 (both orders) and UTF-32, keeping NUL bytes and the length", () => {
    const forms = [
      Buffer.from(`echo: ${SECRET}!`, "utf8"),
      Buffer.from(`echo: ${SECRET}!`, "utf16le"),
      utf16be(`echo: ${SECRET}!`),
      utf32le(`echo: ${SECRET}!`),
    ];
    for (const bytes of forms) {
      const { value, found } = scrubber.scrubBytes(bytes);
      assert.ok(found > 0);
      assert.equal(value.length, bytes.length);
      for (const decoded of [
        value.toString("utf8"),
        value.toString("utf16le"),
        Buffer.from(value).swap16().toString("utf16le"),
      ]) {
        assert.equal(decoded.includes(SECRET), false);
      }
      assert.equal(
        bytes.toString("latin1").replaceAll("\u0000", "").includes(SECRET),
        true,
        "input untouched",
      );
    }
    const clean = Buffer.from("nothing to see here, nothing at all");
    assert.equal(scrubber.scrubBytes(clean).value, clean, "no copy when nothing is found");
  });

  it("scrubs parsed JSON at any depth: values, parts of longer strings, keys and numbers", () => {
    const numeric = "12345678901";
    const both = createSecretScrubber([SECRET, numeric]);
    // \u escapes hide the secret from a byte scan; the parsed strings still hold it.
    const escaped = SECRET.replace(/./g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    const deep = `${'{"a":['.repeat(2000)}"${escaped}"${"]}".repeat(2000)}`;
    const parsed = JSON.parse(
      `{"note":"got ${escaped} ok","${escaped}":1,"n":${numeric},"list":[{"v":"${escaped}"}],"deep":${deep}}`,
    );
    const { value, found } = both.scrubJson(parsed);
    const text = JSON.stringify(value);
    assert.equal(text.includes(SECRET), false);
    assert.equal(text.includes(numeric), false);
    assert.ok(found >= 5);
    assert.match(text, /"note":"got \*+ ok"/);
    assert.deepEqual(Object.keys(value as object), ["note", "*".repeat(SECRET.length), "n", "list", "deep"]);
  });

  it("tells which headers hold a secret, by name or value", () => {
    assert.equal(scrubber.headerHoldsSecret("x-echo", `key=${SECRET}`), true);
    assert.equal(scrubber.headerHoldsSecret(`x-${SECRET}`, "1"), true);
    assert.equal(scrubber.headerHoldsSecret("link", ["<a>", `<${encodeURIComponent(SECRET)}>`]), true);
    assert.equal(scrubber.headerHoldsSecret("content-type", "application/json"), false);
  });

  it("finds a secret through every decoding a client may apply, and overwrites only where it came from", () => {
    const special = "s3cr/t+key=v:al.ue_x";
    const specialScrubber = createSecretScrubber([special]);
    const encodings: Record<string, (s: string) => string> = {
      "MIME base64": (s) => mimeBase64(Buffer.from(`{"k":"${s}"}`), 12),
      "base64url with spaces": (s) => spaced(Buffer.from(`!${s}`).toString("base64url"), 5, " \r\n"),
      "HTML decimal": htmlDecimal,
      "HTML hex": htmlHex,
      "HTML named": htmlNamed,
      "percent, every byte": percentAll,
      "JavaScript escapes": jsEscaped,
      hex: (s) => Buffer.from(s).toString("hex").toUpperCase(),
      "quoted-printable": quotedPrintable,
      "percent of HTML": (s) => encodeURIComponent(htmlHex(s)),
      "base64 of escapes": (s) => Buffer.from(jsEscaped(s)).toString("base64"),
      "base64 in a JSON string, CRLF lines": (s) =>
        JSON.stringify(mimeBase64(Buffer.from(s), 8)).slice(1, -1),
    };
    for (const [name, encode] of Object.entries(encodings)) {
      const text = `before ${encode(special)} after`;
      const { value, found } = specialScrubber.scrubText(text);
      assert.ok(found > 0, name);
      assertOnlyOverwritten(text, value);
      assert.ok(value.startsWith("before ") && value.endsWith(" after"), `${name}: ${value}`);
      for (const reading of clientReadings(value)) assert.equal(reading.includes(special), false, name);
    }
  });

  it("finds a secret percent-encoded inside UTF-16 and overwrites its bytes, NULs kept", () => {
    const body = Buffer.concat([
      Buffer.from([0xff, 0xfe]),
      Buffer.from(`next=${percentAll(SECRET)}`, "utf16le"),
    ]);
    const { value, found } = scrubber.scrubBytes(body);
    assert.ok(found > 0);
    assert.equal(value.length, body.length);
    const text = value.toString("utf16le");
    for (const reading of clientReadings(text)) assert.equal(reading.includes(SECRET), false);
    for (let i = 0; i < body.length; i++) if (body[i] === 0) assert.equal(value[i], 0);
  });

  it("a secret made of the fill character cannot be scrubbed: refused, never passed", () => {
    const stars = createSecretScrubber(["*".repeat(12)]);
    assert.throws(() => stars.scrubText(`x ${"*".repeat(12)} y`), ScrubError);
    assert.throws(() => stars.scrubBytes(Buffer.from(`x ${"*".repeat(12)} y`)), ScrubError);
  });

  it("with no secrets it is empty and returns every input unchanged", () => {
    const none = createSecretScrubber([]);
    assert.equal(none.empty, true);
    const bytes = Buffer.from("abc");
    assert.equal(none.scrubBytes(bytes).value, bytes);
    assert.equal(none.scrubText("abc").value, "abc");
  });
});
