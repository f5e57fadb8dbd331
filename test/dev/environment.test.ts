import assert from "node:assert/strict";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { type DevEnvironment, startDevEnvironment } from "../../src/dev/environment.ts";
import { DEV_IDP, DEV_SUBJECTS, type DevSubjectRole } from "../../src/dev/names.ts";
import type { DevPorts } from "../../src/dev/ports.ts";
import { createLogger } from "../../src/observability/logger.ts";
import type { PolicyRecord } from "../../src/policy/record.ts";
import { collections, storeKeys } from "../../src/store/model.ts";
import { connectWithOAuth } from "../helpers/mcp-oauth.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { makeTempDir } from "../helpers/temp-dir.ts";

const log = createLogger("dev-test", "silent");

async function clientToken(env: DevEnvironment, clientId: string, secret: string): Promise<string> {
  const answer = await fetch(env.urls.tokenEndpoint, {
    method: "POST",
    headers: {
      authorization: `Basic ${Buffer.from(`${clientId}:${secret}`).toString("base64")}`,
      "content-type": "application/x-www-form-urlencoded",
    },
    body: "grant_type=client_credentials",
  });
  assert.equal(answer.status, 200, `token for ${clientId}`);
  return ((await answer.json()) as { access_token: string }).access_token;
}

const subjectToken = (env: DevEnvironment, role: DevSubjectRole) =>
  clientToken(env, DEV_SUBJECTS[role].subjectId, env.secrets.subjectClientSecrets[role]);

async function authorize(env: DevEnvironment, token: string, method: string, path: string) {
  const answer = await fetch(`${env.urls.authority}/v1/authorize-invocation`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ capability_id: "customers", method, path }),
  });
  return { status: answer.status, body: (await answer.json()) as Record<string, unknown> };
}

describe("startDevEnvironment", () => {
  test("starts every service on free ports and seeds data that works over real HTTP", async () => {
    const dir = await makeTempDir("authority-dev-");
    after(() => dir.cleanup());
    const env = await startDevEnvironment({ stateDir: dir.path, ports: "ephemeral", log, sidecar: false });
    after(() => env.close());
    assert.deepEqual(env.warnings, []);

    // The credentials file: private, and it holds what the environment runs with.
    const file = join(dir.path, "dev-credentials.json");
    assert.equal(env.credentialsFile, file);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    const credentials = JSON.parse(await readFile(file, "utf8")) as Record<string, Record<string, unknown>>;
    assert.equal(credentials.admin?.password, env.secrets.adminPassword);
    assert.equal(credentials.partner?.partner_id, "acme");
    assert.equal(credentials.partner?.access_key, env.partnerKeys.accessKey);
    assert.equal(credentials.urls?.authority, env.urls.authority);
    assert.notEqual(credentials.binding, null);

    // An admin token from the password grant lists the seeded partner.
    const adminAnswer = await fetch(env.urls.tokenEndpoint, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "password",
        username: DEV_IDP.adminUsername,
        password: env.secrets.adminPassword,
      }),
    });
    assert.equal(adminAnswer.status, 200);
    const admin = ((await adminAnswer.json()) as { access_token: string }).access_token;
    const partners = await fetch(`${env.urls.authority}/partners`, {
      headers: { authorization: `Bearer ${admin}` },
    });
    assert.equal(partners.status, 200);
    const items = ((await partners.json()) as { items: Array<{ partner_id: string }> }).items;
    assert.ok(items.some((p) => p.partner_id === "acme"));

    // The agent is allowed some operations and denied the others.
    const agent = await subjectToken(env, "agent");
    const allowed = await authorize(env, agent, "GET", "/customers/cus_00000001");
    assert.equal(allowed.status, 200);
    assert.equal(allowed.body.status, "allowed");
    assert.equal(allowed.body.permissionId, "customers:get:/customers/{customerId}");
    const denied = await authorize(env, agent, "DELETE", "/customers/cus_00000001");
    assert.equal(denied.status, 403);
    assert.equal(denied.body.reason, "operation_not_allowed");

    // The other seeded subjects show the other policy states.
    assert.equal(
      (await authorize(env, await subjectToken(env, "revoked"), "GET", "/customers")).body.reason,
      "policy_revoked",
    );
    assert.equal(
      (await authorize(env, await subjectToken(env, "expired"), "GET", "/customers")).body.reason,
      "policy_expired",
    );
    assert.equal(
      (await authorize(env, await subjectToken(env, "unassigned"), "GET", "/customers")).body.reason,
      "missing_policy",
    );

    // An MCP client gets its own token from the dev IdP and sees the demo agent's tools.
    const oauth = await connectWithOAuth(`${env.urls.authority}/mcp`);
    try {
      const { tools } = await oauth.client.listTools();
      assert.ok(tools.length > 0, "the demo agent's policy allows some operations");
    } finally {
      await oauth.client.close();
    }

    // The sample API stands behind its API key.
    const direct = await fetch(`${env.sampleApi.url}/customers`);
    assert.equal(direct.status, 401);
    const keyed = await fetch(`${env.sampleApi.url}/customers`, {
      headers: { "x-api-key": env.secrets.upstreamApiKey },
    });
    assert.equal(keyed.status, 200);
  });

  test("a re-run on the same state directory reuses everything it seeded", async () => {
    const dir = await makeTempDir("authority-dev-rerun-");
    after(() => dir.cleanup());
    const ports: DevPorts = {
      authority: await stablePort(),
      managed: await stablePort(),
      crypto: await stablePort(),
      idp: await stablePort(),
      sampleApi: await stablePort(),
      sidecarGrpc: 0,
      sidecarProxy: 0,
      sidecarMetrics: 0,
    };
    const first = await startDevEnvironment({ stateDir: dir.path, ports, log, sidecar: false });
    let firstToken: string;
    let firstHead: number | undefined;
    let firstCredentials: Record<string, unknown>;
    try {
      assert.ok(first.report.created.length > 0);
      firstToken = await subjectToken(first, "agent");
      firstHead = (await first.store.get<PolicyRecord>(collections.policies, storeKeys.policy("agent-demo")))
        ?.head;
      firstCredentials = { ...first.credentials, generated_at: undefined };
    } finally {
      await first.close();
    }

    const second = await startDevEnvironment({ stateDir: dir.path, ports, log, sidecar: false });
    after(() => second.close());
    assert.deepEqual(second.report.created, []);
    assert.deepEqual(second.report.updated, []);
    assert.ok(second.report.unchanged.includes("partner acme"));
    assert.deepEqual(second.warnings, []);
    // Same secrets, keys, workload client and URLs: the file is the same but for its date.
    assert.deepEqual({ ...second.credentials, generated_at: undefined }, firstCredentials);
    const head = (await second.store.get<PolicyRecord>(collections.policies, storeKeys.policy("agent-demo")))
      ?.head;
    assert.equal(head, firstHead);
    // A token from the first run still works: the IdP's signing keys and issuer persisted.
    const allowed = await authorize(second, firstToken, "GET", "/customers");
    assert.equal(allowed.body.status, "allowed");
  });

  test("refuses options it cannot use", async () => {
    await assert.rejects(
      startDevEnvironment({ stateDir: "", ports: "ephemeral", log }),
      (error: Error) => error.name === "DevEnvironmentOptionsError",
    );
    await assert.rejects(
      startDevEnvironment({ stateDir: "/tmp/x", ports: "random" as "ephemeral", log }),
      (error: Error) => error.name === "DevEnvironmentOptionsError",
    );
  });
});
