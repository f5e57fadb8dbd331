import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from "jose";
import Provider from "oidc-provider";
import { createSubject } from "../../src/admin/subjects.ts";
import { parseTrustedIssuers, resolveTrustedIssuers } from "../../src/config/trusted-issuers.ts";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { requestToken } from "../../src/identity/token-client.ts";
import {
  createTrustedIssuersVerifier,
  type TrustedIssuersVerifier,
} from "../../src/identity/trusted-issuers.ts";
import {
  AGENT,
  deniedBody,
  PARTNER,
  type SidecarHandle,
  startWorld,
  type World,
} from "../servers/sidecar/world.ts";

/**
 * Two real issuers side by side: the development IdP (the primary issuer) and a real
 * oidc-provider (a platform's own OpenID provider) with its own JWKS, audience and claim
 * names. Tokens of both are accepted by authorize-invocation and by the sidecar's ext_authz;
 * the token's `iss` chooses whose keys are used, so no key of one issuer vouches for the other.
 */

const B_CLIENT = "b-agent";
const B_SECRET = "b-agent-secret-with-enough-entropy-0123456789";
const B_AUDIENCE = "urn:authority:b";
const B_KID = "platform-idp-es256";

type SigningKey = Awaited<ReturnType<typeof generateKeyPair>>["privateKey"];

/** authorize-invocation answers a token that was sent and refused (401). */
const REFUSED_TOKEN = "invalid_token";

interface IssuerB {
  readonly issuer: string;
  readonly jwksUri: string;
  readonly tokenEndpoint: string;
  readonly privateKey: SigningKey;
  close(): Promise<void>;
}

