import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { describe, test } from "node:test";
import { deriveCacheKeys, openEntry, parseCacheKey, sealEntry } from "../../../src/policy/cache/index.ts";

const keyBytes = () => new Uint8Array(randomBytes(32));

describe("cache key", () => {
  test("the key file holds base64 text of 32 bytes; whitespace around it is ignored", () => {
    const bytes = randomBytes(32);
    assert.deepEqual(Buffer.from(parseCacheKey(`  ${bytes.toString("base64")}\n`)), bytes);
  });

  test("anything else is refused with invalid_cache_key", () => {
    for (const text of [
      "",
      "not base64!",
      randomBytes(16).toString("base64"),
      randomBytes(33).toString("base64"),
      randomBytes(32).toString("hex"),
    ]) {
      assert.throws(() => parseCacheKey(text), { code: "invalid_cache_key" }, JSON.stringify(text));
    }
  });
});

describe("sealed entries (AES-256-GCM, then HMAC-SHA256 over version, name and ciphertext)", () => {
  const keys = deriveCacheKeys(keyBytes());
  const value = { subject_id: "agent-1", head: 3, document: { secret_looking: "value" } };

  test("round trip; the contents are not readable in the sealed text", () => {
    const sealed = sealEntry(keys, "policy:agent-1", value);
    assert.doesNotMatch(sealed, /agent-1|secret_looking/);
    assert.deepEqual(openEntry(keys, "policy:agent-1", sealed), { ok: true, value });
  });

  test("every flipped character, another name, another key or a truncation fails verification", () => {
    const sealed = sealEntry(keys, "policy:agent-1", value);
    for (let i = 3; i < sealed.length; i += Math.ceil(sealed.length / 40)) {
      const char = sealed[i];
      if (char === ".") continue;
      const tampered = `${sealed.slice(0, i)}${char === "A" ? "B" : "A"}${sealed.slice(i + 1)}`;
      assert.equal(openEntry(keys, "policy:agent-1", tampered).ok, false, `position ${i}`);
    }
    assert.deepEqual(openEntry(keys, "policy:agent-2", sealed), { ok: false, failure: "bad_mac" });
    assert.deepEqual(openEntry(deriveCacheKeys(keyBytes()), "policy:agent-1", sealed), {
      ok: false,
      failure: "bad_mac",
    });
    assert.equal(openEntry(keys, "policy:agent-1", sealed.slice(0, -5)).ok, false);
    for (const junk of [null, 42, "", "v1.a.b", "v2.a.b.c", "v1.a.b.c.d"]) {
      assert.equal(openEntry(keys, "policy:agent-1", junk).ok, false);
    }
  });

  test("the MAC is checked before decryption", () => {
    // A MAC-valid entry whose ciphertext is not GCM-valid can only be made with the MAC key:
    // it is reported as undecryptable, proving both checks exist and run in that order.
    const sealed = sealEntry(keys, "policy:agent-1", value);
    const [version, iv] = sealed.split(".");
    const body = Buffer.alloc(32, 7).toString("base64url");
    const mac = createHmac("sha256", keys.mac)
      .update(`${version}\npolicy:agent-1\n${iv}.${body}`)
      .digest("base64url");
    assert.deepEqual(openEntry(keys, "policy:agent-1", `${version}.${iv}.${body}.${mac}`), {
      ok: false,
      failure: "undecryptable",
    });
  });

  test("two seals of the same value differ (fresh IV)", () => {
    assert.notEqual(sealEntry(keys, "n", value), sealEntry(keys, "n", value));
  });
});
