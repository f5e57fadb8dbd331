import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { createLogCapture } from "../../helpers/log-capture.ts";
import { startWorld, type World } from "./world.ts";

/**
 * `/readyz` tells the truth (issue 16, item 6): ready only once the callers' JWKS is fetched and
 * the sidecar's own credentials are accepted by the real authority; wrong credentials keep it
 * unready and are logged once with their cause; the first Check after ready is allowed. What
 * that first Check costs a fresh process (within Envoy's 200 ms deadline) is first-check.test.ts:
 * in this process the authority shares the CPU and has compiled the same schemas already.
 */

interface Readyz {
  readonly status: number;
  readonly checks: Record<string, boolean>;
}

async function readyz(port: number): Promise<Readyz> {
  const response = await fetch(`http://127.0.0.1:${port}/readyz`);
  const body = (await response.json()) as { checks: Record<string, boolean> };
  return { status: response.status, checks: body.checks };
}

describe("sidecar readiness against a real authority and identity provider", () => {
  let world: World;

  before(async () => {
    world = await startWorld();
  });
  after(() => world.close());

  test("ready after the JWKS, its own credentials and the warm-up are proven; the first Check is allowed", async () => {
    const logs = createLogCapture();
    const handle = await world.startSidecar({ logger: logs.logger("sidecar") });
    assert.equal(await handle.sidecar.whenReady(10_000), true);
    const ready = await readyz(handle.ports.metrics);
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.checks, {
      grpc: true,
      proxy: true,
      audit: true,
      jwks: true,
      credentials: true,
      catalogs: true,
      policy_changes: true,
      decision_path: true,
      grpc_serving: true,
    });
    const first = await handle.check({});
    assert.equal(first.status.code, 0, JSON.stringify(first.denied_response ?? {}));
    assert.deepEqual(logs.errors(), []);
    await handle.close();
  });

  for (const [label, token, cause] of [
    ["a token without the sidecar role", "agent", { status: 403, code: "insufficient_role" }],
    ["a token signed by nobody the authority trusts", "forged", { status: 401 }],
  ] as const) {
    test(`with ${label}: stays unready, and the log names the cause once`, async () => {
      const logs = createLogCapture();
      const sidecarToken =
        token === "agent"
          ? world.tokens.agent
          : `${world.tokens.sidecar.split(".").slice(0, 2).join(".")}.${"A".repeat(86)}`;
      const handle = await world.startSidecar({
        authority: createAuthorityClient({
          baseUrl: world.authorityUrl,
          token: staticTokenSource(sidecarToken),
        }),
        logger: logs.logger("sidecar"),
      });
      // Long enough for several retries (0.5 s, 1 s, 2 s backoff).
      assert.equal(await handle.sidecar.whenReady(4000), false);
      const ready = await readyz(handle.ports.metrics);
      assert.equal(ready.status, 503);
      assert.equal(ready.checks.credentials, false);
      assert.equal(ready.checks.jwks, true);
      const errors = logs.errors().map((line) => JSON.parse(line) as Record<string, unknown>);
      assert.equal(errors.length, 1, logs.errors().join("\n"));
      const line = errors[0] ?? {};
      assert.equal(line.check, "credentials");
      assert.match(String(line.msg), /did not accept the sidecar's own credentials/);
      const [first] = (line.cause as { errors: Record<string, unknown>[] }).errors;
      assert.equal(first?.status, cause.status);
      if ("code" in cause) assert.match(String(first?.message), new RegExp(cause.code));
      for (const written of logs.lines())
        assert.ok(!written.includes(sidecarToken), "the token is never logged");
      await handle.close();
    });
  }

  test("with an unreachable JWKS: unready (jwks false) and logged once", async () => {
    const logs = createLogCapture();
    const handle = await world.startSidecar({
      verifier: createJwtVerifier({
        issuer: world.context.config.issuer,
        audience: "authority",
        jwks: { url: "http://127.0.0.1:9/.well-known/jwks.json", timeoutMs: 500 },
      }),
      logger: logs.logger("sidecar"),
    });
    assert.equal(await handle.sidecar.whenReady(3000), false);
    const ready = await readyz(handle.ports.metrics);
    assert.equal(ready.status, 503);
    assert.equal(ready.checks.jwks, false);
    assert.equal(ready.checks.credentials, true);
    const jwksErrors = logs.errors().filter((line) => line.includes('"check":"jwks"'));
    assert.equal(jwksErrors.length, 1, jwksErrors.join("\n"));
    assert.match(jwksErrors[0] ?? "", /jwks_unavailable/);
    await handle.close();
  });
});
