import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createLogCapture } from "../../../helpers/log-capture.ts";
import { type SidecarHandle, startWorld, type World } from "../world.ts";
import { checkMethod, unary, unaryRaw } from "./helpers.ts";

/**
 * Issue #16 item 9: one connection sending empty or malformed Checks wrote a warning per call
 * (about 900 lines a second). Such lines are now rate-limited, and every one is counted in
 * authority_sidecar_grpc_rejected_total.
 */
describe("a flood of malformed and empty Checks", () => {
  let world: World;
  let sidecar: SidecarHandle;
  const logs = createLogCapture("info");

  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar({ logger: logs.logger("sidecar") });
  });
  after(() => world.close());

  test("400 bad Checks on one connection: each denied, at most one warning per kind, all counted", async () => {
    const warningsBefore = logs.lines().length;
    for (let i = 0; i < 100; i++) {
      const empty = await Promise.all(
        Array.from({ length: 2 }, () => unary(sidecar.client, checkMethod, {})),
      );
      const malformed = await Promise.all(
        Array.from({ length: 2 }, () =>
          unaryRaw(sidecar.client, checkMethod.path, Uint8Array.from([0x0a, 0xff, 0xff, 0xff])),
        ),
      );
      for (const response of empty) assert.equal(response.denied_response.status.code, "BadRequest");
      for (const bytes of malformed) {
        const response = checkMethod.responseDeserialize(bytes) as {
          denied_response: { status: { code: string } };
        };
        assert.equal(response.denied_response.status.code, "BadRequest");
      }
    }
    const warnings = logs
      .lines()
      .slice(warningsBefore)
      .filter((line) => line.includes("without HTTP method/path"));
    assert.equal(warnings.length, 2, warnings.join("\n"));
    const reasons = warnings.map((line) => (JSON.parse(line) as { reason: string }).reason).sort();
    assert.deepEqual(reasons, ["incomplete", "malformed"]);

    const metrics = await sidecar.metricsText();
    assert.match(metrics, /^authority_sidecar_grpc_rejected_total\{reason="incomplete"\} 200$/m);
    assert.match(metrics, /^authority_sidecar_grpc_rejected_total\{reason="malformed"\} 200$/m);
  });
});
