import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { pathToFileURL } from "node:url";
import { resolveIdpConfig } from "../../../src/config/idp.ts";
import { resolveTokenConfig } from "../../../src/config/token.ts";
import { ConfigError } from "../../../src/core/config-error.ts";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";

const root = resolve(import.meta.dirname, "../../..");

/** Runs `authority <args>` with only the identity commands registered, as main.ts would. */
function authority(args: string[], env: Record<string, string> = {}): ChildProcess {
  const commands = ["idp", "token"].map(
    (name) => pathToFileURL(join(root, "src/cli/commands", `${name}.ts`)).href,
  );
  const script = `
    import { Command } from "commander";
    const program = new Command("authority");
    for (const url of ${JSON.stringify(commands)}) (await import(url)).register(program);
    await program.parseAsync(["node", "authority", ...process.argv.slice(1)]);
  `;
  return spawn(process.execPath, ["--input-type=module", "-e", script, ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
}

async function output(child: ChildProcess): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const [code] = (await once(child, "exit")) as [number | null];
  return { code, stdout, stderr };
}

describe("authority idp and authority token", () => {
  let dir: string;
  let idp: ChildProcess;
  let issuer: string;
  let tokenUrl: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-idp-cli-"));
    const accounts = join(dir, "accounts.json");
    await writeFile(
      accounts,
      JSON.stringify({
        clients: [
          {
            clientId: "demo-client",
            clientSecret: "demo-client-secret",
            scopes: ["read", "write"],
            tenant: "demo",
          },
        ],
        serviceAccounts: [{ username: "demo-svc", password: "demo-svc-password", scopes: ["crypto"] }],
      }),
    );
    idp = authority(["idp", "--listen", "127.0.0.1:0", "--keys-dir", join(dir, "keys")], {
      AUTHORITY_IDP_ACCOUNTS_FILE: accounts,
      AUTHORITY_IDP_TOKEN_LIFETIME: "300",
    });
    // A child that never comes up must not hang the suite.
    const guard = setTimeout(() => idp.kill("SIGKILL"), 30_000);
    const lines = createInterface({ input: idp.stdout as NodeJS.ReadableStream });
    for await (const line of lines) {
      const entry = JSON.parse(line) as { msg?: string; issuer?: string; token_endpoint?: string };
      if (
        entry.msg === "identity provider listening" &&
        entry.issuer !== undefined &&
        entry.token_endpoint !== undefined
      ) {
        issuer = entry.issuer;
        tokenUrl = entry.token_endpoint;
        break;
      }
    }
    clearTimeout(guard);
    idp.stdout?.resume();
    assert.ok(issuer !== undefined, "the IdP reported where it listens");
  });

  after(async () => {
    if (idp.exitCode === null && idp.signalCode === null) {
      idp.kill("SIGKILL");
      await once(idp, "exit");
    }
    await rm(dir, { recursive: true, force: true });
  });

  it("prints a client-credentials token that verifies against the running IdP", async () => {
    const run = await output(
      authority(["token", "--token-url", tokenUrl, "--client-id", "demo-client", "--scope", "read"], {
        AUTHORITY_CLIENT_SECRET: "demo-client-secret",
      }),
    );
    assert.equal(run.code, 0, run.stderr);
    const token = run.stdout.trim();
    const verifier = createJwtVerifier({
      issuer,
      audience: "authority",
      jwks: `${issuer}/.well-known/jwks.json`,
      requireTokenUse: "access",
      tenant: "demo",
    });
    const verified = await verifier.verify(token);
    assert.deepEqual(verified.scopes, ["read"]);
    assert.equal(verified.expiresAt.getTime() - Date.now() <= 300_000, true);
  });

  it("prints a password-grant token as JSON with --json", async () => {
    const run = await output(
      authority(["token", "--json", "--username", "demo-svc"], {
        AUTHORITY_IDP_TOKEN_URL: tokenUrl,
        AUTHORITY_PASSWORD: "demo-svc-password",
      }),
    );
    assert.equal(run.code, 0, run.stderr);
    const body = JSON.parse(run.stdout) as { access_token: string; scope: string; token_type: string };
    assert.equal(body.scope, "crypto");
    assert.equal(body.token_type, "Bearer");
  });

  it("fails with the endpoint's error and no secret in the output", async () => {
    const run = await output(
      authority([
        "token",
        "--token-url",
        tokenUrl,
        "--client-id",
        "demo-client",
        "--client-secret",
        "wrong-secret-value",
      ]),
    );
    assert.equal(run.code, 1);
    assert.match(run.stderr, /invalid_client/);
    assert.ok(!run.stderr.includes("wrong-secret-value") && !run.stdout.includes("wrong-secret-value"));
  });

  it("shuts down cleanly on SIGTERM", async () => {
    idp.kill("SIGTERM");
    const [code] = (await once(idp, "exit")) as [number | null];
    assert.equal(code, 0);
  });
});

describe("command option parsing", () => {
  it("parses listen addresses", () => {
    const listen = (value: string) => resolveIdpConfig({ flags: { listen: value } });
    assert.deepEqual(listen("127.0.0.1:8083").host, "127.0.0.1");
    assert.deepEqual(listen("[::1]:0").port, 0);
    assert.deepEqual(listen("idp.local:443").host, "idp.local");
    for (const bad of ["8083", "host:", ":80", "h:99999", "::1:80"])
      assert.throws(
        () => listen(bad),
        (error: unknown) => error instanceof ConfigError && error.message.startsWith("--listen"),
      );
  });

  it("builds IdP options from flags, with the defined defaults", () => {
    const config = resolveIdpConfig({
      flags: {
        listen: "0.0.0.0:8083",
        issuer: "https://idp.example",
        "token-lifetime": "600",
        "log-level": "warn",
      },
      env: { AUTHORITY_IDP_ROTATION_GRACE: "7200" },
    });
    assert.equal(config.host, "0.0.0.0");
    assert.equal(config.logLevel, "warn");
    assert.deepEqual(config.server, {
      issuer: "https://idp.example",
      audience: "authority",
      tenantClaim: "tenant",
      tokenLifetimeSec: 600,
      rotationGraceSec: 7200,
    });
    assert.equal(resolveIdpConfig({ flags: { "token-lifetime": "15m" } }).server.tokenLifetimeSec, 900);
    for (const bad of ["15x", "0", "-1", "1.5", "10ms"]) {
      assert.throws(
        () => resolveIdpConfig({ flags: { "token-lifetime": bad } }),
        /--token-lifetime must be a duration/,
      );
    }
  });

  it("chooses the grant from the credentials given", () => {
    const cc = resolveTokenConfig({
      flags: { "token-url": "http://x/t", "client-id": "c", scope: "a b" },
      env: { AUTHORITY_CLIENT_SECRET: "s" },
    }).request;
    assert.deepEqual(cc.grant, { type: "client_credentials", clientId: "c", clientSecret: "s" });
    assert.equal(cc.scope, "a b");
    const pw = resolveTokenConfig({
      flags: { "token-url": "http://x/t", username: "u", password: "p" },
    }).request;
    assert.equal(pw.grant.type, "password");
    assert.throws(() => resolveTokenConfig({ flags: {} }), ConfigError);
    assert.throws(() => resolveTokenConfig({ flags: { "client-id": "c" } }), /go together/);
    assert.throws(() => resolveTokenConfig({ flags: { username: "u" } }), /go together/);
  });
});
