import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { resolveManagedConfig } from "../../../src/config/managed.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/index.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";
import { silentLogger } from "./harness.ts";
import { post } from "./https-client.ts";

const BIN = fileURLToPath(new URL("../../../bin/authority.ts", import.meta.url));

interface Started {
  readonly child: ChildProcess;
  readonly url: string;
  readonly exited: Promise<number | null>;
}

/** Starts `authority <args>` and waits for the log line that carries the bound URL. */
function startCli(args: string[], env: Record<string, string>, message: string): Promise<Started> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, ...env, AUTHORITY_LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    lines.on("line", (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === message && typeof entry.url === "string")
          resolve({ child, url: entry.url, exited });
      } catch {
        // Not a log line.
      }
    });
    void exited.then((code) => reject(new Error(`authority ${args[0]} exited with ${code}: ${stderr}`)));
  });
}

describe("authority crypto and authority managed commands", () => {
  let dir: TempDir;
  let idp: IdpServer;
  let idpUrl: string;
  const children: ChildProcess[] = [];

  before(async () => {
    dir = await makeTempDir("managed-cli-");
    idp = await createIdpServer({
      scryptCost: { log2N: 10, r: 8, p: 1 },
      failureLimit: false,
      logger: silentLogger(),
    });
    idpUrl = await idp.listen({ host: "127.0.0.1", port: 0 });
    await idp.directory.addServiceAccount({
      username: "svc-cli",
      password: "cli-password-123",
      scopes: ["crypto"],
    });
  });
  after(async () => {
    for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
    await idp.close();
    await dir.cleanup();
  });

  it("run end to end as separate processes and stop cleanly on SIGTERM", async () => {
    const stateDir = join(dir.path, "state");
    const crypto = await startCli(
      ["crypto", "--listen", "127.0.0.1:0", "--state-dir", stateDir, "--init-kek"],
      { AUTHORITY_ISSUER: idp.issuer },
      "crypto service listening",
    );
    children.push(crypto.child);
    const managed = await startCli(
      [
        "managed",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        stateDir,
        "--crypto-url",
        crypto.url,
        "--idp-token-url",
        `${idpUrl}/oauth2/token`,
      ],
      {},
      "managed crypto API listening",
    );
    children.push(managed.child);

    const admin = (await idp.issueToken({ subject: "admin", roles: ["admin"] })).accessToken;
    const created = await fetch(`${crypto.url}/v1/admin/owners`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ id: "partner-cli" }),
    });
    assert.equal(created.status, 201);
    const owner = (await created.json()) as Record<string, string>;
    const ca = await readFile(join(stateDir, "managed-tls.crt"), "utf8");
    const headers = {
      username: "svc-cli",
      password: "cli-password-123",
      api_key: owner.api_key ?? "",
      access_key: owner.access_key ?? "",
      secret_key: owner.secret_key ?? "",
    };
    const encrypted = await post(`${managed.url}/v1/encrypt`, { ca, headers, body: { data: "via the CLI" } });
    assert.equal(encrypted.status, 200, encrypted.text);
    const decrypted = await post(`${managed.url}/v1/decrypt`, {
      ca,
      headers,
      body: { encrypted_data: (encrypted.json.body as { encrypted_data: string }).encrypted_data },
    });
    assert.deepEqual(decrypted.json, { statusCode: 200, body: { decrypted_data: "via the CLI" } });

    managed.child.kill("SIGTERM");
    crypto.child.kill("SIGTERM");
    assert.equal(await managed.exited, 0);
    assert.equal(await crypto.exited, 0);
  });

  it("resolves flags and refuses half-given TLS or client settings", () => {
    const config = resolveManagedConfig({ flags: { listen: "127.0.0.1:8081" }, env: {} });
    assert.equal(config.port, 8081);
    assert.deepEqual(config.server.rateLimit, { perUserPerMinute: 600, burst: 60 });
    assert.equal(config.server.upstreamTimeoutMs, 5000);
    assert.equal(config.tls, undefined);
    assert.throws(() => resolveManagedConfig({ flags: { "tls-cert": BIN } }), /go together/);
    assert.throws(() => resolveManagedConfig({ flags: { "idp-client-id": "c" } }), /CLIENT_SECRET/);
    assert.throws(
      () => resolveManagedConfig({ flags: { "rate-limit": "0" } }),
      /--rate-limit must be an integer from 1/,
    );
    const withClient = resolveManagedConfig({
      flags: { "idp-client-id": "c" },
      env: { AUTHORITY_MANAGED_IDP_CLIENT_SECRET: "s" },
    });
    assert.deepEqual(withClient.server.idp, { clientId: "c", clientSecret: "s" });
  });

  it("keeps the old --upstream-timeout flag and takes the documented --upstream-timeout-ms", async () => {
    const { Command } = await import("commander");
    const { register } = await import("../../../src/cli/commands/managed.ts");
    const { givenFlags } = await import("../../../src/cli/settings-options.ts");
    const { managedSchema } = await import("../../../src/config/managed.ts");
    for (const flag of ["--upstream-timeout", "--upstream-timeout-ms"]) {
      const program = new Command("authority");
      register(program);
      const command = program.commands.find((c) => c.name() === "managed");
      assert.ok(command);
      command.action(() => undefined);
      await program.parseAsync(["managed", flag, "750"], { from: "user" });
      const flags = givenFlags(command.opts(), managedSchema);
      assert.equal(resolveManagedConfig({ flags, env: {} }).server.upstreamTimeoutMs, 750);
    }
  });
});
