import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  hashSecret,
  isSecretHash,
  SecretHashError,
  verifyAgainstDummy,
  verifySecret,
} from "../../src/identity/secret-hash.ts";

describe("secret hashing", () => {
  it("hashes with a fresh salt and verifies only the right secret", async () => {
    const a = await hashSecret("correct horse battery");
    const b = await hashSecret("correct horse battery");
    assert.notEqual(a, b);
    assert.ok(isSecretHash(a));
    assert.ok(!a.includes("correct"));
    assert.equal(await verifySecret("correct horse battery", a), true);
    assert.equal(await verifySecret("correct horse batterY", a), false);
    assert.equal(await verifySecret("", a), false);
  });

  it("keeps the cost in the hash so a cheaper one still verifies", async () => {
    const cheap = await hashSecret("s3cret-value", { log2N: 10, r: 8, p: 1 });
    assert.match(cheap, /^scrypt\$10\$8\$1\$/);
    assert.equal(await verifySecret("s3cret-value", cheap), true);
  });

  it("refuses malformed hashes and out-of-range costs", async () => {
    assert.ok(!isSecretHash("plaintext"));
    assert.ok(
      !isSecretHash("scrypt$30$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    );
    await assert.rejects(verifySecret("x", "md5$abc"), SecretHashError);
    await assert.rejects(hashSecret("x", { log2N: 4, r: 8, p: 1 }), SecretHashError);
  });

  it("spends work and answers false for unknown principals", async () => {
    assert.equal(await verifyAgainstDummy("anything"), false);
  });
});
