import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from "jose";
import { AuthorityError } from "../../src/errors.ts";
import {
  IdentityConfigError,
  TokenVerificationError,
  tokenErrorToAuthorityError,
} from "../../src/identity/errors.ts";
import { createJwtVerifier, type JwtVerifierOptions } from "../../src/identity/jwt-verifier.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<TokenVerificationError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(
      error instanceof TokenVerificationError,
      `expected TokenVerificationError, got ${String(error)}`,
    );
    assert.equal(error.code, code);
    return error;
  }
  assert.fail(`expected rejection with ${code}`);
}

function listenOn(server: Server, port = 0): Promise<number> {
  return new Promise((resolve) =>
    server.listen(port, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)),
  );
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

describe("createJwtVerifier against the development IdP over HTTP", () => {
  let idp: IdpServer;
  let dir: string;
  let options: JwtVerifierOptions;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-verifier-"));
    idp = await createIdpServer({ keysDir: join(dir, "keys") });
    await idp.listen();
    options = {
      issuer: idp.issuer,
      audience: "authority",
      jwks: { url: idp.jwksUri, timeoutMs: 2000 },
      requireTokenUse: "access",
      tenant: "t1",
    };
  });

  after(async () => {
    await idp.close();
    await rm(dir, { recursive: true, force: true });
  });

  const issue = (overrides: Partial<Parameters<IdpServer["issueToken"]>[0]> = {}) =>
    idp.issueToken({
      subject: "agent-7",
      scopes: ["read", "write"],
      tenant: "t1",
      roles: ["admin"],
      clientId: "c1",
      ...overrides,
    });

  const signWithIdpKey = (payload: JWTPayload, header: Record<string, unknown> = {}) => {
    const key = idp.keys.current();
    return new SignJWT(payload)
      .setProtectedHeader({ alg: "ES256", kid: key.kid, ...header })
      .sign(key.privateKey);
  };

  const baseClaims = (): JWTPayload => {
    const now = Math.floor(Date.now() / 1000);
    return {
      iss: idp.issuer,
      aud: "authority",
      sub: "agent-7",
      iat: now,
      nbf: now,
      exp: now + 300,
      token_use: "access",
      tenant: "t1",
    };
  };

  it("verifies a token and returns its claims", async () => {
    const { accessToken } = await issue();
    const verified = await createJwtVerifier(options).verify(accessToken);
    assert.equal(verified.subject, "agent-7");
    assert.equal(verified.issuer, idp.issuer);
    assert.deepEqual(verified.audience, ["authority"]);
    assert.deepEqual(verified.scopes, ["read", "write"]);
    assert.deepEqual(verified.roles, ["admin"]);
    assert.equal(verified.tenant, "t1");
    assert.equal(verified.clientId, "c1");
    assert.equal(verified.tokenUse, "access");
    assert.ok(verified.expiresAt.getTime() > Date.now());
    assert.equal(typeof verified.jwtId, "string");
    assert.equal(verified.claims.sub, "agent-7");
  });

  it("accepts a local JWKS object and an audience list", async () => {
    const { accessToken } = await issue({ audience: "partner-api" });
    const verifier = createJwtVerifier({
      ...options,
      audience: ["authority", "partner-api"],
      jwks: idp.keys.jwks(),
    });
    assert.equal((await verifier.verify(accessToken)).subject, "agent-7");
  });

  it("rejects alg none", async () => {
    const kid = idp.keys.current().kid;
    const token = `${b64({ alg: "none", kid })}.${b64(baseClaims())}.`;
    await rejectsWith(createJwtVerifier(options).verify(token), "token_alg_not_allowed");
  });

  it("rejects HS256 signed with the public key material", async () => {
    const jwk = idp.keys.jwks().keys[0];
    assert.ok(jwk);
    const secret = new TextEncoder().encode(JSON.stringify(jwk));
    const token = await new SignJWT(baseClaims())
      .setProtectedHeader({ alg: "HS256", kid: jwk.kid ?? "" })
      .sign(secret);
    await rejectsWith(createJwtVerifier(options).verify(token), "token_alg_not_allowed");
  });

  it("rejects an allowed algorithm that is not on this verifier's list", async () => {
    const { accessToken } = await issue();
    await rejectsWith(
      createJwtVerifier({ ...options, algorithms: ["RS256"] }).verify(accessToken),
      "token_alg_not_allowed",
    );
  });

  it("rejects a tampered payload and a foreign key using a known kid", async () => {
    const { accessToken } = await issue();
    const [header, , signature] = accessToken.split(".");
    const forged = `${header}.${b64({ ...baseClaims(), sub: "someone-else" })}.${signature}`;
    await rejectsWith(createJwtVerifier(options).verify(forged), "token_bad_signature");

    const { privateKey } = await generateKeyPair("ES256");
    const foreign = await new SignJWT(baseClaims())
      .setProtectedHeader({ alg: "ES256", kid: idp.keys.current().kid })
      .sign(privateKey);
    await rejectsWith(createJwtVerifier(options).verify(foreign), "token_bad_signature");
  });

  it("rejects an expired token, and one not yet valid (nbf or iat in the future)", async () => {
    const { accessToken, expiresAt } = await issue({ lifetimeSec: 60 });
    const later = new Date(expiresAt.getTime() + 31_000);
    await rejectsWith(
      createJwtVerifier({ ...options, now: () => later }).verify(accessToken),
      "token_expired",
    );
    // Within the clock tolerance it still verifies.
    const justAfter = new Date(expiresAt.getTime() + 10_000);
    await createJwtVerifier({ ...options, now: () => justAfter }).verify(accessToken);

    const future = await issue({ notBefore: new Date(Date.now() + 600_000) });
    await rejectsWith(createJwtVerifier(options).verify(future.accessToken), "token_not_yet_valid");

    const claims = baseClaims();
    const iatFuture = await signWithIdpKey({ ...claims, nbf: undefined, iat: (claims.iat ?? 0) + 600 });
    await rejectsWith(createJwtVerifier(options).verify(iatFuture), "token_not_yet_valid");
  });

  it("enforces maxTokenAgeSec", async () => {
    const { accessToken } = await issue();
    const later = new Date(Date.now() + 200_000);
    await rejectsWith(
      createJwtVerifier({ ...options, maxTokenAgeSec: 60, now: () => later }).verify(accessToken),
      "token_expired",
    );
  });

  it("rejects a wrong issuer even when signed with the same key", async () => {
    const impostor = await createIdpServer({
      issuer: "https://impostor.example",
      keysDir: join(dir, "keys"),
    });
    assert.equal(impostor.keys.current().kid, idp.keys.current().kid);
    const { accessToken } = await impostor.issueToken({ subject: "agent-7", tenant: "t1" });
    await rejectsWith(createJwtVerifier(options).verify(accessToken), "token_issuer");
    await impostor.close();
  });

  it("rejects a wrong audience", async () => {
    const { accessToken } = await issue({ audience: "some-other-api" });
    await rejectsWith(createJwtVerifier(options).verify(accessToken), "token_audience");
  });

  it("rejects a token_use other than access, and a typ not allowed", async () => {
    const { accessToken } = await issue({ tokenUse: "id" });
    await rejectsWith(createJwtVerifier(options).verify(accessToken), "token_use");
    const noUse = await signWithIdpKey({ ...baseClaims(), token_use: undefined });
    await rejectsWith(createJwtVerifier(options).verify(noUse), "token_use");
    // Without requireTokenUse the same token is fine.
    const { requireTokenUse: _dropped, ...withoutUse } = options;
    await createJwtVerifier(withoutUse).verify(noUse);

    const plainJwt = await signWithIdpKey(baseClaims(), { typ: "JWT" });
    await rejectsWith(
      createJwtVerifier({ ...options, allowedTypes: ["at+jwt"] }).verify(plainJwt),
      "token_use",
    );
    const atJwt = await issue();
    await createJwtVerifier({ ...options, allowedTypes: ["application/at+jwt"] }).verify(atJwt.accessToken);
  });

  it("rejects a missing or different tenant, with a custom tenant claim too", async () => {
    const { tenant: _dropped, ...rest } = { subject: "agent-7", tenant: "t1" };
    const missing = await idp.issueToken(rest);
    await rejectsWith(createJwtVerifier(options).verify(missing.accessToken), "token_tenant");
    const other = await issue({ tenant: "t2" });
    await rejectsWith(createJwtVerifier(options).verify(other.accessToken), "token_tenant");

    const custom = await signWithIdpKey({ ...baseClaims(), tenant: undefined, "custom:tenant": "t9" });
    const verified = await createJwtVerifier({
      ...options,
      tenant: undefined,
      tenantClaim: "custom:tenant",
    }).verify(custom);
    assert.equal(verified.tenant, "t9");
    await rejectsWith(
      createJwtVerifier({ ...options, tenant: undefined, tenantClaim: "custom:tenant" }).verify(
        missing.accessToken,
      ),
      "token_tenant",
    );
  });

  it("rejects a missing or empty subject", async () => {
    await rejectsWith(
      createJwtVerifier(options).verify(await signWithIdpKey({ ...baseClaims(), sub: undefined })),
      "token_subject",
    );
    await rejectsWith(
      createJwtVerifier(options).verify(await signWithIdpKey({ ...baseClaims(), sub: "" })),
      "token_subject",
    );
    await rejectsWith(
      createJwtVerifier(options).verify(await signWithIdpKey({ ...baseClaims(), sub: "  " })),
      "token_subject",
    );
  });

  it("enforces requiredScopes", async () => {
    const { accessToken } = await issue({ scopes: ["read"] });
    await rejectsWith(
      createJwtVerifier({ ...options, requiredScopes: ["write"] }).verify(accessToken),
      "token_scope",
    );
    await createJwtVerifier({ ...options, requiredScopes: ["read"] }).verify(accessToken);
  });

  it("treats unknown, missing, path-like and SQL-like kids as not found", async () => {
    const verifier = createJwtVerifier({ ...options, jwks: { url: idp.jwksUri, cooldownMs: 0 } });
    for (const kid of ["nope", "../../../etc/passwd", "' OR 1=1 --", "x".repeat(300)]) {
      const token = await signWithIdpKey(baseClaims(), { kid });
      await rejectsWith(verifier.verify(token), "token_unknown_kid");
    }
    const key = idp.keys.current();
    const noKid = await new SignJWT(baseClaims()).setProtectedHeader({ alg: "ES256" }).sign(key.privateKey);
    await rejectsWith(verifier.verify(noKid), "token_unknown_kid");
  });

  it("rejects oversize and malformed tokens before any key lookup", async () => {
    const verifier = createJwtVerifier(options);
    await rejectsWith(verifier.verify("a".repeat(9000)), "token_too_large");
    const huge = await issue({ claims: { padding: "x".repeat(9000) } });
    await rejectsWith(verifier.verify(huge.accessToken), "token_too_large");
    for (const bad of ["", "abc", "a.b", "a.b.c.d", "!!.??.xx", `${b64("not an object")}.${b64({})}.sig`]) {
      await rejectsWith(verifier.verify(bad), "token_malformed");
    }
  });

  it("never puts the token into the error message", async () => {
    const { accessToken } = await issue({ audience: "elsewhere" });
    const error = await rejectsWith(createJwtVerifier(options).verify(accessToken), "token_audience");
    for (const part of accessToken.split(".")) assert.ok(!error.message.includes(part));
  });
});

