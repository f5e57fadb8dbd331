import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { createTrustedIssuersVerifier, defaultClaimMapping } from "../../src/identity/trusted-issuers.ts";

/**
 * `warm()` fetches every trusted issuer's JWKS before the first token (the sidecar's `jwks`
 * readiness check, decision 2811): a first token then costs no key fetch, and an issuer whose
 * JWKS cannot be fetched keeps warm() failing until it can.
 */
describe("trusted issuers: warm() fetches each issuer's JWKS ahead of the first token", () => {
  const fetched: string[] = [];
  let failing = new Set<string>();
  let jwk: Record<string, unknown> = {};
  const server = createServer((request, response) => {
    const name = (request.url ?? "").split("/")[1] ?? "";
    fetched.push(name);
    if (failing.has(name)) {
      response.statusCode = 500;
      response.end();
      return;
    }
    response.setHeader("content-type", "application/json");
    response.end(JSON.stringify({ keys: [jwk] }));
  });
  let base = "";
  let privateKey: Awaited<ReturnType<typeof generateKeyPair>>["privateKey"];

  before(async () => {
    const pair = await generateKeyPair("ES256", { extractable: true });
    privateKey = pair.privateKey;
    jwk = { ...(await exportJWK(pair.publicKey)), kid: "k1", alg: "ES256", use: "sig" };
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const verifierOf = () =>
    createTrustedIssuersVerifier(
      ["a", "b"].map((name, index) => ({
        issuer: `https://${name}.example`,
        jwksUrl: `${base}/${name}/jwks`,
        audience: ["authority"],
        claims: defaultClaimMapping,
        tokenUse: false,
        vouchedSubjects: index === 0,
      })),
    );

  test("each issuer's JWKS is fetched once by warm(); the first token fetches nothing", async () => {
    fetched.length = 0;
    failing = new Set();
    const verifier = verifierOf();
    await verifier.warm();
    assert.deepEqual([...fetched].sort(), ["a", "b"]);
    await verifier.warm();
    assert.equal(fetched.length, 2, "fresh keys are not fetched again");
    const token = await new SignJWT({ scope: "x" })
      .setProtectedHeader({ alg: "ES256", kid: "k1" })
      .setIssuer("https://b.example")
      .setAudience("authority")
      .setSubject("agent-1")
      .setIssuedAt()
      .setExpirationTime("1m")
      .sign(privateKey);
    assert.equal((await verifier.verify(token)).subject, "agent-1");
    assert.equal(fetched.length, 2, "the first token used the warmed keys");
  });

  test("an issuer whose JWKS cannot be fetched fails warm() as jwks_unavailable until it can", async () => {
    fetched.length = 0;
    failing = new Set(["b"]);
    const verifier = verifierOf();
    await assert.rejects(
      verifier.warm(),
      (error: unknown) => error instanceof TokenVerificationError && error.code === "jwks_unavailable",
    );
    failing = new Set();
    await verifier.warm();
    assert.ok(fetched.filter((name) => name === "b").length >= 2, "b is asked again");
  });
});
