/**
 * Crypto micro-benchmarks: median time per call of seal, open, signEncrypt and
 * decryptVerify (sync, and the thread-pool async forms) on 1 KB, 10 KB and 100 KB payloads,
 * with keys generated and imported once; then the async forms' throughput with 16 calls in
 * flight (the managed API's load shape: 1 KB payloads, concurrency 16).
 */

import { randomBytes } from "node:crypto";
import { open, seal } from "../src/crypto/kem.ts";
import { KeyRing } from "../src/crypto/key-ring.ts";
import {
  decryptVerify,
  decryptVerifyAsync,
  signEncrypt,
  signEncryptAsync,
} from "../src/crypto/sign-encrypt.ts";

export interface BenchResult {
  name: string;
  medianMs: number;
  opsPerSec: number;
}

function median(samples: number[]): number {
  samples.sort((a, b) => a - b);
  const middle = Math.floor(samples.length / 2);
  return samples.length % 2 === 1
    ? (samples[middle] ?? 0)
    : ((samples[middle - 1] ?? 0) + (samples[middle] ?? 0)) / 2;
}

function result(name: string, medianMs: number, opsPerSec = 1000 / medianMs): BenchResult {
  return { name, medianMs: Number(medianMs.toFixed(4)), opsPerSec: Math.round(opsPerSec) };
}

function measure(name: string, iterations: number, run: () => unknown): BenchResult {
  for (let i = 0; i < Math.min(20, iterations); i++) run();
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    run();
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return result(name, median(samples));
}

/** One call at a time: the latency of a single async call, thread-pool hop included. */
async function measureAsync(
  name: string,
  iterations: number,
  run: () => Promise<unknown>,
): Promise<BenchResult> {
  for (let i = 0; i < Math.min(20, iterations); i++) await run();
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    await run();
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return result(name, median(samples));
}

/** `concurrency` calls in flight until `total` have finished: median latency and throughput. */
async function measureConcurrent(
  name: string,
  total: number,
  concurrency: number,
  run: () => Promise<unknown>,
): Promise<BenchResult> {
  await Promise.all(Array.from({ length: concurrency }, () => run()));
  const samples: number[] = [];
  let started = 0;
  const begin = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (started < total) {
        started++;
        const start = process.hrtime.bigint();
        await run();
        samples.push(Number(process.hrtime.bigint() - start) / 1e6);
      }
    }),
  );
  const elapsedMs = Number(process.hrtime.bigint() - begin) / 1e6;
  return result(name, median(samples), (samples.length * 1000) / elapsedMs);
}

export async function benchCrypto(options: { iterations?: number } = {}): Promise<BenchResult[]> {
  const iterations = options.iterations ?? 200;
  const alice = KeyRing.generate({ owner: "bench-alice" });
  const bob = KeyRing.generate({ owner: "bench-bob" });
  const recipient = bob.recipient();
  const signer = alice.signer();
  const verifyOptions = {
    recipientKeys: bob.recipientKeys,
    signerKeys: alice.signerKeys,
    expectedPurpose: "bench",
  };
  const results: BenchResult[] = [];
  for (const [label, size] of [
    ["1KB", 1024],
    ["10KB", 10 * 1024],
    ["100KB", 100 * 1024],
  ] as const) {
    const plaintext = randomBytes(size);
    const sealInput = { recipientPublicKey: recipient.publicKey, recipientKeyId: recipient.keyId, plaintext };
    const sealed = seal(sealInput);
    const signInput = { signer, recipient, purpose: "bench", plaintext };
    const signed = signEncrypt(signInput);
    results.push(measure(`seal ${label}`, iterations, () => seal(sealInput)));
    results.push(
      measure(`open ${label}`, iterations, () =>
        open({ recipientPrivateKey: bob.current.kem.privateKey, envelope: sealed }),
      ),
    );
    results.push(measure(`signEncrypt ${label}`, iterations, () => signEncrypt(signInput)));
    results.push(measure(`decryptVerify ${label}`, iterations, () => decryptVerify(signed, verifyOptions)));
    results.push(
      await measureAsync(`signEncryptAsync ${label}`, iterations, () => signEncryptAsync(signInput)),
    );
    results.push(
      await measureAsync(`decryptVerifyAsync ${label}`, iterations, () =>
        decryptVerifyAsync(signed, verifyOptions),
      ),
    );
  }
  const small = { signer, recipient, purpose: "bench", plaintext: randomBytes(1024) };
  const smallSigned = signEncrypt(small);
  results.push(
    await measureConcurrent("signEncryptAsync 1KB x16 in flight", iterations * 5, 16, () =>
      signEncryptAsync(small),
    ),
  );
  results.push(
    await measureConcurrent("decryptVerifyAsync 1KB x16 in flight", iterations * 20, 16, () =>
      decryptVerifyAsync(smallSigned, verifyOptions),
    ),
  );
  return results;
}

if (import.meta.main) {
  console.table(await benchCrypto());
}
