import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { createTrustedIssuersVerifier, defaultClaimMapping } from "../../src/identity/trusted-issuers.ts";

/**
 * The issuer is chosen from a claim the attacker writes: whatever the token, the verifier
 * answers with a TokenVerificationError, and it fetches keys only for a listed issuer.
 */
describe("trusted issuers: selection by iss (properties)", () => {
  const fetched: string[] = [];
  const server = createServer((request, response) => {
    fetched.push(request.url ?? "");
    response.setHeader("content-type", "application/json");
    response.end(JSON.stringify({ keys: [] }));
  });
  let base = "";

  before(async () => {
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
        tokenUse: "access",
        vouchedSubjects: index === 0,
      })),
    );

  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

  test("any string, and any token naming an unlisted iss, is refused without a key fetch", async () => {
    const verifier = verifierOf();
    await fc.assert(
      fc.asyncProperty(fc.string({ maxLength: 300 }), async (text) => {
        await assert.rejects(verifier.verify(text), TokenVerificationError);
      }),
      { numRuns: 300 },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc.webUrl(),
          fc.constant("https://a.example/"),
          fc.constant("HTTPS://A.EXAMPLE"),
        ),
        async (iss) => {
          fc.pre(iss !== "https://a.example" && iss !== "https://b.example");
          const token = `${b64({ alg: "ES256", kid: "k" })}.${b64({ iss, sub: "x", aud: "authority" })}.c2ln`;
          await assert.rejects(verifier.verify(token), (error: unknown) => {
            assert.ok(error instanceof TokenVerificationError);
            assert.equal(error.code, "token_issuer");
            return true;
          });
        },
      ),
      { numRuns: 200 },
    );
    assert.deepEqual(fetched, []);
  });

  test("a listed iss fetches that issuer's keys only", async () => {
    const verifier = verifierOf();
    const token = `${b64({ alg: "ES256", kid: "k" })}.${b64({ iss: "https://b.example", sub: "x", aud: "authority" })}.c2ln`;
    await assert.rejects(verifier.verify(token), TokenVerificationError);
    assert.deepEqual(fetched, ["/b/jwks"]);
  });
});
