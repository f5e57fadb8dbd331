import assert from "node:assert/strict";
import { createCipheriv } from "node:crypto";
import { describe, it } from "node:test";
import {
  baseModeInputs,
  deriveKeyAndNonce,
  hpkeSuiteId,
  keySchedule,
  keyScheduleContext,
  labeledExpand,
} from "../../src/crypto/hpke.ts";

// RFC 9180 Appendix A.1.1: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, mode_base.
const hex = (text: string) => Buffer.from(text, "hex");
const suiteId = hpkeSuiteId(0x0020, 0x0001, 0x0001);
const sharedSecret = hex("fe0e18c9f024ce43799ae393c7e8fe8fce9d218875e8227b0187c04e7d2ea1fc");
const info = hex("4f6465206f6e2061204772656369616e2055726e");

describe("HPKE key schedule (RFC 9180 A.1.1 test vector)", () => {
  const context = keyScheduleContext(suiteId, info);
  const schedule = keySchedule({ suiteId, sharedSecret, context, keyLength: 16, nonceLength: 12 });

  it("derives key_schedule_context", () => {
    assert.equal(
      context.toString("hex"),
      "00725611c9d98c07c03f60095cd32d400d8347d45ed67097bbad50fc56da742d07" +
        "cb6cffde367bb0565ba28bb02c90744a20f5ef37f30523526106f637abb05449",
    );
  });

  it("derives secret, key and base_nonce", () => {
    assert.equal(
      schedule.secret.toString("hex"),
      "12fff91991e93b48de37e7daddb52981084bd8aa64289c3788471d9a9712f397",
    );
    assert.equal(schedule.key.toString("hex"), "4531685d41d65f03dc48f6b8302c05b0");
    assert.equal(schedule.baseNonce.toString("hex"), "56d890e5accaaf011cff4b7d");
  });

  it("the one-call HKDF derivation gives the same key and base_nonce", () => {
    const inputs = baseModeInputs({ suiteId, context, keyLength: 16, nonceLength: 12 });
    const { key, baseNonce } = deriveKeyAndNonce(sharedSecret, inputs);
    assert.equal(key.toString("hex"), "4531685d41d65f03dc48f6b8302c05b0");
    assert.equal(baseNonce.toString("hex"), "56d890e5accaaf011cff4b7d");
    const suite1 = hpkeSuiteId(0x0041, 0x0001, 0x0002);
    const other = keyScheduleContext(suite1, Buffer.from("another info"));
    const secret = Buffer.alloc(32, 0x5a);
    const reference = keySchedule({
      suiteId: suite1,
      sharedSecret: secret,
      context: other,
      keyLength: 32,
      nonceLength: 12,
    });
    const fast = deriveKeyAndNonce(
      secret,
      baseModeInputs({ suiteId: suite1, context: other, keyLength: 32, nonceLength: 12 }),
    );
    assert.deepEqual(fast.key, reference.key);
    assert.deepEqual(fast.baseNonce, reference.baseNonce);
  });

  it("derives exporter_secret with LabeledExpand", () => {
    assert.equal(
      labeledExpand(suiteId, schedule.secret, "exp", context, 32).toString("hex"),
      "45ff1c2e220db587171952c0592d5f5ebe103f1561a2614e38f2ffd47e99e3f8",
    );
  });

  it("seals sequence 0 to the published ciphertext", () => {
    const cipher = createCipheriv("aes-128-gcm", schedule.key, schedule.baseNonce);
    cipher.setAAD(hex("436f756e742d30"));
    const ct = Buffer.concat([
      cipher.update(hex("4265617574792069732074727574682c20747275746820626561757479")),
      cipher.final(),
      cipher.getAuthTag(),
    ]);
    assert.equal(
      ct.toString("hex"),
      "f938558b5d72f1a23810b4be2ab4f84331acc02fc97babc53a52ae8218a355a96d8770ac83d07bea87e13c512a",
    );
  });
});
