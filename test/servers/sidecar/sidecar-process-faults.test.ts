import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { egressAllowValue } from "../../helpers/egress.ts";
import { type FaultProxy, startFaultProxy } from "../../helpers/fault-proxy.ts";
import { type SidecarProcess, startSidecarProcess } from "../../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { checkMethod, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import {
  AGENT,
  ALLOWED,
  CAPABILITY,
  eventually,
  proxyRequest,
  startWorld,
  UPSTREAM_HOST,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

/**
 * Issue 26, item 1, with the real `authority sidecar` process (its composition root, its
 * journal, its process guard) against a real authority, IdP and upstream:
 *
 * - a JSON body nested 100,000 levels deep sent through the forward proxy (60,000 in an ext_authz
 *   Check: its message bound is 256 KiB) is refused with 400 `input_too_complex` — before, the process died of an uncaught
 *   RangeError — the process keeps serving, and the refusal has its record at the authority;
 * - an allowed call forwarded (credential injected) while the authority cannot take records,
 *   then SIGKILL: before, its record died with the process; now the next process ships it from
 *   the journal (docs/decisions/2501-decision-records-written-ahead.md).
 */

const DEPTH = 100_000;
const deepObject = `${'{"a":'.repeat(DEPTH)}1${"}".repeat(DEPTH)}`;
const deepArray = `${"[".repeat(DEPTH)}${"]".repeat(DEPTH)}`;

interface AuditRow {
  readonly requestId?: string;
  readonly decision?: string;
  readonly reason?: string | null;
  readonly transport?: string;
}

