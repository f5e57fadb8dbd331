import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { CryptoError } from "../../src/crypto/errors.ts";
import { KeyRing, signerKeyLookup } from "../../src/crypto/key-ring.ts";
import { decryptVerify, signEncrypt, verifySignedBlob } from "../../src/crypto/sign-encrypt.ts";
import { encodeSignedBlob } from "../../src/crypto/signed-blob.ts";
import { createCryptoWorkerPool } from "../../src/crypto/worker-pool.ts";

// The behaviours shared with signEncrypt / decryptVerify (every tampering, every error
// code) run through the pool in sign-encrypt.test.ts; these are the pool's own.

const alice = KeyRing.generate({ owner: "alice" });
const bob = KeyRing.generate({ owner: "bob" });
const signers = signerKeyLookup([alice, bob]);
const atBob = { recipientKeys: bob, signerKeys: signers };
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
const code = (expected: string) => (error: unknown) =>
  error instanceof CryptoError && error.code === expected;

describe("crypto worker pool", () => {
  const pool = createCryptoWorkerPool({ size: 2 });
  after(() => pool.close());

  it("keeps each caller's result apart under concurrency, on every thread", async () => {
    const inputs = Array.from({ length: 24 }, (_, i) => `payload ${i} `.repeat(i * 50 + 1));
    const envelopes = await Promise.all(
      inputs.map((plaintext, i) =>
        pool.signEncrypt({ signer: alice.signer(), recipient: bob, purpose: `p${i}`, plaintext }),
      ),
    );
    const results = await Promise.all(
      envelopes.map((envelope, i) => pool.decryptVerify(envelope, { ...atBob, expectedPurpose: `p${i}` })),
    );
    assert.deepEqual(
      results.map((result) => text(result.plaintext)),
      inputs,
    );
    // And they are ordinary envelopes: the synchronous form reads them.
    assert.equal(text(decryptVerify(envelopes[3] ?? "", atBob).plaintext), inputs[3]);
  });

  it("returns the verified signed blob in a buffer of its own, the parts views into it, which the caller may wipe", async () => {
    const envelope = signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "mine" });
    const first = await pool.decryptVerify(envelope, atBob);
    const second = await pool.decryptVerify(envelope, atBob);
    assert.equal(first.plaintext.byteLength, 4);
    assert.equal(first.signedBlob.byteOffset, 0);
    assert.equal(first.signedBlob.byteLength, first.signedBlob.buffer.byteLength);
    for (const part of [first.plaintext, first.signedDocument, first.signature]) {
      assert.equal(part.buffer, first.signedBlob.buffer);
    }
    // The same bytes encodeSignedBlob would build, and anyone with alice's public key verifies them.
    assert.deepEqual(
      Buffer.from(first.signedBlob),
      encodeSignedBlob(first.signedDocument, first.signature, first.plaintext),
    );
    const checked = await verifySignedBlob(first.signedBlob, { signerKeys: signers, expectedPurpose: "p" });
    assert.equal(text(checked.payload), "mine");
    assert.notEqual(second.signedBlob.buffer, first.signedBlob.buffer);
    first.signedBlob.fill(0);
    assert.equal(text(second.plaintext), "mine");
  });

  it("signs a byte plaintext as given, and a plaintext changed after the call does not matter", async () => {
    const bytes = Uint8Array.from([1, 2, 3, 4, 5]);
    const pending = pool.signEncrypt({
      signer: alice.signer(),
      recipient: bob,
      purpose: "p",
      plaintext: bytes,
    });
    bytes.fill(9);
    const opened = decryptVerify(await pending, atBob);
    assert.deepEqual(Uint8Array.from(opened.plaintext), Uint8Array.from([1, 2, 3, 4, 5]));
  });

  it("asks the signer lookup with the signed names, on the caller's thread", async () => {
    const envelope = signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "x" });
    const asked: Array<[string, string]> = [];
    await pool.decryptVerify(envelope, {
      recipientKeys: bob,
      signerKeys: (signer, keyId) => {
        asked.push([signer, keyId]);
        return signers(signer, keyId);
      },
    });
    assert.deepEqual(asked, [["alice", alice.current.keyId]]);
  });

  it("sends a likely signer's keys with the job (asked up front, not back), and still verifies", async () => {
    const envelope = signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "x" });
    const asked: Array<[string, string]> = [];
    const lookup = (signer: string, keyId: string) => {
      asked.push([signer, keyId]);
      return signers(signer, keyId);
    };
    const likelySigner = { id: "alice", keyIds: [alice.current.keyId, "no-such-key"] };
    const opened = await pool.decryptVerify(envelope, {
      recipientKeys: bob,
      signerKeys: lookup,
      likelySigner,
    });
    assert.equal(opened.signer, "alice");
    assert.deepEqual(asked, [
      ["alice", alice.current.keyId],
      ["alice", "no-such-key"],
    ]);
    // The key the lookup gives is the one that must verify: a wrong one is a bad signature.
    await assert.rejects(
      pool.decryptVerify(envelope, {
        recipientKeys: bob,
        signerKeys: (signer, keyId) =>
          signer === "alice" ? bob.signerKeys("bob", bob.current.keyId) : signers(signer, keyId),
        likelySigner,
      }),
      code("crypto_bad_signature"),
    );
  });

  it("asks back for a signer other than the likely one", async () => {
    const envelope = signEncrypt({ signer: bob.signer(), recipient: bob, purpose: "p", plaintext: "x" });
    const asked: Array<[string, string]> = [];
    const opened = await pool.decryptVerify(envelope, {
      recipientKeys: bob,
      signerKeys: (signer, keyId) => {
        asked.push([signer, keyId]);
        return signers(signer, keyId);
      },
      likelySigner: { id: "alice", keyIds: [alice.current.keyId] },
    });
    assert.equal(opened.signer, "bob");
    assert.deepEqual(asked, [
      ["alice", alice.current.keyId],
      ["bob", bob.current.keyId],
    ]);
  });

  it("rejects with the error a signer lookup throws, and the thread serves the next call", async () => {
    const envelope = signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "x" });
    const failure = new Error("directory unavailable");
    await assert.rejects(
      pool.decryptVerify(envelope, {
        recipientKeys: bob,
        signerKeys: () => {
          throw failure;
        },
      }),
      (error: unknown) => error === failure,
    );
    assert.equal(text((await pool.decryptVerify(envelope, atBob)).plaintext), "x");
  });

  it("checks arguments and the envelope's form before anything is sent to a thread", async () => {
    await assert.rejects(pool.decryptVerify("not base64!", atBob), code("crypto_malformed"));
    await assert.rejects(
      pool.signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "bad purpose", plaintext: "x" }),
      code("crypto_invalid_argument"),
    );
    await assert.rejects(
      pool.signEncrypt({
        signer: { ...alice.signer(), privateKey: alice.current.kem.privateKey },
        recipient: bob,
        purpose: "p",
        plaintext: "x",
      }),
      code("crypto_invalid_key"),
    );
  });

  it("refuses a size that is not a positive integer", () => {
    for (const size of [0, -1, 1.5, Number.NaN]) {
      assert.throws(() => createCryptoWorkerPool({ size }), TypeError);
    }
  });
  it("moves each verified blob to its own caller, at every size and on both signer paths, under concurrency (decision 3181)", async () => {
    const carol = KeyRing.generate({ owner: "carol" });
    const withCarol = signerKeyLookup([alice, bob, carol]);
    // Around the Buffer pool's and AES block's edges, and large enough to move rather than copy.
    const sizes = [0, 1, 15, 16, 17, 4095, 4096, 4097, 65536, 1 << 20];
    const likelySigner = { id: "alice", keyIds: alice.versions.map((version) => version.keyId) };
    const jobs = sizes.flatMap((size, i) =>
      [alice, carol].map((signer) => ({
        plaintext: String.fromCharCode(97 + (i % 26)).repeat(size),
        purpose: `p${i}`,
        // alice: her keys go with the job; carol: the worker asks for them.
        likely: signer === alice,
        envelope: signEncrypt({
          signer: signer.signer(),
          recipient: bob,
          purpose: `p${i}`,
          plaintext: String.fromCharCode(97 + (i % 26)).repeat(size),
        }),
      })),
    );
    const results = await Promise.all(
      jobs.map((job) =>
        pool.decryptVerify(job.envelope, {
          recipientKeys: bob,
          signerKeys: withCarol,
          expectedPurpose: job.purpose,
          ...(job.likely ? { likelySigner } : {}),
        }),
      ),
    );
    assert.equal(new Set(results.map((result) => result.signedBlob.buffer)).size, results.length);
    for (const [k, result] of results.entries()) {
      assert.equal(text(result.plaintext), jobs[k]?.plaintext);
      assert.deepEqual(
        Buffer.from(result.signedBlob),
        encodeSignedBlob(result.signedDocument, result.signature, result.plaintext),
      );
    }
    // Wiping some results leaves every other one whole.
    for (const [k, result] of results.entries()) if (k % 2 === 0) result.signedBlob.fill(0);
    for (const [k, result] of results.entries())
      if (k % 2 === 1) assert.equal(text(result.plaintext), jobs[k]?.plaintext);
  });
});

describe("a closed crypto worker pool", () => {
  it("fails calls made after close, and close is idempotent", async () => {
    const pool = createCryptoWorkerPool({ size: 1 });
    const envelope = await pool.signEncrypt({
      signer: alice.signer(),
      recipient: bob,
      purpose: "p",
      plaintext: "x",
    });
    await pool.close();
    await pool.close();
    await assert.rejects(pool.decryptVerify(envelope, atBob), /closed/);
    await assert.rejects(
      pool.signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "x" }),
      /closed/,
    );
  });

  it("fails calls still pending when it closes", async () => {
    const pool = createCryptoWorkerPool({ size: 1 });
    const pending = Array.from({ length: 8 }, () =>
      pool.signEncrypt({ signer: alice.signer(), recipient: bob, purpose: "p", plaintext: "x" }),
    );
    const settled = Promise.allSettled(pending);
    await pool.close();
    const outcomes = await settled;
    // Calls the thread finished before it stopped succeed; the others are refused, none hang.
    assert.equal(outcomes.length, 8);
    for (const outcome of outcomes) {
      if (outcome.status === "rejected") assert.match(String(outcome.reason), /closed/);
    }
  });
});
