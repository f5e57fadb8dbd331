import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { isSensitiveKey } from "../../src/core/redaction.ts";
import { holdsMember } from "../../src/execute/embedded-members.ts";
import { RedactionDecodeError } from "../../src/execute/response-body.ts";
import { scrubAndRedact } from "../../src/execute/scrub-redact.ts";
import { createSecretScrubber } from "../../src/execute/secret-scrub.ts";
import { htmlDecimal, percentAll } from "../helpers/client-encodings.ts";

const CARD = "4111111111111111";
const DOC = JSON.stringify({ id: "order-1", card_number: CARD });
const covered = (name: string) => isSensitiveKey(name);

function refusal(body: string, type: string, rules: Parameters<typeof scrubAndRedact>[2] = []): string {
  try {
    scrubAndRedact(Buffer.from(body), type, rules, createSecretScrubber([]));
  } catch (error) {
    assert.ok(error instanceof RedactionDecodeError, String(error));
    return error.issue;
  }
  return "passed";
}

describe("members a client could read out of what redaction does not parse", () => {
  it("are found in JSONP, HTML (raw or escaped), object literals, encoded JSON", () => {
    const texts = [
      `cb(${DOC});`,
      `<pre>${DOC}</pre>`,
      `<pre>${DOC.replaceAll('"', "&quot;")}</pre>`,
      `cb({id: 1, card_number: "${CARD}"})`,
      `cb({'password': 'hunter2-hunter2'})`,
      `data=${percentAll(DOC)}`,
      `<p>${htmlDecimal(DOC)}</p>`,
      `blob: ${Buffer.from(DOC).toString("base64")}`,
      JSON.stringify(DOC).slice(1, -1),
      `{"token": {"value": "x"}}`,
    ];
    for (const text of texts) assert.equal(holdsMember(text, covered), true, text);
  });

  it("prose, masked or empty values and other names are not members to refuse", () => {
    const texts = [
      "Password: enter yours below",
      "<label>Card number:</label> <input name=card_number>",
      '{"password":"********"}',
      '{"password":"","token":null,"secret":false}',
      '{"id":"order-1","status":"shipped"}',
      "https://example.com/a:b",
    ];
    for (const text of texts) assert.equal(holdsMember(text, covered), false, text);
  });

  it("the names a rule covers count as well", () => {
    assert.equal(holdsMember('cb({"pan":"4111"})', covered), false);
    assert.equal(
      holdsMember('cb({"pan":"4111"})', (name) => name === "pan" || covered(name)),
      true,
    );
  });
});

describe("scrubAndRedact: JSON inside a non-JSON answer", () => {
  it("is refused (embedded_member) when a client could read a masked member out of it", () => {
    assert.equal(refusal(`cb(${DOC});`, "application/javascript"), "embedded_member");
    assert.equal(refusal(`<pre>${DOC}</pre>`, "text/html"), "embedded_member");
    assert.equal(refusal(JSON.stringify({ payload: DOC }), "application/json"), "embedded_member");
    assert.equal(
      refusal(JSON.stringify({ payload: Buffer.from(DOC).toString("base64") }), "application/json"),
      "embedded_member",
    );
  });

  it("with rules, an answer not declared JSON is refused (content_type); JSON with its rule masked passes", () => {
    const rules = [{ path: "/pan", mode: "mask" as const, keep_last: 4 }];
    assert.equal(refusal('{"pan":"4111111111111111"}', "text/plain", rules), "content_type");
    assert.equal(
      refusal(JSON.stringify({ note: '{"pan":"4111"}' }), "application/json", rules),
      "embedded_member",
    );
    assert.equal(refusal('{"pan":"4111111111111111"}', "application/json", rules), "passed");
  });

  it("HTML without members and ordinary JSON pass", () => {
    assert.equal(refusal("<html><p>order-1 has shipped</p></html>", "text/html"), "passed");
    assert.equal(refusal(DOC, "application/json"), "passed");
  });
});
