import assert from "node:assert/strict";
import { CryptoClientError } from "../../src/clients/crypto-service/client.ts";

/** Awaits `promise`, which must reject with a CryptoClientError of `code`; returns that error. */
export async function rejectsWithCryptoCode(
  promise: Promise<unknown>,
  code: string,
): Promise<CryptoClientError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof CryptoClientError, `expected CryptoClientError, got ${String(error)}`);
    assert.equal(error.code, code);
    return error;
  }
  assert.fail(`expected ${code}`);
}
