/**
 * Issue 31, deliverable 6: two `authority serve` replicas on one PostgreSQL and one Redis, two
 * `authority sidecar` processes reaching the replicas through a balancer (a Kubernetes
 * Service: each connection to a live replica), load through both replicas
 * (authorize-invocation, binding invoke with idempotency keys) and Checks through both
 * sidecars; one replica SIGKILLed mid-load. Counted, never timed:
 *
 * - no decision record lost: every answered authorize, invoke and Check has its record in
 *   PostgreSQL (matched by the request id the client sent), and a decision nobody heard the
 *   answer of (in flight to the killed replica) has at most one;
 * - no idempotency key executed twice: the upstream counts executions per key, and every key
 *   whose call died with the replica is retried on the survivor;
 * - revocation still bounded: a revoke through the surviving replica answers, and no Check
 *   sent on either sidecar after it answered is allowed.
 *
 * A loaded machine may turn answers into 503s or 409s (those are counted as decisions too),
 * never into a lost record or a second execution.
 */
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import { egressAllowValue } from "../helpers/egress.ts";
import { createExtAuthzClient, type ExtAuthzClient } from "../helpers/ext-authz-client.ts";
import { type PeerProcess, startPeerProcess } from "../helpers/peer-process.ts";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";
import { type RedisServerHandle, startRedisServer } from "../helpers/redis-server.ts";
import { type SidecarProcess, startSidecarProcess } from "../helpers/sidecar-process.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { itemsOpenApi, startTestUpstream, type TestUpstream } from "../helpers/upstream-api.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PARTNER = "acme";
const CAPABILITY = "items";
const HOST = "items.internal";
const BINDING = "acme-app";
const AUDIENCE = "authority";
const USER_AUDIENCE = "acme-api";
const TENANT = "acme-tenant";
const SERVICE_IDENTITY = "replicas-test";
const GET_ITEM = `${CAPABILITY}:get:/items/{itemId}`;
/** Load runs this long before and after the kill (counts decide, not these times). */
const LOAD_BEFORE_KILL_MS = 2500;
const LOAD_AFTER_KILL_MS = 2500;
/** Each answer waits up to this long: a slow machine answers late, not wrongly. */
const CALL_TIMEOUT_MS = 20_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Replica {
  readonly name: string;
  readonly peer: PeerProcess;
  readonly url: string;
}

