/**
 * The crypto service's unwrap action (actions.ts `unwrapAction`) as a parser of attacker input:
 * for any text, and for every one-byte change of a real header, it refuses with one public
 * reason and hands out no key; only the exact header of an envelope addressed to the ring
 * yields that envelope's key, and a retired version of the ring still does.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { CryptoServiceError } from "../../../src/clients/crypto-service/reasons.ts";
import { ENCRYPT_AAD } from "../../../src/crypto/encrypt.ts";
import { deserializeEnvelope, encrypt, KeyRing, openWithContentKey } from "../../../src/crypto/index.ts";
import { unwrapAction } from "../../../src/servers/crypto/actions.ts";

const ring = KeyRing.generate({ owner: "subject:agent-1" });
const other = KeyRing.generate({ owner: "partner-acme" });
const envelope = encrypt(ring, "the plaintext");
const header = deserializeEnvelope(envelope).header;

/** The public reason of a refused unwrap; fails the test if a key came back. */
function refusal(text: string): string {
  try {
    const payload = unwrapAction(ring, text);
    assert.fail(`a key for ${text.slice(0, 40)}: ${payload.key_id}`);
  } catch (error) {
    if (!(error instanceof CryptoServiceError)) throw error;
    return error.reason;
  }
}

describe("unwrap action (attacker-chosen headers)", () => {
  it("opens exactly its envelope with the key of the exact header", () => {
    const payload = unwrapAction(ring, header.toString("base64"));
    assert.equal(payload.key_id, ring.current.keyId);
    const key = Buffer.from(payload.content_key, "base64");
    assert.equal(
      Buffer.from(openWithContentKey(deserializeEnvelope(envelope), key, ENCRYPT_AAD)).toString(),
      "the plaintext",
    );
    // The key of one envelope opens no other envelope of the same ring.
    assert.throws(() => openWithContentKey(deserializeEnvelope(encrypt(ring, "another")), key, ENCRYPT_AAD));
  });

  it("refuses any text with a public reason, never a key", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 2000 }),
          fc.base64String({ maxLength: 2000 }),
          fc.uint8Array({ maxLength: 1500 }).map((bytes) => Buffer.from(bytes).toString("base64")),
          fc
            .uint8Array({ minLength: 1100, maxLength: 1200 })
            .map((bytes) => Buffer.concat([header.subarray(0, 30), bytes]).toString("base64")),
        ),
        (text) => {
          assert.ok(["invalid_ciphertext", "invalid_request"].includes(refusal(text)), text.slice(0, 40));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("refuses every one-byte change of a real header, in every position", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: header.length - 1 }),
        fc.integer({ min: 1, max: 255 }),
        (position, flip) => {
          const changed = Buffer.from(header);
          changed[position] = (changed[position] ?? 0) ^ flip;
          assert.equal(refusal(changed.toString("base64")), "invalid_ciphertext", `byte ${position}`);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("refuses another ring's header and any bytes after a header", () => {
    const foreign = deserializeEnvelope(encrypt(other, "x")).header.toString("base64");
    assert.equal(refusal(foreign), "invalid_ciphertext");
    for (const extra of [Buffer.of(0), Buffer.alloc(16), deserializeEnvelope(envelope).body]) {
      assert.equal(refusal(Buffer.concat([header, extra]).toString("base64")), "invalid_ciphertext");
    }
  });

  it("unwraps for a retired version of the ring", () => {
    const rotating = KeyRing.generate({ owner: "subject:rotating" });
    const before = encrypt(rotating, "before");
    rotating.rotate();
    const payload = unwrapAction(rotating, deserializeEnvelope(before).header.toString("base64"));
    const key = Buffer.from(payload.content_key, "base64");
    assert.equal(
      Buffer.from(openWithContentKey(deserializeEnvelope(before), key, ENCRYPT_AAD)).toString(),
      "before",
    );
  });
});
