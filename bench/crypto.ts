/**
 * Crypto micro-benchmarks: median time per call of seal, open, signEncrypt and
 * decryptVerify on 1 KB and 100 KB payloads, with keys generated and imported once.
 */

import { randomBytes } from "node:crypto";
import { open, seal } from "../src/crypto/kem.ts";
import { KeyRing } from "../src/crypto/key-ring.ts";
import { decryptVerify, signEncrypt } from "../src/crypto/sign-encrypt.ts";

export interface BenchResult {
  name: string;
  medianMs: number;
  opsPerSec: number;
}

function measure(name: string, iterations: number, run: () => unknown): BenchResult {
  for (let i = 0; i < Math.min(20, iterations); i++) run();
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    run();
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  samples.sort((a, b) => a - b);
  const middle = Math.floor(samples.length / 2);
  const medianMs =
    samples.length % 2 === 1
      ? (samples[middle] ?? 0)
      : ((samples[middle - 1] ?? 0) + (samples[middle] ?? 0)) / 2;
  return { name, medianMs: Number(medianMs.toFixed(4)), opsPerSec: Math.round(1000 / medianMs) };
}

export async function benchCrypto(options: { iterations?: number } = {}): Promise<BenchResult[]> {
  const iterations = options.iterations ?? 200;
  const alice = KeyRing.generate({ owner: "bench-alice" });
  const bob = KeyRing.generate({ owner: "bench-bob" });
  const recipient = bob.recipient();
  const signer = alice.signer();
  const results: BenchResult[] = [];
  for (const [label, size] of [
    ["1KB", 1024],
    ["100KB", 100 * 1024],
  ] as const) {
    const plaintext = randomBytes(size);
    const sealInput = { recipientPublicKey: recipient.publicKey, recipientKeyId: recipient.keyId, plaintext };
    const sealed = seal(sealInput);
    const signed = signEncrypt({ signer, recipient, purpose: "bench", plaintext });
    const verifyOptions = {
      recipientKeys: bob.recipientKeys,
      signerKeys: alice.signerKeys,
      expectedPurpose: "bench",
    };
    results.push(measure(`seal ${label}`, iterations, () => seal(sealInput)));
    results.push(
      measure(`open ${label}`, iterations, () =>
        open({ recipientPrivateKey: bob.current.kem.privateKey, envelope: sealed }),
      ),
    );
    results.push(
      measure(`signEncrypt ${label}`, iterations, () =>
        signEncrypt({ signer, recipient, purpose: "bench", plaintext }),
      ),
    );
    results.push(measure(`decryptVerify ${label}`, iterations, () => decryptVerify(signed, verifyOptions)));
  }
  return results;
}

if (import.meta.main) {
  console.table(await benchCrypto());
}
