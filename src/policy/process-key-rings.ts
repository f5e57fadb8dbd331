import { KeyRing } from "../crypto/index.ts";
import type { KeyRingSource } from "./local-protector.ts";

/**
 * Key rings held only in this process's memory, generated on first use. For tests,
 * benchmarks and single-process embedded runs; durable deployments use the upstream
 * crypto service, whose rings are wrapped under a KEK in its store.
 */
export function createProcessKeyRings(): KeyRingSource & { rotate(owner: string): void } {
  const rings = new Map<string, KeyRing>();
  const ringFor = (owner: string): KeyRing => {
    let ring = rings.get(owner);
    if (ring === undefined) {
      ring = KeyRing.generate({ owner });
      rings.set(owner, ring);
    }
    return ring;
  };
  return {
    keyRing: async (owner) => ringFor(owner),
    rotate: (owner) => {
      ringFor(owner).rotate();
    },
  };
}
