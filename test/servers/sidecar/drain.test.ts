import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { type SidecarProcess, startSidecarProcess } from "../../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, type Decoded, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import { readyzStatus, sidecarProcessEnv } from "./sidecar-process.ts";
import { proxyRequest, startWorld, UPSTREAM_HOST, type World } from "./world.ts";

/**
 * The drain on SIGTERM (issue 28). When a pod terminates, the kubelet signals the sidecar while
 * Envoy (and the endpoints controller) still send it requests for a moment. The real
 * `authority sidecar` process, signalled with a Check in flight: `/readyz` turns 503, and still
 * the Check in flight, a Check on a connection opened after the signal and a proxy request are
 * all answered; the process exits only once the drain period is over, with the decision records
 * delivered. Before the drain, the process stopped accepting at once and exited within
 * milliseconds: the Check after the signal could not connect.
 *
 * Only lower bounds of time are asserted (the exit comes no earlier than the drain period):
 * they hold however slow the machine is. The drain is long enough for a loaded machine to send
 * its Checks inside it.
 */

const DRAIN_MS = 6000;

function check(grpcPort: number, token: string, id: string): Promise<Decoded> {
  const client = new Client(`127.0.0.1:${grpcPort}`, credentials.createInsecure());
  const request = envoyCheckRequest({
    method: "GET",
    path: "/orders/42",
    host: UPSTREAM_HOST,
    headers: { authorization: `Bearer ${token}` },
    contextExtensions: {},
    id,
  });
  return unary(client, checkMethod, request).finally(() => client.close());
}

async function auditedRequestIds(world: World): Promise<string[]> {
  const response = await fetch(`${world.authorityUrl}/admin/audit?kind=decision&transport=grpc`, {
    headers: { authorization: `Bearer ${world.tokens.admin}` },
  });
  assert.equal(response.status, 200);
  const { items } = (await response.json()) as { items: { requestId: string }[] };
  return items.map((item) => item.requestId);
}

describe("authority sidecar drains on SIGTERM", () => {
  let world: World;
  let dir: TempDir;
  let started: SidecarProcess | undefined;

  before(async () => {
    world = await startWorld();
    dir = await makeTempDir("drain-");
  });
  after(async () => {
    await started?.peer.kill();
    await dir?.cleanup();
    await world?.close();
  });

  it("stays not ready but answers in-flight and just-arriving requests, then exits", async () => {
    const env = await sidecarProcessEnv(world, dir.path, {
      AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: String(DRAIN_MS),
      AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS: "3000",
    });
    const sidecar = await startSidecarProcess(env);
    started = sidecar;
    await sidecar.untilReady();
    const run = randomBytes(4).toString("hex");
    assert.equal((await check(sidecar.ports.grpc, world.tokens.agent, `warm-${run}`)).status.code, 0);

    // In flight: a caller the sidecar has not seen (token, policy fetched from the authority).
    const inFlight = check(sidecar.ports.grpc, world.tokens.otherAgent, `in-flight-${run}`);
    const signalled = performance.now();
    process.kill(await sidecar.peer.pid, "SIGTERM");

    let status = await readyzStatus(sidecar.ports.metrics);
    while (status === 200) status = await readyzStatus(sidecar.ports.metrics);
    assert.equal(status, 503, "not ready once signalled");

    const arriving = await check(sidecar.ports.grpc, world.tokens.agent, `arriving-${run}`);
    assert.equal(arriving.status.code, 0, `a Check arriving during the drain: ${JSON.stringify(arriving)}`);
    const proxied = await proxyRequest(
      sidecar.ports.proxy,
      { target: `http://${UPSTREAM_HOST}/orders/42` },
      null,
    );
    assert.equal(proxied.status, 401, "the forward proxy still answers (no token: 401)");
    const answered = await inFlight;
    assert.ok(answered.status !== undefined, "the Check in flight was answered");

    const code = await sidecar.peer.exited;
    const tookMs = performance.now() - signalled;
    assert.equal(code, 0, sidecar.peer.output());
    assert.ok(
      tookMs >= DRAIN_MS,
      `exited ${tookMs.toFixed(0)} ms after SIGTERM, before the ${DRAIN_MS} ms drain`,
    );
    assert.match(sidecar.peer.output(), /"sidecar stopped"/);
    assert.doesNotMatch(sidecar.peer.output(), /"level":50/, "no error logged");
    const ids = await auditedRequestIds(world);
    for (const id of [`warm-${run}`, `in-flight-${run}`, `arriving-${run}`])
      assert.ok(ids.includes(id), `decision record of ${id} delivered before exit`);
    process.stderr.write(`drain: exited ${tookMs.toFixed(0)} ms after SIGTERM (drain ${DRAIN_MS} ms)\n`);
  });
});