async function startReplica(name: string, env: Record<string, string>): Promise<Replica> {
  const peer = startPeerProcess({
    command: process.execPath,
    args: [
      join(ROOT, "bin/authority.ts"),
      "serve",
      "--listen",
      "127.0.0.1:0",
      "--policy-protection",
      "embedded",
    ],
    env: { PATH: process.env.PATH ?? "", ...env },
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const line = peer
      .output()
      .split("\n")
      .find((text) => text.includes('"msg":"authority service listening"'));
    const url = line === undefined ? undefined : /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(line)?.[1];
    if (url !== undefined) return { name, peer, url };
    if (!peer.running || Date.now() > deadline) {
      await peer.kill();
      throw new Error(`${name} did not start:\n${peer.output()}`);
    }
    await sleep(50);
  }
}

/** A TCP balancer (a Service): each connection goes to the next replica that accepts it. */
async function startBalancer(backends: () => readonly number[]): Promise<{ port: number; close(): void }> {
  let next = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => undefined);
    client.pause();
    const ports = backends();
    const attempt = (tried: number): void => {
      const port = ports[(next + tried) % ports.length];
      if (port === undefined || tried >= ports.length) {
        client.destroy();
        return;
      }
      const upstream = connect({ host: "127.0.0.1", port });
      upstream.once("error", () => {
        if (upstream.connecting) attempt(tried + 1);
        else client.destroy();
      });
      upstream.once("connect", () => {
        next = (next + tried + 1) % ports.length;
        sockets.add(upstream);
        upstream.on("close", () => {
          sockets.delete(upstream);
          client.destroy();
        });
        client.on("close", () => upstream.destroy());
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
    };
    attempt(0);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("balancer has no port");
  return {
    port: address.port,
    close() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

describe("two authority replicas on one PostgreSQL and one Redis, one killed mid-load", () => {
  let dir: TempDir;
  let postgres: PostgresServerHandle;
  let redis: RedisServerHandle;
  let idp: IdpServer;
  let partnerIdp: IdpServer;
  let upstream: TestUpstream;
  let balancer: { port: number; close(): void };
  const replicas: Replica[] = [];
  const sidecars: { name: string; process: SidecarProcess; client: ExtAuthzClient }[] = [];
  let adminToken: string;
  let agentToken: string;
  let victimToken: string;
  let workloadToken: string;
  let userAssertion: string;

  const call = async (
    base: string,
    method: string,
    path: string,
    options: { token?: string; body?: unknown; headers?: Record<string, string> },
  ): Promise<{ status: number; json: Record<string, unknown> }> => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }),
        ...(options.body === undefined ? {} : { "content-type": "application/json" }),
        ...options.headers,
      },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
    const text = await response.text();
    return {
      status: response.status,
      json: text === "" ? {} : (JSON.parse(text) as Record<string, unknown>),
    };
  };
  const admin = async (method: string, path: string, body: unknown, what: string) => {
    const reply = await call(replicas[0]?.url ?? "", method, path, { token: adminToken, body });
    assert.ok(
      reply.status >= 200 && reply.status < 300,
      `${what}: ${reply.status} ${JSON.stringify(reply.json)}`,
    );
    return reply.json;
  };

  before(async () => {
    dir = await makeTempDir("replicas-");
    [postgres, redis, upstream] = await Promise.all([
      startPostgresServer(),
      startRedisServer(),
      startTestUpstream(),
    ]);
    idp = await createIdpServer({ audience: AUDIENCE });
    const issuer = await idp.listen();
    partnerIdp = await createIdpServer({ audience: USER_AUDIENCE });
    const partnerIssuer = await partnerIdp.listen();
    const env = {
      AUTHORITY_STORE_URL: postgres.url,
      AUTHORITY_REDIS_URL: redis.url,
      AUTHORITY_KEK: randomBytes(32).toString("base64"),
      AUTHORITY_ISSUER: issuer,
      AUTHORITY_AUDIENCE: AUDIENCE,
      AUTHORITY_SERVICE_IDENTITY: SERVICE_IDENTITY,
      AUTHORITY_EGRESS_ALLOW: egressAllowValue(upstream.url, partnerIssuer),
      AUTHORITY_LOG_LEVEL: "info",
    };
    // One after the other: the first creates the key rings, the second finds them.
    for (const name of ["replica-a", "replica-b"])
      replicas.push(await startReplica(name, { ...env, AUTHORITY_STATE_DIR: join(dir.path, name) }));
    const livePorts = () =>
      replicas.filter((replica) => replica.peer.running).map((replica) => Number(new URL(replica.url).port));
    balancer = await startBalancer(livePorts);

    adminToken = (await idp.issueToken({ subject: "root-admin", roles: ["admin"], lifetimeSec: 3600 }))
      .accessToken;
    await admin("POST", "/partners", { partner_id: PARTNER, name: "Acme" }, "partner");
    await admin(
      "PUT",
      `/partners/${PARTNER}/caab/auth-profiles/items-key`,
      { type: "static", kind: "api_key", in: "header", name: "x-api-key", secret: randomUUID() },
      "auth profile",
    );
    await admin(
      "POST",
      `/partners/${PARTNER}/api-specs/import-openapi`,
      {
        capability_id: CAPABILITY,
        name: "Items",
        document: itemsOpenApi(),
        upstream_base_url: upstream.url,
        auth_profile_ref: "items-key",
      },
      "import",
    );
    for (const subject of ["agent-1", "victim"]) {
      await admin(
        "POST",
        `/partners/${PARTNER}/users`,
        { subject_id: subject, subject_type: "agent", display_name: subject },
        `subject ${subject}`,
      );
      await admin(
        "PUT",
        `/partners/${PARTNER}/caab/subjects/${subject}/policies/${CAPABILITY}`,
        { allowed_permission_ids: [GET_ITEM], ttl_seconds: 3600 },
        `policy of ${subject}`,
      );
    }
    agentToken = (await idp.issueToken({ subject: "agent-1", lifetimeSec: 3600 })).accessToken;
    victimToken = (await idp.issueToken({ subject: "victim", lifetimeSec: 3600 })).accessToken;

    await admin(
      "POST",
      `/partners/${PARTNER}/bindings`,
      {
        binding_id: BINDING,
        issuer: partnerIdp.issuer,
        jwks_url: partnerIdp.jwksUri,
        audience: USER_AUDIENCE,
        tenant_claim: "tenant",
        tenant_value: TENANT,
        auth_profile_ref: "items-key",
      },
      "binding",
    );
    const client = await admin(
      "POST",
      `/v1/bindings/${BINDING}/workload-clients`,
      { name: "agent-runtime", scopes: ["authority/bindings.invoke"] },
      "workload client",
    );
    const mapped = await admin(
      "POST",
      `/v1/bindings/${BINDING}/subjects`,
      { external_subject: "user-1", display_name: "User" },
      "mapping",
    );
    await admin(
      "POST",
      `/v1/bindings/${BINDING}/apis`,
      {
        subject_id: (mapped.mapping as { subject_id: string }).subject_id,
        capability_id: CAPABILITY,
        allowed_permission_ids: [GET_ITEM],
        ttl_seconds: 3600,
      },
      "binding apis",
    );
    const issued = await call(replicas[0]?.url ?? "", "POST", `/v1/bindings/${BINDING}/token`, {
      body: {
        grant_type: "client_credentials",
        client_id: (client.client as { client_id: string }).client_id,
        client_secret: client.client_secret,
        scope: "authority/bindings.invoke",
      },
    });
    assert.equal(issued.status, 200, JSON.stringify(issued.json));
    workloadToken = String(issued.json.access_token);
    userAssertion = (
      await partnerIdp.issueToken({
        subject: "user-1",
        audience: USER_AUDIENCE,
        tenant: TENANT,
        lifetimeSec: 3600,
      })
    ).accessToken;

    const tokenFile = join(dir.path, "sidecar-token");
    const cacheKeyFile = join(dir.path, "cache-key");
    const sidecarToken = await idp.issueToken({
      subject: "sidecar-1",
      roles: ["sidecar"],
      claims: { partner_id: PARTNER },
      scopes: [`authority/sidecar.capability:${CAPABILITY}`],
      lifetimeSec: 3600,
    });
    await writeFile(tokenFile, sidecarToken.accessToken, { mode: 0o600 });
    await writeFile(cacheKeyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    for (const name of ["sidecar-1", "sidecar-2"]) {
      const process = await startSidecarProcess({
        AUTHORITY_URL: `http://127.0.0.1:${balancer.port}`,
        AUTHORITY_ISSUER: issuer,
        AUTHORITY_AUDIENCE: AUDIENCE,
        AUTHORITY_SERVICE_IDENTITY: SERVICE_IDENTITY,
        AUTHORITY_REDIS_URL: redis.url,
        AUTHORITY_STATE_DIR: join(dir.path, name),
        AUTHORITY_SIDECAR_CACHE_KEY_FILE: cacheKeyFile,
        AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
        AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [HOST]: CAPABILITY }),
        AUTHORITY_SIDECAR_DECISION_TIMEOUT_MS: "3000",
      });
      await process.untilReady();
      sidecars.push({ name, process, client: createExtAuthzClient(process.ports.grpc) });
    }
  });

  after(async () => {
    for (const sidecar of sidecars) {
      sidecar.client.close();
      await sidecar.process.peer.stop(5000);
    }
    balancer?.close();
    for (const replica of replicas) await replica.peer.stop(5000);
    await idp?.close();
    await partnerIdp?.close();
    await upstream?.close();
    await redis?.stop();
    await postgres?.stop();
    await dir?.cleanup();
  });

  /**
   * Decision records in PostgreSQL by request id (JSON text in authority_logs): how many
   * distinct records (ids), and how many copies (a sidecar record whose delivery was cut by the
   * kill is shipped again under the same id: at least once, decision 2501).
   */
  const recordsByRequestId = async (): Promise<Map<string, { ids: number; copies: number }>> => {
    const client = new pg.Client({ connectionString: postgres.url });
    await client.connect();
    try {
      const rows = await client.query<{ request_id: string; ids: string; copies: string }>(
        `SELECT value::json->>'requestId' AS request_id, count(DISTINCT value::json->>'id') AS ids,
                count(*) AS copies
         FROM authority_logs WHERE log = 'audit' AND value::json->>'kind' = 'decision' GROUP BY 1`,
      );
      return new Map(
        rows.rows.map((row) => [row.request_id, { ids: Number(row.ids), copies: Number(row.copies) }]),
      );
    } finally {
      await client.end();
    }
  };

  test("no record lost, no key executed twice, a revoke through the survivor holds on both sidecars", async () => {
    const [victimReplica, survivor] = replicas as [Replica, Replica];
    // Every request the clients sent, by the request id it carried; answered or not.
    const answered = new Map<string, { kind: string; status: number }>();
    const unanswered = new Map<string, string>();
    const keyOutcomes = new Map<string, number[]>();
    const checks = { allowed: 0, denied: 0 };
    let running = true;

    const authorizeLoop = async (replica: Replica): Promise<void> => {
      for (let i = 0; running; i++) {
        const requestId = `authz-${replica.name}-${i}-${randomUUID()}`;
        try {
          const reply = await call(replica.url, "POST", "/v1/authorize-invocation", {
            token: agentToken,
            body: { capability_id: CAPABILITY, method: "GET", path: i % 5 === 0 ? "/items" : `/items/${i}` },
            headers: { "x-request-id": requestId },
          });
          answered.set(requestId, { kind: "authorize", status: reply.status });
        } catch {
          unanswered.set(requestId, replica.name);
          if (!replica.peer.running) return;
        }
      }
    };
    /** One key: sent to `first`; when that call dies with its replica, the same key to the survivor. */
    const invokeKey = async (first: Replica, key: string): Promise<void> => {
      const statuses: number[] = [];
      keyOutcomes.set(key, statuses);
      for (const replica of [first, survivor]) {
        const requestId = `invoke-${key}-${statuses.length}`;
        try {
          const reply = await call(replica.url, "POST", `/v1/bindings/${BINDING}/invoke`, {
            token: workloadToken,
            body: { capability_id: CAPABILITY, method: "GET", path: `/items/${key}` },
            headers: {
              "x-request-id": requestId,
              "idempotency-key": key,
              "x-authority-user-assertion": userAssertion,
            },
          });
          statuses.push(reply.status);
          // 409 `conflict`: the key is still claimed (by the call that died with its replica);
          // answered before any decision, so no record. Not retried further: the claim holds
          // the key until its lease ends (120 s).
          if (reply.status === 409 && reply.json.error === "conflict") return;
          answered.set(requestId, { kind: "invoke", status: reply.status });
          return;
        } catch {
          unanswered.set(requestId, replica.name);
          statuses.push(0);
        }
      }
    };
    const invokeLoop = async (replica: Replica): Promise<void> => {
      for (let i = 0; running; i++) await invokeKey(replica, `k-${replica.name}-${i}`);
    };
    const checkLoop = async (sidecar: (typeof sidecars)[number]): Promise<void> => {
      for (let i = 0; running; i++) {
        const requestId = `check-${sidecar.name}-${i}-${randomUUID()}`;
        const answer = await sidecar.client.check(
          { method: "GET", path: `/items/${i}`, token: agentToken, headers: { "x-request-id": requestId } },
          { host: HOST, capability: CAPABILITY },
          CALL_TIMEOUT_MS,
        );
        if (answer.status === 0) unanswered.set(requestId, sidecar.name);
        else answered.set(requestId, { kind: "check", status: answer.status });
        if (answer.allowed) checks.allowed++;
        else checks.denied++;
      }
    };

    const loops = [
      ...replicas.flatMap((replica) => [authorizeLoop(replica), invokeLoop(replica)]),
      ...sidecars.map(checkLoop),
    ];
    await sleep(LOAD_BEFORE_KILL_MS);
    await victimReplica.peer.kill();
    await sleep(LOAD_AFTER_KILL_MS);
    running = false;
    await Promise.all(loops);

    // Revocation through the survivor, Checks on both sidecars meanwhile.
    let checking = true;
    const afterRevoke: { sidecar: string; sentAt: number; allowed: boolean; status: number }[] = [];
    const victimChecks = sidecars.map(async (sidecar) => {
      while (checking) {
        const sentAt = performance.now();
        const answer = await sidecar.client.check(
          { method: "GET", path: "/items/1", token: victimToken },
          { host: HOST, capability: CAPABILITY },
          CALL_TIMEOUT_MS,
        );
        afterRevoke.push({ sidecar: sidecar.name, sentAt, allowed: answer.allowed, status: answer.status });
        await sleep(10);
      }
    });
    await sleep(300);
    const revoke = await call(
      survivor.url,
      "POST",
      `/partners/${PARTNER}/caab/subjects/victim/policy/revoke`,
      {
        token: adminToken,
      },
    );
    const revokedAt = performance.now();
    assert.equal(revoke.status, 200, JSON.stringify(revoke.json));
    // Until each sidecar has denied the victim (its lease bound), at least 1.5 s.
    const deadline = Date.now() + 30_000;
    await sleep(1500);
    while (
      !sidecars.every((s) =>
        afterRevoke.some((o) => o.sidecar === s.name && o.sentAt >= revokedAt && o.status === 403),
      )
    ) {
      assert.ok(Date.now() < deadline, "every sidecar denied the revoked subject");
      await sleep(100);
    }
    checking = false;
    await Promise.all(victimChecks);
    const lateAllows = afterRevoke.filter((o) => o.sentAt >= revokedAt && o.allowed);
    assert.deepEqual(lateAllows, [], "no Check sent after the revoke answered was allowed");

    // Every answered decision's record is in PostgreSQL; the sidecars ship theirs to the survivor.
    const decisions = [...answered];
    let records = new Map<string, { ids: number; copies: number }>();
    const shippedBy = Date.now() + 30_000;
    for (;;) {
      records = await recordsByRequestId();
      const missing = decisions.filter(([id]) => !records.has(id));
      if (missing.length === 0) break;
      assert.ok(
        Date.now() < shippedBy,
        `${missing.length} answered decisions have no record, e.g. ${JSON.stringify(missing.slice(0, 5))}`,
      );
      await sleep(250);
    }
    const duplicated = decisions.filter(([id]) => (records.get(id)?.ids ?? 0) > 1);
    assert.deepEqual(duplicated, [], "one record per answered decision");
    const orphanRecords = [...unanswered.keys()].filter((id) => (records.get(id)?.ids ?? 0) > 1);
    assert.deepEqual(orphanRecords, [], "at most one record per unanswered request");
    // A batch re-sent after its reply was lost (decision 2751): its records stored once.
    const copiesOfOneRecord = [...records].filter(([, r]) => r.copies > r.ids).map(([id]) => id);
    assert.deepEqual(copiesOfOneRecord, [], "no record stored twice under one id");

    // Each key executed at most once; a key answered 200 exactly once.
    const executions = new Map<string, number>();
    for (const hit of upstream.hits) {
      const key = /^\/items\/(k-.+)$/.exec(hit.path)?.[1];
      if (key !== undefined) executions.set(key, (executions.get(key) ?? 0) + 1);
    }
    const twice = [...executions].filter(([, n]) => n > 1);
    assert.deepEqual(twice, [], "no idempotency key executed twice");
    for (const [key, statuses] of keyOutcomes) {
      if (statuses.includes(200)) assert.equal(executions.get(key), 1, `${key} (${statuses}) executed once`);
    }

    const counts = {
      answered: decisions.length,
      unanswered: unanswered.size,
      byKind: Object.fromEntries(
        ["authorize", "invoke", "check"].map((kind) => [
          kind,
          decisions.filter(([, a]) => a.kind === kind).length,
        ]),
      ),
      keys: keyOutcomes.size,
      retriedKeys: [...keyOutcomes.values()].filter((s) => s.length > 1).length,
      heldByTheDead: [...keyOutcomes.values()].filter((s) => s.at(-1) === 409).length,
      executions: [...executions.values()].reduce((a, b) => a + b, 0),
      checks,
    };
    console.log(`replicas: ${JSON.stringify(counts)}`);
    for (const kind of ["authorize", "invoke", "check"])
      assert.ok((counts.byKind[kind] ?? 0) > 0, `${kind} decisions were made`);
  });
});