describe("a real sidecar process under hostile bodies and SIGKILL", () => {
  let world: World;
  let dir: TempDir;
  let authority: FaultProxy;
  const started: SidecarProcess[] = [];

  /** The sidecar's decision records at the authority, by request id. */
  const auditRows = async (): Promise<Map<string, AuditRow>> => {
    const response = await fetch(`${world.authorityUrl}/admin/audit?kind=decision&limit=500`, {
      headers: { authorization: `Bearer ${world.tokens.admin}` },
    });
    assert.equal(response.status, 200);
    const { items } = (await response.json()) as { items: AuditRow[] };
    return new Map(items.map((item) => [item.requestId ?? "", item]));
  };
  const recordOf = async (requestId: string): Promise<AuditRow | undefined> => {
    let found: AuditRow | undefined;
    await eventually(async () => {
      found = (await auditRows()).get(requestId);
      return found !== undefined;
    }, 15_000);
    return found;
  };

  const start = async (journal: string): Promise<SidecarProcess> => {
    const tokenFile = join(dir.path, "sidecar-token");
    await writeFile(tokenFile, world.tokens.sidecar, { mode: 0o600 });
    const sidecar = await startSidecarProcess({
      // Through a fault proxy: the test can make the authority unreachable for the sidecar alone.
      AUTHORITY_URL: authority.url,
      AUTHORITY_ISSUER: world.context.config.issuer,
      AUTHORITY_AUDIENCE: "authority",
      AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
      AUTHORITY_SERVICE_IDENTITY: world.context.config.serviceIdentity,
      AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [UPSTREAM_HOST]: CAPABILITY }),
      AUTHORITY_EGRESS_ALLOW: egressAllowValue(world.upstream.url),
      AUTHORITY_SIDECAR_JOURNAL_DIR: journal,
      // Decided from the cache while the authority is cut off (the SIGKILL case).
      AUTHORITY_SIDECAR_POLICY_TTL_MS: "3600000",
      AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS: "5000",
      AUTHORITY_SIDECAR_PROXY_DECISION_TIMEOUT_MS: "5000",
    });
    started.push(sidecar);
    await sidecar.untilReady();
    return sidecar;
  };

  const post = (sidecar: SidecarProcess, requestId: string, body: string) =>
    proxyRequest(
      sidecar.ports.proxy,
      {
        method: "POST",
        target: "/orders",
        host: UPSTREAM_HOST,
        headers: { "content-type": "application/json", "x-request-id": requestId },
        body,
      },
      world.tokens.agent,
    );

  before(async () => {
    world = await startWorld();
    await world.assign(AGENT, { allowed_permission_ids: [...ALLOWED, `${CAPABILITY}:post:/orders`] });
    dir = await makeTempDir("sidecar-process-faults-");
    authority = await startFaultProxy(Number(new URL(world.authorityUrl).port));
  });
  after(async () => {
    for (const sidecar of started) await sidecar.peer.stop(2000);
    await authority?.close();
    await dir?.cleanup();
    await world?.close();
  });

  it("a body nested 100,000 levels deep is a 400 with its record, on the proxy and on ext_authz; the process keeps serving", async () => {
    const sidecar = await start(join(dir.path, "journal-deep"));
    for (const [id, body] of [
      ["deep-object-proxy", deepObject],
      ["deep-array-proxy1", deepArray],
    ] as const) {
      const reply = await post(sidecar, id, body);
      assert.equal(reply.status, 400, reply.body.toString("utf8").slice(0, 200));
      assert.equal(reply.json().reason, "input_too_complex");
      assert.ok(await sidecar.healthy(), `the process died:\n${sidecar.peer.output()}`);
    }

    const client = new Client(`127.0.0.1:${sidecar.ports.grpc}`, credentials.createInsecure());
    try {
      const check = envoyCheckRequest({
        method: "POST",
        path: "/orders",
        host: UPSTREAM_HOST,
        headers: { authorization: `Bearer ${world.tokens.agent}`, "content-type": "application/json" },
        contextExtensions: {},
        id: "deep-object-grpc1",
      }) as { attributes: { request: { http: Record<string, unknown> } } };
      // Within the gRPC server's 256 KiB message bound, and deeper than any serializer survives.
      check.attributes.request.http.body = `${"[".repeat(60_000)}${"]".repeat(60_000)}`;
      const answer = await unary(client, checkMethod, check);
      assert.equal(answer.status.code, 3, "INVALID_ARGUMENT");
      assert.equal(JSON.parse(answer.denied_response.body).reason, "input_too_complex");
    } finally {
      client.close();
    }
    assert.ok(await sidecar.healthy(), `the process died:\n${sidecar.peer.output()}`);

    // Still deciding and forwarding, with the credential.
    const ok = await post(sidecar, "after-deep-bodies", '{"note":"ok"}');
    assert.equal(ok.status, 200);
    assert.equal(world.upstream.seen.at(-1)?.headers["x-api-key"], UPSTREAM_SECRET);

    for (const id of ["deep-object-proxy", "deep-array-proxy1", "deep-object-grpc1"]) {
      const row = await recordOf(id);
      assert.deepEqual([row?.decision, row?.reason], ["denied", "input_too_complex"], id);
    }
    assert.equal((await recordOf("after-deep-bodies"))?.decision, "allowed");
    assert.doesNotMatch(sidecar.peer.output(), /"level":(50|60)/, "no error or fatal logged");
  });

  it("an allowed call forwarded just before SIGKILL has its record at the authority after the restart", async () => {
    const journal = join(dir.path, "journal-kill");
    const first = await start(journal);
    // Warm: the policy, catalog and credentials are cached, and this record is delivered.
    assert.equal((await post(first, "warm-before-kill", '{"note":"warm"}')).status, 200);
    assert.ok(await recordOf("warm-before-kill"));

    // The authority cannot take records any more; the sidecar keeps deciding from its cache.
    authority.mode = "reset";
    authority.dropAll();
    const seenBefore = world.upstream.seen.length;
    const reply = await post(first, "allowed-then-killed", '{"note":"then SIGKILL"}');
    assert.equal(reply.status, 200);
    const forwarded = world.upstream.seen.slice(seenBefore);
    assert.equal(forwarded.length, 1);
    assert.equal(forwarded[0]?.headers["x-api-key"], UPSTREAM_SECRET, "the upstream got the credential");
    assert.equal((await auditRows()).get("allowed-then-killed"), undefined, "not delivered before the kill");

    await first.peer.kill();
    authority.mode = "pass";
    const second = await start(journal);
    const row = await recordOf("allowed-then-killed");
    assert.deepEqual([row?.decision, row?.transport], ["allowed", "proxy"]);
    assert.match(second.peer.output(), /decision records of an earlier process found in the journal/);
  });
});
