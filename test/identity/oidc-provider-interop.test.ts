import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { decodeProtectedHeader, exportJWK, generateKeyPair } from "jose";
import Provider from "oidc-provider";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { createJwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { requestToken } from "../../src/identity/token-client.ts";

/**
 * Third-party interop: a real oidc-provider (v9) issues client-credentials JWT access
 * tokens (resource indicators, accessTokenFormat "jwt"); our verifier checks them against
 * that provider's own JWKS over HTTP, exactly as production would with any OIDC issuer.
 */

const CLIENT_ID = "interop-workload";
const CLIENT_SECRET = "interop-secret-with-enough-entropy-0123456789";
const RESOURCE = "urn:authority:api";

describe("oidc-provider interop", () => {
  let server: Server;
  let issuer: string;
  let jwksUri: string;
  let tokenEndpoint: string;

  before(async () => {
    const { privateKey } = await generateKeyPair("ES256", { extractable: true });
    const signingKey = {
      ...(await exportJWK(privateKey)),
      kid: "oidc-provider-es256",
      alg: "ES256",
      use: "sig",
    };
    server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const provider = new Provider(issuer, {
      clients: [
        {
          client_id: CLIENT_ID,
          client_secret: CLIENT_SECRET,
          grant_types: ["client_credentials"],
          redirect_uris: [],
          response_types: [],
          token_endpoint_auth_method: "client_secret_basic",
          id_token_signed_response_alg: "ES256",
          scope: "read write",
        },
      ],
      jwks: { keys: [signingKey] },
      scopes: ["read", "write"],
      ttl: { ClientCredentials: 300 },
      features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => RESOURCE,
          useGrantedResource: () => true,
          getResourceServerInfo: () => ({
            scope: "read write",
            audience: RESOURCE,
            accessTokenFormat: "jwt",
            accessTokenTTL: 300,
            jwt: { sign: { alg: "ES256" } },
          }),
        },
      },
      extraTokenClaims: () => ({ token_use: "access", tenant: "interop-tenant" }),
    });
    server.on("request", provider.callback());
    const discovery = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as {
      jwks_uri: string;
      token_endpoint: string;
    };
    jwksUri = discovery.jwks_uri;
    tokenEndpoint = discovery.token_endpoint;
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const getToken = async (scope: string) =>
    (
      await requestToken({
        tokenUrl: tokenEndpoint,
        grant: { type: "client_credentials", clientId: CLIENT_ID, clientSecret: CLIENT_SECRET },
        scope,
      })
    ).accessToken;

  it("verifies a client-credentials JWT access token from oidc-provider against its JWKS", async () => {
    const token = await getToken("read");
    assert.equal(decodeProtectedHeader(token).typ, "at+jwt");
    const verifier = createJwtVerifier({
      issuer,
      audience: RESOURCE,
      jwks: jwksUri,
      requireTokenUse: "access",
      tenant: "interop-tenant",
      requiredScopes: ["read"],
      allowedTypes: ["at+jwt"],
    });
    const verified = await verifier.verify(token);
    assert.equal(verified.issuer, issuer);
    assert.equal(verified.subject, CLIENT_ID);
    assert.equal(verified.clientId, CLIENT_ID);
    assert.deepEqual(verified.scopes, ["read"]);
    assert.deepEqual(verified.audience, [RESOURCE]);
    assert.equal(verified.tenant, "interop-tenant");
  });

  it("rejects the same third-party token for another audience, scope or tenant", async () => {
    const token = await getToken("read");
    const cases = [
      [{ audience: "urn:authority:other" }, "token_audience"],
      [{ requiredScopes: ["write"] }, "token_scope"],
      [{ tenant: "someone-else" }, "token_tenant"],
      [{ issuer: `${issuer}/other` }, "token_issuer"],
    ] as const;
    for (const [override, code] of cases) {
      const verifier = createJwtVerifier({ issuer, audience: RESOURCE, jwks: jwksUri, ...override });
      await assert.rejects(verifier.verify(token), (error: unknown) => {
        assert.ok(error instanceof TokenVerificationError);
        assert.equal(error.code, code);
        return true;
      });
    }
  });
});
