import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { type SidecarProcess, startSidecarProcess } from "../../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import { sidecarProcessEnv } from "./sidecar-process.ts";
import { startWorld, UPSTREAM_HOST, UPSTREAM_SECRET, type World } from "./world.ts";

/**
 * No 503 on the first Check after `/readyz` says ready (issue 16, item 6). The scenario, as a
 * pod starts: a fresh `authority sidecar` process (nothing compiled, nothing cached) against a
 * real, running authority and identity provider; `/readyz` polled until 200; at once, the first
 * allowed Check. Repeated with a new process each time.
 *
 * Two things are asserted of each first Check:
 * - it is allowed, with the upstream credential: readiness waited for everything the decision
 *   needs (JWKS, the sidecar's own credentials, a serving gRPC port);
 * - the CPU time the sidecar process spent on it (from /proc, so a busy machine does not change
 *   it much) is within Envoy's 200 ms ext_authz deadline. The process-wide cold work of a first
 *   decision (schema compilation, the protobuf codecs, the gRPC server path) is done before
 *   ready (warm-decision.ts, grpc-self-probe.ts); without that it cost 200-330 ms of CPU here
 *   (counted until Envoy gave up), and Envoy got 503 upstream_unavailable.
 * The decision deadline is raised to 2 s for this test so the CPU of the whole decision is
 * counted (at 200 ms, a slow first decision is cut off, and its CPU with it); wall time on a
 * machine shared by several test runs measures the machine, and is only reported.
 */

const ROUNDS = 4;
/** Envoy's ext_authz timeout in deploy/envoy/envoy.yaml and the chart, and the sidecar's default deadline. */
const ENVOY_DEADLINE_MS = 200;
const CLOCK_TICK_MS = 10; // USER_HZ is 100 on Linux

/** CPU time (user + system) of a process so far, from /proc/<pid>/stat. */
async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  // fields after the parenthesised command name; utime and stime are fields 14 and 15
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * CLOCK_TICK_MS;
}
describe("the first Check after /readyz says ready, from a fresh sidecar process", () => {
  let world: World;
  let dir: TempDir;
  const children: SidecarProcess[] = [];

  before(async () => {
    world = await startWorld();
    dir = await makeTempDir("first-check-");
    // A pod's sidecar starts against a running authority: its routes have served before. One
    // decision through an in-process sidecar puts this authority in that state, so the rounds
    // measure a fresh sidecar, not the authority's own first requests.
    const warmer = await world.startSidecar();
    assert.equal(await warmer.sidecar.whenReady(30_000), true);
    assert.equal((await warmer.check({})).status.code, 0);
    await warmer.close();
  });
  after(async () => {
    for (const child of children) await child.peer.stop();
    await dir?.cleanup();
    await world?.close();
  });

  it(`is allowed and costs less CPU than Envoy's deadline, every time (${ROUNDS} fresh processes)`, async () => {
    const env = await sidecarProcessEnv(world, dir.path, {
      AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS: "2000",
      AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: "0",
    });
    const firsts: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const started = await startSidecarProcess(env);
      children.push(started);
      await started.untilReady();
      const client = new Client(`127.0.0.1:${started.ports.grpc}`, credentials.createInsecure());
      const pid = await started.peer.pid;
      try {
        const cpuBefore = await cpuMs(pid);
        const began = performance.now();
        const response = await unary(
          client,
          checkMethod,
          envoyCheckRequest({
            method: "GET",
            path: "/orders/42",
            host: UPSTREAM_HOST,
            headers: { authorization: `Bearer ${world.tokens.agent}` },
            contextExtensions: {},
            id: `first-${round}-${randomBytes(4).toString("hex")}`,
          }),
        );
        const ms = performance.now() - began;
        const cpu = (await cpuMs(pid)) - cpuBefore;
        firsts.push(`${ms.toFixed(0)} ms (${cpu} ms CPU)`);
        assert.equal(
          response.status.code,
          0,
          `round ${round}: the first Check after ready was denied after ${ms.toFixed(0)} ms: ${String(
            response.denied_response?.body,
          )}`,
        );
        const set = Object.fromEntries(
          (response.ok_response.headers as { header: { key: string; value: string } }[]).map((h) => [
            h.header.key,
            h.header.value,
          ]),
        );
        assert.equal(set["x-api-key"], UPSTREAM_SECRET);
        assert.ok(
          cpu < ENVOY_DEADLINE_MS,
          `round ${round}: the first decision after ready took ${cpu} ms of CPU (Envoy waits ${ENVOY_DEADLINE_MS} ms)`,
        );
      } finally {
        client.close();
      }
      await started.peer.stop();
      assert.doesNotMatch(started.peer.output(), /"level":50/, "no error logged");
    }
    process.stderr.write(`first Check after ready: ${firsts.join(", ")}\n`);
  });

  // Issue 30: `/readyz` never says ready before a Check would meet its deadline. The sidecar
  // runs as shipped, with its 200 ms decision deadline (inside Envoy's 0.25 s); the client
  // waits for the answer. What is asserted is the answer, not a time: allowed, with the
  // upstream credential — the sidecar's deadline 503 here means readiness came too early.
  it(`is allowed within the shipped deadlines, every time (${ROUNDS} fresh processes)`, async () => {
    const env = await sidecarProcessEnv(world, dir.path, { AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: "0" });
    for (let round = 0; round < ROUNDS; round++) {
      const started = await startSidecarProcess(env);
      children.push(started);
      await started.untilReady();
      const client = new Client(`127.0.0.1:${started.ports.grpc}`, credentials.createInsecure());
      try {
        const response = await unary(
          client,
          checkMethod,
          envoyCheckRequest({
            method: "GET",
            path: "/orders/42",
            host: UPSTREAM_HOST,
            headers: { authorization: `Bearer ${world.tokens.agent}` },
            contextExtensions: {},
            id: `shipped-${round}-${randomBytes(4).toString("hex")}`,
          }),
        );
        assert.equal(
          response.status.code,
          0,
          `round ${round}: the first Check after ready was refused: ${String(response.denied_response?.body)}`,
        );
        const set = (response.ok_response.headers as { header: { key: string; value: string } }[]).map(
          (h) => [h.header.key, h.header.value],
        );
        assert.deepEqual(Object.fromEntries(set)["x-api-key"], UPSTREAM_SECRET);
      } finally {
        client.close();
      }
      await started.peer.stop();
      assert.doesNotMatch(started.peer.output(), /"level":50/, "no error logged");
    }
  });
});
