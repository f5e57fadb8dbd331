import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import type { TokenVerifier } from "../../../src/pipeline/token-cache.ts";
import { startWorld, type World } from "./world.ts";

/**
 * A Check that arrives while a fresh sidecar warms up is answered before the warm-up's
 * CPU-bound parts (the decision path's self-checks, the start-up collection, the gRPC
 * self-probe) go on (decision 3141): readiness still waits for all of them, so `/readyz` says
 * ready no earlier than before — only later, once the Checks in flight are answered.
 */

async function readyz(port: number): Promise<{ status: number; checks: Record<string, boolean> }> {
  const response = await fetch(`http://127.0.0.1:${port}/readyz`);
  const body = (await response.json()) as { checks: Record<string, boolean> };
  return { status: response.status, checks: body.checks };
}

const NETWORK_STEPS = ["jwks", "credentials", "catalogs", "policy_changes"] as const;

describe("a Check in flight during the start-up warm-up", () => {
  let world: World;

  before(async () => {
    world = await startWorld();
  });
  after(() => world.close());

  test("holds the warm-up's last steps (so ready) until it is answered, then is allowed", async () => {
    const issuer = world.context.config.issuer;
    const real = createJwtVerifier({
      issuer,
      audience: "authority",
      jwks: `${issuer}/.well-known/jwks.json`,
    });
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered: () => void = () => undefined;
    const inFlight = new Promise<void>((resolve) => {
      entered = resolve;
    });
    // The first Check's token verification waits for the test: the Check stays in flight.
    const verifier: TokenVerifier = {
      warm: async () => {
        await real.warm?.();
      },
      verify: async (token) => {
        entered();
        await held;
        return real.verify(token);
      },
    };
    // Deadlines far longer than the test holds the Check (the wait is bounded by them).
    const handle = await world.startSidecar({ verifier, decisionTimeoutMs: 60_000 });
    const first = handle.check({});
    await inFlight;
    // Every network step succeeds meanwhile; the gRPC self-probe (after the decision path's
    // warm-up) waits for the Check, and so /readyz is not 200.
    let ready = await readyz(handle.ports.metrics);
    while (!NETWORK_STEPS.every((name) => ready.checks[name])) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      ready = await readyz(handle.ports.metrics);
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    ready = await readyz(handle.ports.metrics);
    assert.equal(ready.checks.grpc_serving, false, JSON.stringify(ready.checks));
    assert.equal(ready.status, 503);
    release();
    const answer = await first;
    assert.equal(answer.status.code, 0, JSON.stringify(answer.denied_response ?? {}));
    assert.equal(await handle.sidecar.whenReady(10_000), true);
    assert.equal((await readyz(handle.ports.metrics)).status, 200);
    await handle.close();
  });
});
