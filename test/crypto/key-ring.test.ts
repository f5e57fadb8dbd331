import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decrypt, encrypt } from "../../src/crypto/encrypt.ts";
import { deserializeEnvelope } from "../../src/crypto/envelope.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import { KeyRing, PublicKeyRing, signerKeyLookup } from "../../src/crypto/key-ring.ts";
import {
  exportPrivateSeed,
  exportRawPublicKey,
  importPrivateSeed,
  importPublicKey,
  KEM_ALGORITHM,
  SIG_ALGORITHM,
} from "../../src/crypto/keys.ts";
import { sign, verify } from "../../src/crypto/signature.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

describe("key ring", () => {
  it("starts with one active version and looks versions up by key id", () => {
    const now = new Date("2025-01-02T03:04:05.000Z");
    const ring = KeyRing.generate({ owner: "partner:acme", now });
    assert.equal(ring.versions.length, 1);
    assert.equal(ring.current.status, "active");
    assert.deepEqual(ring.current.createdAt, now);
    assert.match(ring.current.keyId, /^pq1-[0-9a-f]{16}$/);
    assert.equal(ring.get(ring.current.keyId), ring.current);
    assert.equal(ring.get("nope"), undefined);
    assert.throws(() => ring.require("nope"), code("crypto_unknown_key"));
  });

  it("rotates: old ciphertexts still open, new ones use the new version", () => {
    const ring = KeyRing.generate({ owner: "partner:acme", keyId: "acme-v1" });
    const before = encrypt(ring, "made with v1");
    const signature = sign({ privateKey: ring.current.sig.privateKey, message: "doc", context: "t" });
    const next = ring.rotate({ keyId: "acme-v2" });
    assert.equal(ring.current, next);
    assert.equal(ring.current.keyId, "acme-v2");
    assert.deepEqual(
      ring.versions.map((version) => [version.keyId, version.status]),
      [
        ["acme-v1", "retired"],
        ["acme-v2", "active"],
      ],
    );
    assert.equal(text(decrypt(ring, before)), "made with v1");
    const after = encrypt(ring, "made with v2");
    assert.equal(deserializeEnvelope(after).keyId, "acme-v2");
    assert.equal(text(decrypt(ring, after)), "made with v2");
    const oldKey = ring.signerKeys("partner:acme", "acme-v1");
    assert.ok(oldKey);
    assert.equal(verify({ publicKey: oldKey, message: "doc", signature, context: "t" }), true);
    assert.throws(() => ring.rotate({ keyId: "acme-v1" }), code("crypto_invalid_argument"));
  });

  it("decrypt names an unknown key id", () => {
    const ring = KeyRing.generate({ owner: "a" });
    const other = KeyRing.generate({ owner: "b" });
    assert.throws(() => decrypt(other, encrypt(ring, "x")), code("crypto_unknown_key"));
  });

  it("exports public keys as raw base64 and imports them for encrypting and verifying", () => {
    const ring = KeyRing.generate({ owner: "svc" });
    ring.rotate();
    const exported = JSON.parse(JSON.stringify(ring.exportPublic()));
    assert.equal(exported.keys.length, 2);
    assert.equal(Buffer.from(exported.keys[1].kemPublicKey, "base64").length, 1184);
    assert.equal(Buffer.from(exported.keys[1].sigPublicKey, "base64").length, 1952);
    assert.ok(!JSON.stringify(exported).includes("private"));
    const publicRing = PublicKeyRing.import(exported);
    assert.equal(publicRing.owner, "svc");
    assert.equal(publicRing.current.keyId, ring.current.keyId);
    const sealed = encrypt(publicRing, "to svc");
    assert.equal(text(decrypt(ring, sealed)), "to svc");
    const signature = sign({ privateKey: ring.current.sig.privateKey, message: "m", context: "c" });
    const lookup = signerKeyLookup([publicRing]);
    const key = lookup("svc", ring.current.keyId);
    assert.ok(key);
    assert.equal(verify({ publicKey: key, message: "m", signature, context: "c" }), true);
    assert.equal(lookup("someone-else", ring.current.keyId), undefined);
  });

  it("refuses malformed public key documents", () => {
    const exported = KeyRing.generate({ owner: "svc" }).exportPublic();
    const first = exported.keys[0];
    assert.ok(first);
    const variants: unknown[] = [
      null,
      { ...exported, format: "x" },
      { ...exported, keys: [] },
      { ...exported, keys: [first, first] },
      { ...exported, keys: [{ ...first, kemPublicKey: first.sigPublicKey }] },
      { ...exported, keys: [{ ...first, status: "retired" }] },
      { ...exported, keys: [{ ...first, createdAt: "yesterday" }] },
    ];
    for (const variant of variants) {
      for (const options of [{}, { verifying: true }]) {
        assert.throws(
          () => PublicKeyRing.import(variant, options),
          (error: unknown) => error instanceof CryptoError,
          JSON.stringify(variant)?.slice(0, 80),
        );
      }
    }
  });

  it("a ring only verified with imports its ML-KEM keys when first used, as the same keys", () => {
    const ring = KeyRing.generate({ owner: "svc" });
    const exported = ring.exportPublic();
    const verifying = PublicKeyRing.import(exported, { verifying: true });
    const signature = sign({ privateKey: ring.current.sig.privateKey, message: "m", context: "c" });
    const key = verifying.signerKeys("svc", ring.current.keyId);
    assert.ok(key);
    assert.equal(verify({ publicKey: key, message: "m", signature, context: "c" }), true);
    const kem = verifying.current.kemPublicKey;
    assert.ok(kem.equals(ring.current.kem.publicKey));
    assert.equal(verifying.current.kemPublicKey, kem, "imported once");
    assert.equal(text(decrypt(ring, encrypt(verifying, "to svc"))), "to svc");
    // A KEM key of the right length that does not import is refused when it is used.
    const first = exported.keys[0];
    assert.ok(first);
    const zeros = Buffer.alloc(1184, 0xff).toString("base64");
    const lazy = PublicKeyRing.import(
      { ...exported, keys: [{ ...first, kemPublicKey: zeros }] },
      { verifying: true },
    );
    assert.throws(() => lazy.current.kemPublicKey, code("crypto_invalid_key"));
    assert.throws(
      () => PublicKeyRing.import({ ...exported, keys: [{ ...first, kemPublicKey: zeros }] }),
      code("crypto_invalid_key"),
    );
  });

  it("raw keys round-trip through seeds and public bytes", () => {
    const ring = KeyRing.generate({ owner: "svc" });
    const { kem, sig } = ring.current;
    const kemPublic = importPublicKey(KEM_ALGORITHM, exportRawPublicKey(kem.publicKey));
    assert.ok(kemPublic.equals(kem.publicKey));
    const sigPrivate = importPrivateSeed(SIG_ALGORITHM, exportPrivateSeed(sig.privateKey));
    assert.ok(sigPrivate.equals(sig.privateKey));
    assert.equal(exportPrivateSeed(kem.privateKey).length, 64);
    assert.throws(() => importPublicKey(KEM_ALGORITHM, new Uint8Array(1183)), code("crypto_invalid_key"));
    assert.throws(() => importPrivateSeed(SIG_ALGORITHM, "AAAA"), code("crypto_invalid_key"));
    assert.throws(() => exportRawPublicKey(kem.privateKey), code("crypto_invalid_key"));
  });

  it("validates owners and versions", () => {
    assert.throws(() => KeyRing.generate({ owner: "" }), code("crypto_invalid_argument"));
    assert.throws(() => KeyRing.generate({ owner: "a\nb" }), code("crypto_invalid_argument"));
    assert.throws(() => KeyRing.generate({ owner: "a", keyId: "bad id" }), code("crypto_invalid_argument"));
    const ring = KeyRing.generate({ owner: "a" });
    ring.rotate();
    const [v1, v2] = ring.versions;
    assert.ok(v1 && v2);
    assert.throws(() => KeyRing.fromVersions("a", [v1]), code("crypto_invalid_argument"));
    assert.throws(
      () => KeyRing.fromVersions("a", [v2, { ...v2, keyId: "other" }]),
      code("crypto_invalid_argument"),
    );
    assert.equal(KeyRing.fromVersions("a", [v1, v2]).current.keyId, v2.keyId);
  });
});