async function startIssuerB(): Promise<IssuerB> {
  const { privateKey } = await generateKeyPair("ES256", { extractable: true });
  const signingKey = { ...(await exportJWK(privateKey)), kid: B_KID, alg: "ES256", use: "sig" };
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: B_CLIENT,
        client_secret: B_SECRET,
        grant_types: ["client_credentials"],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: "client_secret_basic",
        id_token_signed_response_alg: "ES256",
        scope: "read",
      },
    ],
    jwks: { keys: [signingKey] },
    scopes: ["read"],
    ttl: { ClientCredentials: 300 },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => B_AUDIENCE,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: "read",
          audience: B_AUDIENCE,
          accessTokenFormat: "jwt",
          accessTokenTTL: 300,
          jwt: { sign: { alg: "ES256" } },
        }),
      },
    },
    // This provider names the partner `org` and the roles `groups`; a `partner_id` or `roles`
    // claim it might carry means nothing here (the claim mapping says so).
    extraTokenClaims: () => ({ token_use: "access", org: PARTNER, partner_id: "globex", roles: ["admin"] }),
  });
  server.on("request", provider.callback());
  const discovery = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as {
    jwks_uri: string;
    token_endpoint: string;
  };
  return {
    issuer,
    jwksUri: discovery.jwks_uri,
    tokenEndpoint: discovery.token_endpoint,
    privateKey,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe("several trusted issuers (dev IdP + oidc-provider)", () => {
  let b: IssuerB;
  let world: World;
  let sidecar: SidecarHandle;
  let verifier: TrustedIssuersVerifier;
  let devIssuer: string;

  before(async () => {
    b = await startIssuerB();
    world = await startWorld({
      verifier: (issuer) => {
        devIssuer = issuer;
        // Exactly what `trusted-issuers` in a config file becomes, beside the single-issuer settings.
        const list = parseTrustedIssuers(
          [
            {
              issuer: b.issuer,
              "jwks-url": b.jwksUri,
              audience: [B_AUDIENCE],
              "token-types": ["at+jwt", "jwt"],
              claims: { "partner-id": "org", roles: "groups" },
            },
          ],
          "trusted-issuers in test.yaml",
        );
        verifier = createTrustedIssuersVerifier(
          resolveTrustedIssuers({
            primary: { issuer, jwksUrl: `${issuer}/.well-known/jwks.json`, audience: "authority" },
            list,
          }),
        );
        return verifier;
      },
    });
    // The platform's provider's agent: a partner_token subject of acme (its `org` claim says acme).
    await createSubject(world.context, PARTNER, {
      subject_id: B_CLIENT,
      subject_type: "agent",
      display_name: "platform agent",
      identity: "partner_token",
    });
    await world.assign(B_CLIENT, {});
    sidecar = await world.startSidecar();
  });
  after(async () => {
    await world?.close();
    await b?.close();
  });

  const bToken = async () =>
    (
      await requestToken({
        tokenUrl: b.tokenEndpoint,
        grant: { type: "client_credentials", clientId: B_CLIENT, clientSecret: B_SECRET },
        scope: "read",
      })
    ).accessToken;

  /** A token signed with `key` under `kid`, claiming whatever `claims` say. */
  const forge = (key: SigningKey, kid: string, claims: JWTPayload) =>
    new SignJWT({ token_use: "access", ...claims })
      .setProtectedHeader({ alg: "ES256", kid, typ: "at+jwt" })
      .setIssuedAt()
      .setExpirationTime("5m")
      .sign(key);

  const authorize = async (token: string, subjectId: string) => {
    const response = await fetch(`${world.authorityUrl}/v1/authorize-invocation`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({
        subject: { subject_id: subjectId },
        capability_id: "orders",
        method: "GET",
        path: "/orders/42",
      }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  const rejectCode = async (token: string): Promise<string> => {
    try {
      await verifier.verify(token);
    } catch (error) {
      assert.ok(error instanceof TokenVerificationError);
      return error.code;
    }
    assert.fail("the token was accepted");
  };

  test("tokens of both issuers are accepted on authorize-invocation and on ext_authz", async () => {
    const fromB = await bToken();
    const allowedB = await authorize(fromB, B_CLIENT);
    assert.equal(allowedB.status, 200, JSON.stringify(allowedB.body));
    assert.equal(allowedB.body.status, "allowed");
    const checkB = await sidecar.check({ token: fromB });
    assert.equal(checkB.http_response, "ok_response");

    const fromDev = world.tokens.agent;
    const allowedDev = await authorize(fromDev, AGENT);
    assert.equal(allowedDev.body.status, "allowed");
    assert.equal((await sidecar.check({ token: fromDev })).http_response, "ok_response");
  });

  test("the claim mapping applies: org is the partner, groups the roles; partner_id and roles of issuer B mean nothing", async () => {
    const verified = await verifier.verify(await bToken());
    assert.equal(verified.issuer, b.issuer);
    assert.equal(verified.subject, B_CLIENT);
    assert.equal(verified.claims.partner_id, PARTNER);
    assert.deepEqual(verified.roles, []);
    assert.equal(verified.vouchable, false);
    // Its raw `roles: ["admin"]` gives no role: the admin route refuses it.
    const partners = await fetch(`${world.authorityUrl}/partners`, {
      headers: { authorization: `Bearer ${await bToken()}` },
    });
    assert.equal(partners.status, 403);
    await partners.arrayBuffer();
    // The mapped claim does: an auditor in `groups` reads the partners.
    const auditor = await forge(b.privateKey, B_KID, {
      iss: b.issuer,
      aud: B_AUDIENCE,
      sub: "b-auditor",
      groups: ["auditor"],
    });
    const listed = await fetch(`${world.authorityUrl}/partners`, {
      headers: { authorization: `Bearer ${auditor}` },
    });
    assert.equal(listed.status, 200);
    await listed.arrayBuffer();
  });

  test("a token signed by one issuer's key but claiming the other's iss is refused", async () => {
    const devKid = ((await (await fetch(`${devIssuer}/.well-known/jwks.json`)).json()) as { keys: JWK[] })
      .keys[0]?.kid as string;
    const claims = { aud: "authority", sub: AGENT, iss: devIssuer };
    // B's key under B's kid: the dev issuer's JWKS has no such key.
    const underOwnKid = await forge(b.privateKey, B_KID, claims);
    assert.equal(await rejectCode(underOwnKid), "token_unknown_kid");
    // B's key under the dev issuer's kid: the dev key does not verify it.
    const underDevKid = await forge(b.privateKey, devKid, claims);
    assert.equal(await rejectCode(underDevKid), "token_bad_signature");
    // An attacker's key under B's kid, claiming B: only B's JWKS is consulted.
    const { privateKey: attacker } = await generateKeyPair("ES256");
    const claimingB = await forge(attacker, B_KID, {
      aud: B_AUDIENCE,
      sub: B_CLIENT,
      iss: b.issuer,
      org: PARTNER,
    });
    assert.equal(await rejectCode(claimingB), "token_bad_signature");
    for (const token of [underOwnKid, underDevKid, claimingB]) {
      const refused = await authorize(token, AGENT);
      assert.equal(refused.status, 401);
      assert.equal(refused.body.reason, REFUSED_TOKEN);
      const check = await sidecar.check({ token });
      assert.equal(check.http_response, "denied_response");
      assert.equal(deniedBody(check).reason, "invalid_token");
    }
  });

  test("an unknown issuer is refused before any key is looked up", async () => {
    const { privateKey } = await generateKeyPair("ES256");
    const stranger = await forge(privateKey, B_KID, {
      iss: "http://127.0.0.1:9/unknown",
      aud: "authority",
      sub: AGENT,
    });
    assert.equal(await rejectCode(stranger), "token_issuer");
    const noIss = await forge(privateKey, B_KID, { aud: "authority", sub: AGENT });
    assert.equal(await rejectCode(noIss), "token_issuer");
    const refused = await authorize(stranger, AGENT);
    assert.equal(refused.status, 401);
    assert.equal(refused.body.reason, REFUSED_TOKEN);
    assert.equal(deniedBody(await sidecar.check({ token: stranger })).reason, "invalid_token");
  });

  test("each issuer's own audience is enforced", async () => {
    // B's key and iss with the dev issuer's audience: B accepts only its own.
    const wrongAudience = await forge(b.privateKey, B_KID, {
      iss: b.issuer,
      aud: "authority",
      sub: B_CLIENT,
      org: PARTNER,
    });
    assert.equal(await rejectCode(wrongAudience), "token_audience");
    assert.equal((await authorize(wrongAudience, B_CLIENT)).body.reason, REFUSED_TOKEN);
    assert.equal(deniedBody(await sidecar.check({ token: wrongAudience })).reason, "invalid_token");
    // And the dev IdP's token for B's audience is refused by the dev issuer.
    const devForB = (await world.idp.issueToken({ subject: AGENT, audience: B_AUDIENCE })).accessToken;
    assert.equal(await rejectCode(devForB), "token_audience");
  });

  test("a bare token of the second issuer does not stand for a platform-vouched subject of the same sub", async () => {
    // AGENT is platform_vouched (the platform admin vouched for the dev issuer's `sub`).
    const squat = await forge(b.privateKey, B_KID, { iss: b.issuer, aud: B_AUDIENCE, sub: AGENT });
    const refused = await authorize(squat, AGENT);
    assert.equal(refused.status, 403);
    assert.equal(refused.body.reason, "missing_policy");
    const check = await sidecar.check({ token: squat });
    assert.equal(deniedBody(check).reason, "missing_policy");
    // Naming another partner in the mapped claim does not help either.
    const other = await forge(b.privateKey, B_KID, {
      iss: b.issuer,
      aud: B_AUDIENCE,
      sub: AGENT,
      org: "globex",
    });
    assert.equal((await authorize(other, AGENT)).body.reason, "missing_policy");
    // A dev-issuer token of the same sub still is the subject.
    assert.equal((await authorize(world.tokens.agent, AGENT)).body.status, "allowed");
  });
});
