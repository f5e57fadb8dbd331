import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { createLogger } from "../../src/observability/logger.ts";
import { createMetricsRegistry } from "../../src/observability/metrics.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import { buildSidecar } from "../../src/servers/sidecar/build.ts";
import { resolveSidecarConfig } from "../../src/servers/sidecar/config.ts";
import type { Sidecar } from "../../src/servers/sidecar/sidecar.ts";
import { egressAllowValue } from "../helpers/egress.ts";
import { createExtAuthzClient, type ExtAuthzClient } from "../helpers/ext-authz-client.ts";
import { type PeerProcess, startPeerProcess } from "../helpers/peer-process.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

/**
 * Issue 26, items 10 and 11: once a revoke call has answered 200, no sidecar allows that
 * subject again, whatever Redis or the authority does meanwhile.
 *
 * The real authority (`authority serve`, its own process, so it can be stalled with SIGSTOP),
 * a real redis-server (stalled, killed, restarted empty or from an older snapshot, its keys
 * rolled back by writing them directly), and four sidecars built by their composition root
 * (`buildSidecar` from the `authority sidecar` configuration) under steady Checks. Each fault
 * has its own subject; every Check of that subject sent after its revoke call answered is
 * counted, and the count of allows must be zero. Nothing here asserts a latency: a loaded
 * machine may turn allows into denials or 503s, never the other way round.
 */

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PARTNER = "acme";
const CAPABILITY = "orders";
const HOST = "orders.internal";
const SERVICE_IDENTITY = "revocation-faults";
const SIDECARS = 4;
const CHECK = { method: "GET", path: "/orders/42" } as const;
const DEFAULTS = { host: HOST, capability: CAPABILITY };
/** How long Checks keep going after each fault has run its course. */
const SETTLE_MS = 2500;

const silent = createLogger("revocation-faults", "silent");
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const ORDERS_API = {
  openapi: "3.1.0",
  info: { title: "Orders", version: "1.0.0" },
  paths: {
    "/orders/{orderId}": {
      parameters: [{ name: "orderId", in: "path", required: true, schema: { type: "string" } }],
      get: { operationId: "getOrder", responses: { "200": { description: "ok" } } },
    },
  },
};

interface Outcome {
  readonly sidecar: string;
  readonly sentAt: number;
  readonly allowed: boolean;
  readonly status: number;
}

interface RunningSidecar {
  readonly name: string;
  readonly sidecar: Sidecar;
  readonly client: ExtAuthzClient;
}