describe("JWKS availability", () => {
  it("fails closed with jwks_unavailable while the JWKS server is down, then recovers", async () => {
    const dir = await mkdtemp(join(tmpdir(), "authority-jwks-down-"));
    try {
      const first = await createIdpServer({ keysDir: dir });
      const url = await first.listen();
      const port = Number(new URL(url).port);
      const { accessToken } = await first.issueToken({ subject: "s", tenant: "t1" });
      const issuer = first.issuer;
      await first.close();

      const verifier = createJwtVerifier({
        issuer,
        audience: "authority",
        jwks: `${issuer}/.well-known/jwks.json`,
      });
      const down = await rejectsWith(verifier.verify(accessToken), "jwks_unavailable");
      assert.ok(down.unavailable);
      const mapped = tokenErrorToAuthorityError(down, "invalid_token");
      assert.equal(mapped.code, "upstream_unavailable");
      assert.equal(mapped.status, 503);

      // The same keys come back on the same address: the same verifier recovers.
      const second = await createIdpServer({ keysDir: dir, issuer });
      await second.listen({ port });
      try {
        assert.equal((await verifier.verify(accessToken)).subject, "s");
      } finally {
        await second.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("reports a JWKS that answers 500, non-JSON, a bad key set, or nothing in time as jwks_unavailable", async () => {
    const { privateKey } = await generateKeyPair("ES256", { extractable: true });
    const token = await new SignJWT({
      sub: "s",
      exp: Math.floor(Date.now() / 1000) + 60,
      iss: "https://i.example",
      aud: "a",
    })
      .setProtectedHeader({ alg: "ES256", kid: "k1" })
      .sign(privateKey);
    const privateJwk = await exportJWK(privateKey);
    const answers: Record<string, (res: import("node:http").ServerResponse) => void> = {
      "/500": (res) => res.writeHead(500).end("{}"),
      "/html": (res) => res.writeHead(200, { "content-type": "text/html" }).end("<html>"),
      "/private": (res) => res.writeHead(200).end(JSON.stringify({ keys: [{ ...privateJwk, kid: "k1" }] })),
      "/hang": () => {},
    };
    const server = createServer((req, res) => answers[req.url ?? ""]?.(res));
    const port = await listenOn(server);
    try {
      for (const path of Object.keys(answers)) {
        const verifier = createJwtVerifier({
          issuer: "https://i.example",
          audience: "a",
          jwks: { url: `http://127.0.0.1:${port}${path}`, timeoutMs: 300 },
        });
        await rejectsWith(verifier.verify(token), "jwks_unavailable");
      }
    } finally {
      await closeServer(server);
    }
  });
});

describe("signing-key rotation", () => {
  it("keeps verifying tokens of the old key during the grace period and not after", async () => {
    let clock = Date.now();
    const idp = await createIdpServer({
      rotationGraceSec: 300,
      tokenLifetimeSec: 900,
      now: () => new Date(clock),
    });
    await idp.listen();
    const publishedKids = async () =>
      ((await (await fetch(idp.jwksUri)).json()) as { keys: Array<{ kid: string }> }).keys
        .map((k) => k.kid)
        .sort();
    try {
      const verifierAt = (at: () => number, cacheMaxAgeMs?: number) =>
        createJwtVerifier({
          issuer: idp.issuer,
          audience: "authority",
          jwks: { url: idp.jwksUri, ...(cacheMaxAgeMs === undefined ? {} : { cacheMaxAgeMs }) },
          now: () => new Date(at()),
        });
      const before = await idp.issueToken({ subject: "early" });
      const oldKid = idp.keys.current().kid;
      // One verifier keeps its fetched key set (default cache), one refetches every time.
      const cached = verifierAt(() => clock);
      const uncached = verifierAt(() => clock, 0);
      await cached.verify(before.accessToken);
      await uncached.verify(before.accessToken);

      const newKid = await idp.rotateSigningKey();
      assert.notEqual(newKid, oldKid);
      assert.equal(idp.keys.current().kid, newKid);
      const afterRotation = await idp.issueToken({ subject: "late" });
      // The new key was published before it signed: the cached verifier needs no refetch.
      assert.equal((await cached.verify(afterRotation.accessToken)).subject, "late");

      clock += 100_000; // inside the grace period
      const during = await publishedKids();
      assert.ok(during.includes(oldKid) && during.includes(newKid));
      assert.equal((await verifierAt(() => clock).verify(before.accessToken)).subject, "early");
      assert.equal((await uncached.verify(before.accessToken)).subject, "early");
      assert.equal((await uncached.verify(afterRotation.accessToken)).subject, "late");

      clock += 300_000; // past the grace period, before the old token's own expiry
      const after = await publishedKids();
      assert.ok(!after.includes(oldKid) && after.includes(newKid));
      await rejectsWith(verifierAt(() => clock).verify(before.accessToken), "token_unknown_kid");
      await rejectsWith(uncached.verify(before.accessToken), "token_unknown_kid");
      assert.equal((await verifierAt(() => clock).verify(afterRotation.accessToken)).subject, "late");
    } finally {
      await idp.close();
    }
  });
});

describe("verifier options", () => {
  const jwks = { keys: [] };
  it("refuses none, HS* and unknown algorithms, and bad options, at construction", () => {
    for (const algorithms of [["none"], ["HS256"], ["ES256", "HS512"], ["RSA-OAEP"], []]) {
      assert.throws(
        () => createJwtVerifier({ issuer: "i", audience: "a", jwks, algorithms }),
        IdentityConfigError,
      );
    }
    assert.throws(() => createJwtVerifier({ issuer: "", audience: "a", jwks }), IdentityConfigError);
    assert.throws(() => createJwtVerifier({ issuer: "i", audience: [], jwks }), IdentityConfigError);
    assert.throws(
      () => createJwtVerifier({ issuer: "i", audience: "a", jwks: "ftp://x/jwks" }),
      IdentityConfigError,
    );
    assert.throws(
      () => createJwtVerifier({ issuer: "i", audience: "a", jwks: "https://u:p@x/jwks" }),
      IdentityConfigError,
    );
    assert.throws(
      () => createJwtVerifier({ issuer: "i", audience: "a", jwks, clockToleranceSec: -1 }),
      IdentityConfigError,
    );
    assert.throws(
      () => createJwtVerifier({ issuer: "i", audience: "a", jwks: { url: "https://x", timeoutMs: 0 } }),
      IdentityConfigError,
    );
    const verifier = createJwtVerifier({ issuer: "i", audience: "a", jwks: "https://idp.example/jwks" });
    assert.equal(verifier.issuer, "i");
  });

  it("maps failures to the public codes", () => {
    const rejected = tokenErrorToAuthorityError(
      new TokenVerificationError("token_expired", "x"),
      "invalid_user_assertion",
    );
    assert.ok(rejected instanceof AuthorityError);
    assert.equal(rejected.code, "invalid_user_assertion");
    assert.equal(rejected.status, 401);
    assert.equal(tokenErrorToAuthorityError(new Error("boom"), "invalid_token").code, "invalid_token");
  });
});
