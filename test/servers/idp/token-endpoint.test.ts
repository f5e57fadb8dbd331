import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { createJwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { hashSecret } from "../../../src/identity/secret-hash.ts";
import { requestToken, TokenRequestError } from "../../../src/identity/token-client.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/server.ts";

const cheap = { log2N: 10, r: 8, p: 1 };
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString("base64")}`;

interface Answer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

describe("development IdP token endpoint", () => {
  let idp: IdpServer;
  let url: string;
  let clock = Date.now();

  before(async () => {
    idp = await createIdpServer({
      scryptCost: cheap,
      failureLimit: { maxFailures: 3, windowSec: 60 },
      now: () => new Date(clock),
      accounts: {
        serviceAccounts: [
          {
            username: "svc-crypto",
            password: "svc-password-1",
            scopes: ["crypto.encrypt", "crypto.decrypt"],
            roles: ["service"],
            tenant: "t1",
            claims: { department: "platform" },
          },
        ],
        clients: [
          {
            clientId: "workload-a",
            clientSecret: "workload-secret-a",
            scopes: ["authority/authority.broker.execute", "read"],
            roles: ["workload"],
            tenant: "t1",
            audience: ["authority", "partner-api"],
            subject: "binding:b-1",
            claims: { binding_id: "b-1" },
          },
          { clientId: "admin-cli", clientSecret: "admin-secret-1", scopes: ["admin"], roles: ["admin"] },
        ],
      },
    });
    url = await idp.listen();
  });

  after(() => idp.close());

  async function post(
    body: string | Record<string, string>,
    headers: Record<string, string> = {},
  ): Promise<Answer> {
    const json = typeof body !== "string";
    const response = await fetch(`${url}/oauth2/token`, {
      method: "POST",
      headers: {
        "content-type": json ? "application/json" : "application/x-www-form-urlencoded",
        ...headers,
      },
      body: json ? JSON.stringify(body) : body,
    });
    return {
      status: response.status,
      headers: response.headers,
      body: (await response.json()) as Record<string, unknown>,
    };
  }

  function assertOAuthError(answer: Answer, status: number, error: string): void {
    assert.equal(answer.status, status, JSON.stringify(answer.body));
    assert.equal(answer.body.error, error);
    assert.deepEqual(Object.keys(answer.body).sort(), ["error", "error_description"]);
    assert.equal(answer.headers.get("cache-control"), "no-store");
  }

  it("issues a client-credentials token via HTTP Basic with the client's claims", async () => {
    const answer = await post("grant_type=client_credentials&scope=read", {
      authorization: basic("workload-a", "workload-secret-a"),
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get("cache-control"), "no-store");
    assert.equal(answer.headers.get("pragma"), "no-cache");
    assert.equal(answer.body.token_type, "Bearer");
    assert.equal(answer.body.expires_in, 900);
    assert.equal(answer.body.scope, "read");
    const token = String(answer.body.access_token);
    const header = decodeProtectedHeader(token);
    assert.equal(header.alg, "ES256");
    assert.equal(header.typ, "at+jwt");
    assert.equal(header.kid, idp.keys.current().kid);
    const claims = decodeJwt(token);
    assert.equal(claims.iss, idp.issuer);
    assert.equal(claims.sub, "binding:b-1");
    assert.equal(claims.aud, "authority");
    assert.equal(claims.client_id, "workload-a");
    assert.equal(claims.token_use, "access");
    assert.equal(claims.tenant, "t1");
    assert.deepEqual(claims.roles, ["workload"]);
    assert.equal(claims.binding_id, "b-1");
    assert.equal(typeof claims.jti, "string");
    assert.equal(claims.exp, (claims.iat ?? 0) + 900);
    assert.equal(claims.nbf, claims.iat);

    const verifier = createJwtVerifier({
      issuer: idp.issuer,
      audience: "authority",
      jwks: idp.jwksUri,
      requireTokenUse: "access",
      tenant: "t1",
      now: () => new Date(clock),
    });
    assert.equal((await verifier.verify(token)).clientId, "workload-a");
  });

  it("accepts client credentials in a JSON body, grants all allowed scopes by default, and honours audience/resource", async () => {
    const all = await post({
      grant_type: "client_credentials",
      client_id: "workload-a",
      client_secret: "workload-secret-a",
    });
    assert.equal(all.status, 200);
    assert.equal(all.body.scope, "authority/authority.broker.execute read");
    const byAudience = await post(
      { grant_type: "client_credentials", audience: "partner-api" },
      { authorization: basic("workload-a", "workload-secret-a") },
    );
    assert.equal(decodeJwt(String(byAudience.body.access_token)).aud, "partner-api");
    const byResource = await post("grant_type=client_credentials&resource=partner-api", {
      authorization: basic("workload-a", "workload-secret-a"),
    });
    assert.equal(decodeJwt(String(byResource.body.access_token)).aud, "partner-api");
  });

  it("issues a password-grant token for a service account, with or without client authentication", async () => {
    const answer = await post(
      "grant_type=password&username=svc-crypto&password=svc-password-1&scope=crypto.encrypt",
    );
    assert.equal(answer.status, 200);
    const claims = decodeJwt(String(answer.body.access_token));
    assert.equal(claims.sub, "svc-crypto");
    assert.equal(claims.scope, "crypto.encrypt");
    assert.equal(claims.client_id, undefined);
    assert.deepEqual(claims.roles, ["service"]);
    assert.equal(claims.department, "platform");

    const withClient = await post(
      { grant_type: "password", username: "svc-crypto", password: "svc-password-1" },
      { authorization: basic("admin-cli", "admin-secret-1") },
    );
    assert.equal(withClient.status, 200);
    assert.equal(decodeJwt(String(withClient.body.access_token)).client_id, "admin-cli");
  });

  it("answers invalid_client with a Basic challenge only when Basic was used", async () => {
    const wrongBasic = await post("grant_type=client_credentials", {
      authorization: basic("workload-a", "wrong-secret"),
    });
    assertOAuthError(wrongBasic, 401, "invalid_client");
    assert.match(wrongBasic.headers.get("www-authenticate") ?? "", /^Basic realm=/);

    const unknownBody = await post({
      grant_type: "client_credentials",
      client_id: "nobody",
      client_secret: "whatever-1",
    });
    assertOAuthError(unknownBody, 401, "invalid_client");
    assert.equal(unknownBody.headers.get("www-authenticate"), null);
    // Unknown client and wrong secret read the same.
    assert.equal(unknownBody.body.error_description, wrongBasic.body.error_description);

    assertOAuthError(await post("grant_type=client_credentials"), 401, "invalid_client");
    assertOAuthError(
      await post({ grant_type: "client_credentials", client_id: "workload-a" }),
      401,
      "invalid_client",
    );
    assertOAuthError(
      await post("grant_type=client_credentials", { authorization: "Basic !!!" }),
      401,
      "invalid_client",
    );
    assertOAuthError(
      await post("grant_type=client_credentials", { authorization: "Bearer abc" }),
      401,
      "invalid_client",
    );
    const badPassword = await post("grant_type=password&username=svc-crypto&password=svc-password-1", {
      authorization: basic("admin-cli", "nope-nope"),
    });
    assertOAuthError(badPassword, 401, "invalid_client");
  });

  it("answers invalid_grant for a wrong or unknown service account", async () => {
    const wrong = await post("grant_type=password&username=svc-crypto&password=not-the-password");
    assertOAuthError(wrong, 400, "invalid_grant");
    const unknown = await post("grant_type=password&username=ghost&password=not-the-password");
    assertOAuthError(unknown, 400, "invalid_grant");
    assert.equal(wrong.body.error_description, unknown.body.error_description);
  });

  it("answers invalid_scope for scopes beyond the allowed set or malformed", async () => {
    const auth = { authorization: basic("workload-a", "workload-secret-a") };
    assertOAuthError(
      await post("grant_type=client_credentials&scope=read%20admin", auth),
      400,
      "invalid_scope",
    );
    assertOAuthError(
      await post("grant_type=client_credentials&scope=%22read%22", auth),
      400,
      "invalid_scope",
    );
    assertOAuthError(
      await post("grant_type=password&username=svc-crypto&password=svc-password-1&scope=admin"),
      400,
      "invalid_scope",
    );
  });

  it("answers invalid_target for an audience the principal may not receive", async () => {
    const auth = { authorization: basic("workload-a", "workload-secret-a") };
    assertOAuthError(
      await post("grant_type=client_credentials&audience=elsewhere", auth),
      400,
      "invalid_target",
    );
    assertOAuthError(
      await post("grant_type=client_credentials&audience=authority&resource=partner-api", auth),
      400,
      "invalid_target",
    );
  });

  it("answers unsupported_grant_type and invalid_request without internals", async () => {
    assertOAuthError(await post("grant_type=authorization_code&code=x"), 400, "unsupported_grant_type");
    assertOAuthError(await post("scope=read"), 400, "invalid_request");
    assertOAuthError(await post("grant_type=password&username=svc-crypto"), 400, "invalid_request");
    assertOAuthError(await post("grant_type=password&grant_type=password"), 400, "invalid_request");
    assertOAuthError(
      await post("grant_type=client_credentials&client_secret=workload-secret-a", {
        authorization: basic("workload-a", "workload-secret-a"),
      }),
      400,
      "invalid_request",
    );
    assertOAuthError(
      await post({ grant_type: "password", username: ["a"] } as unknown as Record<string, string>),
      400,
      "invalid_request",
    );
    const badJson = await fetch(`${url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{oops",
    });
    assertOAuthError(
      {
        status: badJson.status,
        headers: badJson.headers,
        body: (await badJson.json()) as Record<string, unknown>,
      },
      400,
      "invalid_request",
    );
    const xml = await fetch(`${url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/xml" },
      body: "<a/>",
    });
    assertOAuthError(
      { status: xml.status, headers: xml.headers, body: (await xml.json()) as Record<string, unknown> },
      415,
      "invalid_request",
    );
    const huge = await post(`grant_type=password&username=svc-crypto&password=${"x".repeat(20_000)}`);
    assertOAuthError(huge, 413, "invalid_request");
  });

  it("locks a username out after repeated failures, then lets it in after the window", async () => {
    await idp.directory.addServiceAccount({
      username: "svc-locked",
      password: "locked-password",
      scopes: ["x"],
    });
    for (let i = 0; i < 3; i++) {
      assertOAuthError(
        await post("grant_type=password&username=svc-locked&password=wrong-password"),
        400,
        "invalid_grant",
      );
    }
    const locked = await post("grant_type=password&username=svc-locked&password=locked-password");
    assertOAuthError(locked, 429, "invalid_request");
    assert.ok(Number(locked.headers.get("retry-after")) > 0);
    // Another account is unaffected.
    assert.equal((await post("grant_type=password&username=svc-crypto&password=svc-password-1")).status, 200);
    clock += 61_000;
    assert.equal(
      (await post("grant_type=password&username=svc-locked&password=locked-password")).status,
      200,
    );
  });

  /** A form POST from another loopback address (Linux routes all of 127/8 to lo). */
  function postFrom(localAddress: string, body: string, base = url): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        `${base}/oauth2/token`,
        {
          method: "POST",
          localAddress,
          headers: { "content-type": "application/x-www-form-urlencoded" },
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  }

  it("never locks the owner out: failures count per source, so a stranger locks out only itself", async () => {
    await idp.directory.addClient({ clientId: "victim", clientSecret: "victim-secret", scopes: ["s"] });
    const guess = "grant_type=client_credentials&client_id=victim&client_secret=guessed";
    for (let i = 0; i < 3; i++) assert.equal(await postFrom("127.0.0.3", guess), 401);
    const right = "grant_type=client_credentials&client_id=victim&client_secret=victim-secret";
    assert.equal(await postFrom("127.0.0.3", right), 429, "the guessing source is locked out");
    assert.equal(await postFrom("127.0.0.4", right), 200, "the owner, elsewhere, is not");
  });

  it("bounds one source spraying guesses over many principals", async () => {
    // One failure per principal and source; ten per source over all principals.
    const strict = await createIdpServer({
      scryptCost: cheap,
      failureLimit: { maxFailures: 1, windowSec: 60 },
      accounts: { serviceAccounts: [{ username: "svc", password: "svc-password", scopes: ["s"] }] },
    });
    try {
      const base = await strict.listen();
      for (let i = 0; i < 10; i++) {
        assert.equal(
          await postFrom("127.0.0.5", `grant_type=password&username=spray-${i}&password=x`, base),
          400,
        );
      }
      const right = "grant_type=password&username=svc&password=svc-password";
      assert.equal(await postFrom("127.0.0.5", right, base), 429, "the spraying source is refused");
      assert.equal(await postFrom("127.0.0.6", right, base), 200, "other sources are not");
    } finally {
      await strict.close();
    }
  });

  it("adds and removes clients at run time, including pre-hashed secrets", async () => {
    await idp.directory.addClient({
      clientId: "hashed",
      clientSecretHash: await hashSecret("hashed-secret", cheap),
      scopes: ["s"],
    });
    const ok = await post("grant_type=client_credentials", {
      authorization: basic("hashed", "hashed-secret"),
    });
    assert.equal(ok.status, 200);
    assert.equal(decodeJwt(String(ok.body.access_token)).sub, "hashed");
    assert.equal(idp.directory.removeClient("hashed"), true);
    assertOAuthError(
      await post("grant_type=client_credentials", { authorization: basic("hashed", "hashed-secret") }),
      401,
      "invalid_client",
    );
    await assert.rejects(
      idp.directory.addClient({ clientId: "workload-a", clientSecret: "another-secret", scopes: [] }),
      /already exists/,
    );
    await assert.rejects(
      idp.directory.addClient({
        clientId: "c",
        clientSecret: "another-secret",
        scopes: [],
        claims: { sub: "x" },
      }),
      /reserved/,
    );
    await assert.rejects(
      idp.directory.addClient({ clientId: "c", clientSecret: "short", scopes: [] }),
      /clientSecret/,
    );
    await assert.rejects(idp.directory.addClient({ clientId: "c", scopes: [] }), /exactly one/);
    await assert.rejects(
      idp.directory.addServiceAccount({ username: "bad name", password: "long-enough", scopes: [] }),
      /username/,
    );
  });

  it("serves JWKS and discovery documents", async () => {
    const jwks = await fetch(`${url}/.well-known/jwks.json`);
    assert.equal(jwks.status, 200);
    assert.match(jwks.headers.get("cache-control") ?? "", /^public, max-age=\d+$/);
    const set = (await jwks.json()) as { keys: Array<Record<string, unknown>> };
    assert.ok(set.keys.some((k) => k.kid === idp.keys.current().kid));
    for (const key of set.keys) {
      assert.equal(key.kty, "EC");
      assert.equal(key.alg, "ES256");
      assert.equal(key.d, undefined, "no private material in the JWKS");
    }
    const discovery = (await (await fetch(`${url}/.well-known/openid-configuration`)).json()) as Record<
      string,
      unknown
    >;
    assert.equal(discovery.issuer, idp.issuer);
    assert.equal(discovery.token_endpoint, `${idp.issuer}/oauth2/token`);
    assert.equal(discovery.jwks_uri, `${idp.issuer}/.well-known/jwks.json`);
    assert.deepEqual(discovery.grant_types_supported, ["client_credentials", "password"]);
    assert.deepEqual(discovery.id_token_signing_alg_values_supported, ["ES256"]);
  });
});

describe("token client", () => {
  let idp: IdpServer;

  before(async () => {
    idp = await createIdpServer({
      scryptCost: cheap,
      tokenLifetimeSec: 120,
      accounts: {
        clients: [{ clientId: "cli", clientSecret: "cli secret:with+odd&chars", scopes: ["a", "b"] }],
        serviceAccounts: [{ username: "user@example", password: "p@ss word:1", scopes: ["a"] }],
      },
    });
    await idp.listen();
  });

  after(() => idp.close());

  it("gets tokens with both grants, form-encoding Basic credentials", async () => {
    const cc = await requestToken({
      tokenUrl: idp.tokenEndpoint,
      grant: { type: "client_credentials", clientId: "cli", clientSecret: "cli secret:with+odd&chars" },
      scope: "b",
    });
    assert.equal(cc.scope, "b");
    assert.equal(cc.expiresIn, 120);
    const pw = await requestToken({
      tokenUrl: idp.tokenEndpoint,
      grant: { type: "password", username: "user@example", password: "p@ss word:1" },
      audience: "authority",
    });
    assert.equal(decodeJwt(pw.accessToken).sub, "user@example");
  });

  it("reports the endpoint's error code and an unreachable endpoint", async () => {
    await assert.rejects(
      requestToken({
        tokenUrl: idp.tokenEndpoint,
        grant: { type: "password", username: "user@example", password: "nope-nope" },
      }),
      (error: unknown) =>
        error instanceof TokenRequestError &&
        error.code === "invalid_grant" &&
        error.status === 400 &&
        !error.message.includes("nope-nope"),
    );
    const closed = await createIdpServer({ scryptCost: cheap });
    const closedUrl = await closed.listen();
    await closed.close();
    await assert.rejects(
      requestToken({
        tokenUrl: `${closedUrl}/oauth2/token`,
        grant: { type: "client_credentials", clientId: "c", clientSecret: "s" },
      }),
      (error: unknown) => error instanceof TokenRequestError && error.code === "token_endpoint_unavailable",
    );
  });
});