/** The authority as a process of its own: `node bin/authority.ts serve`. */
async function startAuthorityProcess(
  env: Record<string, string>,
): Promise<{ peer: PeerProcess; url: string }> {
  const peer = startPeerProcess({
    command: process.execPath,
    args: [
      join(ROOT, "bin/authority.ts"),
      "serve",
      "--listen",
      "127.0.0.1:0",
      "--policy-protection",
      "embedded",
      "--init-kek",
      "true",
    ],
    env: { PATH: process.env.PATH ?? "", ...env },
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    const line = peer
      .output()
      .split("\n")
      .find((text) => text.includes('"msg":"authority service listening"'));
    const url = line === undefined ? undefined : /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(line)?.[1];
    if (url !== undefined) return { peer, url };
    if (!peer.running || Date.now() > deadline) {
      await peer.kill();
      throw new Error(`authority serve did not start:\n${peer.output()}`);
    }
    await sleep(50);
  }
}

describe("a revocation that answered 200 is never undone by a fault (four sidecars, real Redis, real authority)", () => {
  let dir: TempDir;
  let idp: IdpServer;
  let redis: RedisServerHandle;
  let redisClient: Redis;
  let authority: PeerProcess;
  let authorityPid: number;
  let authorityUrl: string;
  let adminToken: string;
  let sidecarEnv: Record<string, string>;
  const sidecars: RunningSidecar[] = [];
  const extra: RunningSidecar[] = [];
  const victims = [
    "victim-healthy",
    "victim-redis-stall",
    "victim-redis-snapshot",
    "victim-redis-kill",
    "victim-rollback",
    "victim-authority-stall",
    "victim-authority-stall-revoke",
  ];
  const tokens = new Map<string, string>();

  const admin = async (method: string, path: string, body?: unknown): Promise<Response> => {
    const response = await fetch(`${authorityUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000),
    });
    return response;
  };
  const expectOk = async (response: Promise<Response>, what: string): Promise<void> => {
    const answered = await response;
    const text = await answered.text();
    assert.ok(answered.status >= 200 && answered.status < 300, `${what}: ${answered.status} ${text}`);
  };

  const startSidecar = async (name: string, options: { waitReady: boolean }): Promise<RunningSidecar> => {
    const config = resolveSidecarConfig({ flags: {}, env: sidecarEnv });
    const sidecar = await buildSidecar(config, {
      logger: silent,
      registry: createMetricsRegistry({ collectDefaults: false }),
    });
    const ports = await sidecar.start();
    if (options.waitReady) assert.equal(await sidecar.whenReady(30_000), true, `${name} ready`);
    return { name, sidecar, client: createExtAuthzClient(ports.grpc) };
  };
  const closeSidecar = async (running: RunningSidecar): Promise<void> => {
    running.client.close();
    await running.sidecar.close({ graceMs: 500 });
  };

  const check = async (running: RunningSidecar, subject: string) => {
    const answer = await running.client.check(
      { ...CHECK, token: tokens.get(subject) ?? null },
      DEFAULTS,
      5000,
    );
    return answer;
  };

  /** Until every sidecar allows `subject` (after a fault, once things recovered). */
  const allowedEverywhere = async (subject: string, on: readonly RunningSidecar[]): Promise<void> => {
    for (const running of on) {
      const deadline = Date.now() + 60_000;
      for (;;) {
        if ((await check(running, subject)).allowed) break;
        assert.ok(Date.now() < deadline, `${running.name} never allowed ${subject}`);
        await sleep(50);
      }
    }
  };

  /** Steady Checks of `subject` on `on` (plus any fresh sidecar added to `extra`) until stopped. */
  const steadyChecks = (subject: string, on: readonly RunningSidecar[]) => {
    const outcomes: Outcome[] = [];
    let running = true;
    const loop = async (target: RunningSidecar): Promise<void> => {
      while (running) {
        const sentAt = performance.now();
        try {
          const answer = await check(target, subject);
          outcomes.push({ sidecar: target.name, sentAt, allowed: answer.allowed, status: answer.status });
        } catch {
          // A sidecar being closed: not an allow.
        }
        await sleep(10);
      }
    };
    const loops = on.map(loop);
    const started = new Set<RunningSidecar>(on);
    return {
      outcomes,
      /** Sends the same Checks to a sidecar started later. */
      add(target: RunningSidecar) {
        if (started.has(target)) return;
        started.add(target);
        loops.push(loop(target));
      },
      async stop() {
        running = false;
        await Promise.all(loops);
      },
    };
  };

  /** Revokes through the real admin route; the moment it answered (performance.now()). */
  const revoke = async (subject: string): Promise<{ status: number; answeredAt: number }> => {
    const response = await admin("POST", `/partners/${PARTNER}/caab/subjects/${subject}/policy/revoke`);
    await response.arrayBuffer();
    return { status: response.status, answeredAt: performance.now() };
  };

  /** The allows among the Checks sent once the revoke had answered, by sidecar. */
  const allowsAfter = (outcomes: readonly Outcome[], answeredAt: number) => {
    const late = outcomes.filter((outcome) => outcome.sentAt >= answeredAt);
    const allows = late.filter((outcome) => outcome.allowed);
    return {
      checked: late.length,
      allows: allows.length,
      bySidecar: Object.fromEntries(
        [...new Set(allows.map((outcome) => outcome.sidecar))].map((name) => [
          name,
          allows.filter((outcome) => outcome.sidecar === name).length,
        ]),
      ),
    };
  };

  /**
   * One fault around one revocation: Checks run on every sidecar from before the revoke until
   * SETTLE_MS after the fault's last step; then every sidecar must allow the control subject
   * again (recovery), and no Check sent after the revoke answered may have been allowed.
   */
  const revokeUnder = async (
    subject: string,
    fault: {
      readonly before?: () => Promise<void>;
      readonly during?: (revoking: Promise<{ status: number; answeredAt: number }>) => Promise<void>;
      readonly after?: (load: ReturnType<typeof steadyChecks>) => Promise<void>;
    },
  ): Promise<void> => {
    await allowedEverywhere(subject, sidecars);
    const load = steadyChecks(subject, sidecars);
    try {
      await sleep(200);
      await fault.before?.();
      const revoking = revoke(subject);
      await fault.during?.(revoking);
      const { status, answeredAt } = await revoking;
      assert.equal(status, 200, "the revoke call answered 200");
      await fault.after?.(load);
      await sleep(SETTLE_MS);
      await load.stop();
      const counted = allowsAfter(load.outcomes, answeredAt);
      assert.ok(counted.checked > 0, "Checks were sent after the revoke answered");
      // Not only no allow: once the fault is over, every sidecar denies the revoked subject.
      const denying = new Set(
        load.outcomes.filter((o) => o.sentAt >= answeredAt && o.status === 403).map((o) => o.sidecar),
      );
      for (const running of sidecars)
        assert.ok(denying.has(running.name), `${running.name} denied ${subject} (403)`);
      assert.deepEqual(
        { allows: counted.allows, bySidecar: counted.bySidecar },
        { allows: 0, bySidecar: {} },
        `${subject}: allows after the revoke answered (${counted.checked} Checks counted)`,
      );
    } finally {
      await load.stop();
      for (const running of extra.splice(0)) await closeSidecar(running);
    }
    await allowedEverywhere("control", sidecars);
  };

  before(async () => {
    dir = await makeTempDir("revocation-faults-");
    idp = await createIdpServer({ audience: "authority" });
    const issuer = await idp.listen();
    redis = await startRedisServer({ args: ["--dir", dir.path, "--dbfilename", "snapshot.rdb"] });
    redisClient = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    redisClient.on("error", () => undefined);
    await redisClient.connect();
    const upstream = "http://127.0.0.1:18080";
    const started = await startAuthorityProcess({
      AUTHORITY_STATE_DIR: join(dir.path, "authority"),
      AUTHORITY_ISSUER: issuer,
      AUTHORITY_AUDIENCE: "authority",
      AUTHORITY_REDIS_URL: redis.url,
      AUTHORITY_SERVICE_IDENTITY: SERVICE_IDENTITY,
      AUTHORITY_EGRESS_ALLOW: egressAllowValue(upstream),
      AUTHORITY_LOG_LEVEL: "info",
    });
    authority = started.peer;
    authorityUrl = started.url;
    authorityPid = await authority.pid;
    adminToken = (await idp.issueToken({ subject: "root-admin", roles: ["admin"], lifetimeSec: 3600 }))
      .accessToken;

    await expectOk(admin("POST", "/partners", { partner_id: PARTNER, name: "Acme" }), "partner");
    await expectOk(
      admin("POST", `/partners/${PARTNER}/api-specs/import-openapi`, {
        capability_id: CAPABILITY,
        name: "Orders",
        document: ORDERS_API,
        upstream_base_url: upstream,
        auth_profile_ref: "none",
      }),
      "import",
    );
    for (const subject of ["control", ...victims]) {
      await expectOk(
        admin("POST", `/partners/${PARTNER}/users`, {
          subject_id: subject,
          subject_type: "agent",
          display_name: subject,
        }),
        `subject ${subject}`,
      );
      await expectOk(
        admin("PUT", `/partners/${PARTNER}/caab/subjects/${subject}/policies/${CAPABILITY}`, {
          allowed_permission_ids: [`${CAPABILITY}:get:/orders/{orderId}`],
          ttl_seconds: 3600,
          auth_profile_ref: "none",
        }),
        `assignment of ${subject}`,
      );
      tokens.set(subject, (await idp.issueToken({ subject, lifetimeSec: 3600 })).accessToken);
    }

    const tokenFile = join(dir.path, "sidecar-token");
    const cacheKeyFile = join(dir.path, "cache-key");
    const sidecarToken = await idp.issueToken({
      subject: "sidecar-1",
      roles: ["sidecar"],
      // scoped like an injected sidecar: its partner and its pod's capability
      claims: { partner_id: PARTNER },
      scopes: [`authority/sidecar.capability:${CAPABILITY}`],
      lifetimeSec: 3600,
    });
    await writeFile(tokenFile, sidecarToken.accessToken, { mode: 0o600 });
    await writeFile(cacheKeyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    sidecarEnv = {
      AUTHORITY_URL: authorityUrl,
      AUTHORITY_ISSUER: issuer,
      AUTHORITY_AUDIENCE: "authority",
      AUTHORITY_SERVICE_IDENTITY: SERVICE_IDENTITY,
      AUTHORITY_REDIS_URL: redis.url,
      AUTHORITY_SIDECAR_CACHE_KEY_FILE: cacheKeyFile,
      AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
      AUTHORITY_SIDECAR_GRPC_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_PROXY_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_METRICS_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [HOST]: CAPABILITY }),
      // A cold first decision on a loaded machine may take longer than Envoy's 200 ms.
      AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS: "3000",
    };
    for (let i = 1; i <= SIDECARS; i++)
      sidecars.push(await startSidecar(`sidecar-${i}`, { waitReady: true }));
    await allowedEverywhere("control", sidecars);
  });

  after(async () => {
    if (authorityPid !== undefined) process.kill(authorityPid, "SIGCONT");
    redis?.resume();
    for (const running of [...extra, ...sidecars]) await closeSidecar(running).catch(() => undefined);
    redisClient?.disconnect();
    await authority?.stop(5000);
    await redis?.stop();
    await idp?.close();
    await dir?.cleanup();
  });

  test("healthy: the revocation holds on every sidecar from the moment the call answered", async () => {
    await revokeUnder("victim-healthy", {});
  });

  test("Redis stalled (SIGSTOP) during the revoke and resumed seconds later: no allow", async () => {
    await revokeUnder("victim-redis-stall", {
      before: async () => redis.pause(),
      after: async () => {
        await sleep(3000);
        redis.resume();
      },
    });
  });

  test("Redis killed after the revoke and restarted from a snapshot taken before it (an older head and entry): no allow", async () => {
    await revokeUnder("victim-redis-snapshot", {
      before: async () => {
        await redisClient.call("SAVE");
      },
      after: async () => {
        await redis.kill();
        await redis.start();
        // Later restarts start empty.
        await rm(join(dir.path, "snapshot.rdb"), { force: true });
      },
    });
  });

  test("Redis killed before the revoke (the change cannot be published) and restarted empty: no allow", async () => {
    await revokeUnder("victim-redis-kill", {
      before: async () => {
        await redis.kill();
      },
      after: async () => {
        await sleep(1000);
        await redis.start();
      },
    });
  });

  test("a Redis writer rolls back the head and the sealed entry after the revoke: no allow, fresh sidecars included", async () => {
    const subject = "victim-rollback";
    let head: string | null = null;
    let entry: string | null = null;
    await revokeUnder(subject, {
      before: async () => {
        head = await redisClient.get(`authority:policy-head:${subject}`);
        entry = await redisClient.get(`authority:sidecar:policy:${subject}`);
        assert.ok(head !== null && entry !== null, "the sidecars cached the policy in Redis");
      },
      after: async (load) => {
        await sleep(300);
        await redisClient.set(`authority:policy-head:${subject}`, head ?? "");
        await redisClient.set(`authority:sidecar:policy:${subject}`, entry ?? "");
        for (let i = 1; i <= 3; i++) {
          const fresh = await startSidecar(`fresh-${i}`, { waitReady: true });
          extra.push(fresh);
          load.add(fresh);
        }
      },
    });
  });

  test("the authority stalled (SIGSTOP) after the revoke, Redis rolled back meanwhile, a fresh sidecar started: no allow", async () => {
    const subject = "victim-authority-stall";
    let head: string | null = null;
    let entry: string | null = null;
    await revokeUnder(subject, {
      before: async () => {
        head = await redisClient.get(`authority:policy-head:${subject}`);
        entry = await redisClient.get(`authority:sidecar:policy:${subject}`);
        assert.ok(head !== null && entry !== null, "the sidecars cached the policy in Redis");
      },
      after: async (load) => {
        process.kill(authorityPid, "SIGSTOP");
        try {
          await redisClient.set(`authority:policy-head:${subject}`, head ?? "");
          await redisClient.set(`authority:sidecar:policy:${subject}`, entry ?? "");
          const fresh = await startSidecar("fresh-during-stall", { waitReady: false });
          extra.push(fresh);
          load.add(fresh);
          await sleep(2500);
        } finally {
          process.kill(authorityPid, "SIGCONT");
        }
      },
    });
  });

  test("the authority stalled (SIGSTOP) while the revoke was being answered: no allow once it answered", async () => {
    await revokeUnder("victim-authority-stall-revoke", {
      during: async () => {
        await sleep(50);
        process.kill(authorityPid, "SIGSTOP");
        await sleep(2000);
        process.kill(authorityPid, "SIGCONT");
      },
    });
  });
});
