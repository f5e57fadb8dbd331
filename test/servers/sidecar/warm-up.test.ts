import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  afterRequestsInFlight,
  createWarmUp,
  type WarmUpStep,
} from "../../../src/servers/sidecar/warm-up.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";

/**
 * The start-up checks' order: a step with `after` starts only once every step it names has
 * succeeded (the CPU-heavy decision-path warm-up must not run while the network steps wait on
 * their deadlines), and never when one of them keeps failing.
 */

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

describe("warm-up steps with prerequisites", () => {
  test("a step waits for the steps it names, then runs; readiness waits for all", async () => {
    const events: string[] = [];
    let releaseNetwork: () => void = () => undefined;
    const network = new Promise<void>((resolve) => {
      releaseNetwork = resolve;
    });
    const steps: WarmUpStep[] = [
      {
        name: "credentials",
        failure: "no",
        run: async () => {
          events.push("credentials:start");
          await network;
          events.push("credentials:done");
        },
      },
      {
        name: "decision_path",
        failure: "no",
        after: ["credentials"],
        run: async () => {
          events.push("decision_path:start");
        },
      },
      {
        name: "grpc_serving",
        failure: "no",
        after: ["decision_path"],
        run: async () => void events.push("grpc"),
      },
    ];
    const warmUp = createWarmUp({ steps, logger: createLogCapture().logger("t") });
    warmUp.start();
    await tick();
    assert.deepEqual(events, ["credentials:start"]);
    assert.deepEqual(warmUp.checks(), { credentials: false, decision_path: false, grpc_serving: false });
    releaseNetwork();
    assert.equal(await warmUp.whenDone(2000), true);
    assert.deepEqual(events, ["credentials:start", "credentials:done", "decision_path:start", "grpc"]);
    warmUp.stop();
  });

  test("a prerequisite that keeps failing keeps its dependants unstarted (and unready)", async () => {
    let dependantRuns = 0;
    const warmUp = createWarmUp({
      steps: [
        {
          name: "jwks",
          failure: "the JWKS could not be fetched",
          run: () => Promise.reject(new Error("down")),
        },
        { name: "decision_path", failure: "no", after: ["jwks"], run: async () => void dependantRuns++ },
      ],
      logger: createLogCapture().logger("t"),
      retryMs: 5,
      maxRetryMs: 10,
    });
    warmUp.start();
    assert.equal(await warmUp.whenDone(100), false);
    assert.equal(dependantRuns, 0);
    assert.deepEqual(warmUp.checks(), { jwks: false, decision_path: false });
    warmUp.stop();
  });

  test("naming a step that does not exist is refused at start", () => {
    const warmUp = createWarmUp({
      steps: [{ name: "a", failure: "no", after: ["b"], run: async () => undefined }],
      logger: createLogCapture().logger("t"),
    });
    assert.throws(() => warmUp.start(), /unknown step b/);
  });
});

describe("afterRequestsInFlight: the warm-up's CPU-bound parts after the requests in flight", () => {
  test("resolves at once when nothing is in flight", async () => {
    await afterRequestsInFlight(() => false, 60_000);
  });

  test("waits while requests are in flight and resolves once they are answered", async () => {
    let inFlight = 1;
    let resolved = false;
    const waiting = afterRequestsInFlight(() => inFlight > 0, 60_000).then(() => {
      resolved = true;
    });
    for (let turn = 0; turn < 10; turn++) await tick();
    assert.equal(resolved, false, "still waiting while a request is in flight");
    inFlight = 0;
    await waiting;
    assert.equal(resolved, true);
  });

  test("requests that never pause delay it by at most its bound", async () => {
    const started = performance.now();
    await afterRequestsInFlight(() => true, 20);
    assert.ok(performance.now() - started >= 20);
  });
});
