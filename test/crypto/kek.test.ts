import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { decrypt, encrypt } from "../../src/crypto/encrypt.ts";
import { CryptoError } from "../../src/crypto/errors.ts";
import {
  initKek,
  Kek,
  loadKek,
  unwrapKeyRing,
  type WrappedKeyRing,
  wrapKeyRing,
} from "../../src/crypto/kek.ts";
import { KeyRing } from "../../src/crypto/key-ring.ts";
import { decryptVerify, signEncrypt } from "../../src/crypto/sign-encrypt.ts";

const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

describe("loadKek", () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-kek-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("takes the KEK from base64 first", async () => {
    const base64 = randomBytes(32).toString("base64");
    const a = await loadKek({ kek: base64, kekFile: join(dir, "unused") });
    const b = Kek.fromBase64(base64);
    assert.equal(a.id, b.id);
    assert.match(a.id, /^[0-9a-f]{16}$/);
  });

  it("refuses a KEK that is not 32 bytes of base64", async () => {
    await assert.rejects(loadKek({ kek: randomBytes(16).toString("base64") }), code("crypto_kek_invalid"));
    await assert.rejects(loadKek({ kek: "%%%%" }), code("crypto_kek_invalid"));
    const file = join(dir, "bad-kek");
    await writeFile(file, "not a key\n");
    await assert.rejects(loadKek({ kekFile: file }), code("crypto_kek_invalid"));
  });

  it("needs a file or a value, and creates the file only when asked", async () => {
    await assert.rejects(loadKek({}), code("crypto_kek_missing"));
    await assert.rejects(loadKek({ kekFile: join(dir, "absent") }), code("crypto_kek_missing"));
  });

  it("a mistyped path is an error naming it, and nothing is created there", async () => {
    const typo = join(dir, "stat", "kek");
    await assert.rejects(loadKek({ kekFile: typo }), (error: Error) => {
      assert.equal((error as { code?: string }).code, "crypto_kek_missing");
      assert.ok(error.message.includes(typo), error.message);
      return true;
    });
    await assert.rejects(stat(join(dir, "stat")), { code: "ENOENT" });
  });

  it("initKek is the explicit init: it creates a new file once and never replaces one", async () => {
    const file = join(dir, "init", "kek");
    const created = await initKek(file);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    assert.equal((await loadKek({ kekFile: file })).id, created.id);
    const before = await readFile(file, "utf8");
    await assert.rejects(initKek(file), code("crypto_kek_exists"));
    assert.equal(await readFile(file, "utf8"), before);
  });

  it("creates a 0600 file with a random KEK, then reads the same KEK back", async () => {
    const file = join(dir, "state", "nested", "kek");
    const created = await loadKek({ kekFile: file, createIfMissing: true });
    const info = await stat(file);
    assert.equal(info.mode & 0o777, 0o600);
    assert.equal(Buffer.from((await readFile(file, "utf8")).trim(), "base64").length, 32);
    const again = await loadKek({ kekFile: file, createIfMissing: true });
    assert.equal(again.id, created.id);
    // Starting together, every loader ends up with the one KEK that was written whole.
    const together = await Promise.all(
      Array.from({ length: 8 }, () => loadKek({ kekFile: join(dir, "race"), createIfMissing: true })),
    );
    assert.equal(new Set(together.map((k) => k.id)).size, 1);
    assert.deepEqual(await readdir(dir).then((names) => names.filter((n) => n.endsWith(".tmp"))), []);
  });

  it("never serializes the key bytes", () => {
    const { kek, base64 } = Kek.generate();
    assert.deepEqual(JSON.parse(JSON.stringify(kek)), { id: kek.id });
    assert.ok(!JSON.stringify(kek).includes(base64));
  });
});

describe("wrapping key rings", () => {
  const kek = Kek.generate().kek;
  const ring = KeyRing.generate({ owner: "partner:acme", keyId: "acme-v1" });
  const oldCiphertext = encrypt(ring, "made with v1");
  ring.rotate({ keyId: "acme-v2" });
  const wrapped = JSON.parse(JSON.stringify(wrapKeyRing(ring, kek))) as WrappedKeyRing;

  it("stores no private key in clear", () => {
    const json = JSON.stringify(wrapped);
    for (const version of ring.versions) {
      const seed = version.kem.privateKey.export({ format: "raw-seed" }).toString("base64");
      assert.ok(!json.includes(seed));
    }
    assert.equal(wrapped.kekId, kek.id);
  });

  it("restores a ring that opens old and new ciphertexts and still signs", () => {
    const restored = unwrapKeyRing(wrapped, kek);
    assert.equal(restored.owner, "partner:acme");
    assert.equal(restored.current.keyId, "acme-v2");
    assert.deepEqual(
      restored.versions.map((version) => version.status),
      ["retired", "active"],
    );
    assert.equal(text(decrypt(restored, oldCiphertext)), "made with v1");
    assert.equal(text(decrypt(restored, encrypt(ring, "v2"))), "v2");
    const envelope = signEncrypt({
      signer: restored.signer(),
      recipient: ring,
      purpose: "p",
      plaintext: "hi",
    });
    assert.equal(
      text(decryptVerify(envelope, { recipientKeys: ring, signerKeys: ring.signerKeys }).plaintext),
      "hi",
    );
  });

  it("a wrong KEK fails with crypto_wrong_kek", () => {
    assert.throws(() => unwrapKeyRing(wrapped, Kek.generate().kek), code("crypto_wrong_kek"));
  });

  it("tampering fails with crypto_unwrap_failed", () => {
    const first = wrapped.versions[0];
    const second = wrapped.versions[1];
    assert.ok(first && second);
    const flip = (b64: string) => {
      const bytes = Buffer.from(b64, "base64");
      bytes[20] = (bytes[20] ?? 0) ^ 1;
      return bytes.toString("base64");
    };
    const variants: Array<[string, WrappedKeyRing]> = [
      [
        "wrapped KEM key",
        { ...wrapped, versions: [{ ...first, kemPrivateKey: flip(first.kemPrivateKey) }, second] },
      ],
      [
        "wrapped signing key",
        { ...wrapped, versions: [first, { ...second, sigPrivateKey: flip(second.sigPrivateKey) }] },
      ],
      ["owner", { ...wrapped, owner: "partner:evil" }],
      ["key id", { ...wrapped, versions: [{ ...first, keyId: "acme-v9" }, second] }],
      [
        "status",
        {
          ...wrapped,
          versions: [
            { ...first, status: "active" },
            { ...second, status: "retired" },
          ],
        },
      ],
      ["created at", { ...wrapped, versions: [{ ...first, createdAt: "2001-01-01T00:00:00.000Z" }, second] }],
      [
        "swapped purposes",
        {
          ...wrapped,
          versions: [
            { ...first, kemPrivateKey: first.sigPrivateKey, sigPrivateKey: first.kemPrivateKey },
            second,
          ],
        },
      ],
      ["public key", { ...wrapped, versions: [first, { ...second, kemPublicKey: first.kemPublicKey }] }],
    ];
    for (const [what, variant] of variants) {
      assert.throws(() => unwrapKeyRing(variant, kek), code("crypto_unwrap_failed"), what);
    }
  });

  it("refuses documents that are not wrapped rings", () => {
    for (const variant of [null, {}, { ...wrapped, format: "other" }, { ...wrapped, versions: "x" }]) {
      assert.throws(() => unwrapKeyRing(variant, kek), code("crypto_malformed"));
    }
  });
});
