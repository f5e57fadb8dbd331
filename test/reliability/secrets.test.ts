/**
 * No secrets anywhere. Every secret of this system is a planted canary (service-account
 * password, partner api/access/secret keys, auth-profile secrets, an OAuth client secret,
 * plaintexts given to encrypt) or is watched as an exact string (generated workload client
 * secrets, every bearer token sent). The flows that handle them run end to end; then no
 * log line of any server, no response (apart from a decrypt returning its own plaintext),
 * and no byte of the stores at rest holds one. The whole test run's output is scanned by
 * scripts/scan-canaries.ts (tested here too).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { CANARY_PATTERN, canary, findCanaries } from "../helpers/canary.ts";
import { assertNoLeaks, newCounts, report } from "../helpers/suite-report.ts";
import {
  AGENT,
  AUTH_PROFILE,
  BINDING,
  CAPABILITY,
  MANAGED_USERNAME,
  PARTNER,
  type System,
  startSystem,
} from "../helpers/system.ts";
import { makeTempDir } from "../helpers/temp-dir.ts";

const counts = newCounts();

describe("no secrets anywhere", () => {
  let system: System;
  let agent: string;
  let admin: string;

  before(async () => {
    system = await startSystem({ protection: "upstream", managed: true, sidecar: {} });
    agent = await system.agentToken();
    admin = await system.adminToken();
  });
  after(() => system?.close());

  test("managed crypto API: plaintexts come back only from decrypt, to their owner", async () => {
    for (const operation of ["encrypt", "sign-encrypt"] as const) {
      const plaintext = canary(`plain-${operation}-`);
      const sealed = await system.managedCall(operation, { data: plaintext });
      assert.equal(sealed.status, 200, sealed.text);
      const encrypted: string = sealed.json.body.encrypted_data;
      const opened = await system.managedCall(
        operation === "encrypt" ? "decrypt" : "decrypt-verify",
        { encrypted_data: encrypted },
        { expectsSecrets: true },
      );
      assert.equal(opened.status, 200, opened.text);
      assert.equal(opened.json.body.decrypted_data, plaintext);
      // The other kind of ciphertext, and an altered one: refused without any plaintext.
      const wrongKind = await system.managedCall(operation === "encrypt" ? "decrypt-verify" : "decrypt", {
        encrypted_data: encrypted,
      });
      assert.equal(wrongKind.status, 400);
      // One character replaced by a different one (were it already "A", nothing would change).
      const other = encrypted[40] === "A" ? "B" : "A";
      const altered = await system.managedCall("decrypt", {
        encrypted_data: `${encrypted.slice(0, 40)}${other}${encrypted.slice(41)}`,
      });
      assert.equal(altered.status, 400);
    }
    // Wrong partner keys or password: refused, nothing echoed.
    const keys = system.secrets.partnerKeys;
    assert.ok(keys);
    const wrongKey = await system.managedCall(
      "encrypt",
      { data: canary("plain-") },
      { headers: { secret_key: canary("sk_") } },
    );
    assert.equal(wrongKey.status, 403);
    const wrongPassword = await system.managedCall(
      "encrypt",
      { data: canary("plain-") },
      { headers: { password: canary("pw-") } },
    );
    assert.equal(wrongPassword.status, 500);
    assert.equal(wrongPassword.json.details.reason, "invalid_idp_credentials");
    counts.attacksTried += 2;
  });

  test("identity provider: password and client-secret grants never echo or log the secret", async () => {
    const clientSecret = canary("cs-");
    await system.idp
      .server()
      .directory.addClient({ clientId: "reliability-client", clientSecret, scopes: ["crypto"] });
    const form = (params: Record<string, string>) => ({
      body: new URLSearchParams(params).toString(),
      headers: { "content-type": "application/x-www-form-urlencoded" },
    });
    const password = await system.call(
      "POST",
      system.idp.tokenEndpoint,
      form({ grant_type: "password", username: MANAGED_USERNAME, password: system.secrets.managedPassword }),
    );
    assert.equal(password.status, 200, password.text);
    const client = await system.call(
      "POST",
      system.idp.tokenEndpoint,
      form({
        grant_type: "client_credentials",
        client_id: "reliability-client",
        client_secret: clientSecret,
      }),
    );
    assert.equal(client.status, 200, client.text);
    const basic = Buffer.from(`reliability-client:${clientSecret}`).toString("base64");
    const viaBasic = await system.call("POST", system.idp.tokenEndpoint, {
      ...form({ grant_type: "client_credentials" }),
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: `Basic ${basic}` },
    });
    assert.equal(viaBasic.status, 200, viaBasic.text);
    const wrong: Array<Record<string, string>> = [
      { grant_type: "password", username: MANAGED_USERNAME, password: canary("pw-") },
      { grant_type: "client_credentials", client_id: "reliability-client", client_secret: canary("cs-") },
    ];
    for (const params of wrong) {
      const refused = await system.call("POST", system.idp.tokenEndpoint, form(params));
      assert.ok(refused.status === 400 || refused.status === 401, refused.text);
      counts.attacksTried++;
    }
  });

  test("auth-profile secrets are write-only: no view, list, diagnostics or answer shows them", async () => {
    const bearer = canary("bearer-");
    const oauthSecret = canary("oauth-");
    const put = async (id: string, body: unknown) =>
      system.call("PUT", `${system.url}/partners/${PARTNER}/caab/auth-profiles/${id}`, {
        token: admin,
        json: body,
      });
    assert.equal(
      (await put("static-bearer", { type: "static", kind: "bearer", secret: bearer })).status,
      201,
    );
    assert.equal(
      (
        await put("oauth-cc", {
          type: "oauth_client_credentials",
          token_url: "http://127.0.0.1:9/oauth2/token",
          client_id: "items-client",
          client_secret: oauthSecret,
          scopes: ["items.read"],
        })
      ).status,
      201,
    );
    const reads = [
      `/partners/${PARTNER}/caab/auth-profiles`,
      `/partners/${PARTNER}/caab/auth-profiles/static-bearer`,
      `/partners/${PARTNER}/caab/auth-profiles/oauth-cc`,
      `/partners/${PARTNER}/caab/auth-profiles/${AUTH_PROFILE}`,
      `/v1/bindings/${BINDING}/auth-profiles`,
      "/admin/diagnostics",
    ];
    for (const path of reads) {
      const reply = await system.call("GET", `${system.url}${path}`, { token: admin });
      assert.equal(reply.status, 200, `${path}: ${reply.text}`);
    }
    const view = await system.call(
      "GET",
      `${system.url}/partners/${PARTNER}/caab/auth-profiles/static-bearer`,
      { token: admin },
    );
    assert.equal(view.json.secret_present, true);
    assert.equal(view.json.secret, undefined);
  });

  test("executions: the upstream gets its credential, the caller never sees it nor its own token forwarded", async () => {
    const before = system.upstream.hits.length;
    const tools = (await system.mcp("tools/list", {}, agent)).json.result.tools as Array<{ name: string }>;
    const getItem = tools.find((tool) => tool.name.startsWith("getItem"))?.name;
    assert.ok(getItem);
    const replies = [
      await system.invoke({ capability_id: CAPABILITY, method: "GET", path: "/items/reflect" }),
      await system.mcp("tools/call", { name: getItem, arguments: { path: { itemId: "reflect" } } }, agent),
      await system.proxy("/items/reflect", agent),
    ];
    for (const reply of replies) {
      assert.equal(reply.status, 200, reply.text);
      assert.equal(
        reply.text.includes(system.secrets.upstreamApiKey),
        false,
        "the reflected credential is masked",
      );
    }
    const hits = system.upstream.hits.slice(before).filter((hit) => hit.path === "/items/reflect");
    assert.equal(hits.length, 3);
    for (const hit of hits) {
      assert.equal(
        hit.headers["x-api-key"],
        system.secrets.upstreamApiKey,
        "the upstream received the profile's key",
      );
      const forwarded = `${hit.headers.authorization ?? ""} ${hit.headers["proxy-authorization"] ?? ""} ${hit.headers["x-authority-user-assertion"] ?? ""}`;
      assert.equal(forwarded.includes(agent), false, "the caller's token never travels upstream");
      assert.equal(/eyJ[A-Za-z0-9_-]+\.eyJ/.test(forwarded), false, "no inbound JWT forwarded upstream");
    }
    // What the operations views record about those calls.
    for (const path of [
      "/admin/audit?limit=500",
      "/admin/mcp-audit?limit=500",
      `/v1/bindings/${BINDING}/invocations?limit=500`,
      "/admin/usage",
    ]) {
      assert.equal((await system.call("GET", `${system.url}${path}`, { token: admin })).status, 200, path);
    }
  });

  test("workload client secrets: shown once, then never again (lists, wrong-secret answers, logs)", async () => {
    const binding = system.binding;
    assert.ok(binding);
    const list = await system.call("GET", `${system.url}/v1/bindings/${BINDING}/workload-clients`, {
      token: admin,
    });
    assert.equal(list.status, 200);
    assert.equal(list.text.includes("secret_hash"), false);
    const wrong = await system.call("POST", `${system.url}/v1/bindings/${BINDING}/token`, {
      json: {
        grant_type: "client_credentials",
        client_id: binding.agent.clientId,
        client_secret: canary("wrong-"),
      },
    });
    assert.equal(wrong.status, 401);
    counts.attacksTried++;
  });

  test("at rest: no canary in any byte of the stores (SQLite files and their WAL)", async () => {
    await system.recorder.flush(10_000);
    const files = (await readdir(system.dir.path, { recursive: true })).map((name) =>
      join(system.dir.path, String(name)),
    );
    let scanned = 0;
    for (const file of files) {
      let bytes: Buffer;
      try {
        bytes = await readFile(file);
      } catch {
        continue; // a directory
      }
      scanned++;
      // latin1 keeps every byte as one character, so a canary in any encoding-neutral spot shows.
      assert.deepEqual(findCanaries(bytes.toString("latin1")), [], `${file} holds a planted secret in clear`);
    }
    assert.ok(scanned >= 2, `scanned ${scanned} files`);
  });

  test("scripts/scan-canaries.ts: exit 0 on clean output, 1 on a planted canary (named by line, not repeated), 2 on a missing file", async () => {
    const dir = await makeTempDir("scan-canaries-");
    try {
      const clean = join(dir.path, "clean.log");
      const dirty = join(dir.path, "dirty.log");
      const secret = canary("pw-");
      await writeFile(clean, "ok 1 - everything\nCANARY- is just a word\ncanary-password-7f3a9c1e\n");
      await writeFile(dirty, `line one\n{"msg":"login","password":"${secret}"}\nline three\n`);
      const script = new URL("../../scripts/scan-canaries.ts", import.meta.url).pathname;
      const run = (...args: string[]) => spawnSync(process.execPath, [script, ...args], { encoding: "utf8" });
      const ok = run(clean);
      assert.equal(ok.status, 0, ok.stderr);
      const found = run(clean, dirty);
      assert.equal(found.status, 1);
      assert.match(found.stderr, /dirty\.log:2/);
      assert.equal(found.stderr.includes(secret), false, "the report does not repeat the canary");
      assert.equal(run(join(dir.path, "missing.log")).status, 2);
      assert.equal(run().status, 2);
      assert.equal(CANARY_PATTERN.test(secret), true);
    } finally {
      CANARY_PATTERN.lastIndex = 0;
      await dir.cleanup();
    }
  });

  test("no canary, secret or token in any log line or response; summary", async (t) => {
    // One last pass over everything the agent can list and the admin can read.
    assert.equal(
      (
        await system.authorize(
          { capability_id: CAPABILITY, method: "GET", path: "/items/1" },
          await system.agentToken(AGENT),
        )
      ).status,
      200,
    );
    const scanned = assertNoLeaks(system);
    report(
      t,
      "secrets",
      counts,
      `responses scanned: ${scanned.responses}, log lines scanned: ${scanned.logLines}, watched: ${JSON.stringify(system.leaks.counts)}`,
    );
  });
});
