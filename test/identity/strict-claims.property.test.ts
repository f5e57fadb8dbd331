/**
 * Every place a partner, tenant, role or client claim is read, over arbitrary claim values
 * (arrays, empty, whitespace, numbers, objects, null, very long strings): the value is either
 * read as exactly the one well-formed value it holds, or the token is invalid. A present claim
 * is never read as absent — that would leave the token unscoped.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import { idPatterns } from "../../src/core/ids.ts";
import { readClientId, readPartnerClaim, readRoles, readTenantClaim } from "../../src/identity/claims.ts";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { createJwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { createTrustedIssuersVerifier, defaultClaimMapping } from "../../src/identity/trusted-issuers.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import { type TokenForge, tokenForge } from "../helpers/forge-token.ts";

const PARTNER_ID = new RegExp(idPatterns.partner);

/** Claim values of every JSON shape, weighted towards the ones that were read leniently. */
const claimValue = (): fc.Arbitrary<unknown> =>
  fc.oneof(
    fc.constantFrom(
      "",
      " ",
      "\t\n",
      "acme",
      " acme",
      "acme ",
      "ac me",
      "acme\u0000",
      null,
      0,
      -1,
      true,
      false,
    ),
    fc.constantFrom([], ["acme"], ["acme", "globex"], [""], [null], {}, { partner_id: "acme" }),
    fc.string(),
    fc.stringMatching(/^[A-Za-z0-9._-]{0,80}$/),
    fc.integer(),
    fc.double(),
    fc.array(fc.oneof(fc.string(), fc.integer(), fc.constant(null)), { maxLength: 4 }),
    fc.dictionary(fc.string({ maxLength: 6 }), fc.string({ maxLength: 6 }), { maxKeys: 3 }),
    fc.constant("a".repeat(5000)),
  );

/** What a reader made of a value: the value it read, or "invalid" (it threw or said so). */
function outcome(read: () => unknown): unknown {
  try {
    const value = read();
    return value === undefined ? "invalid" : value;
  } catch (error) {
    assert.ok(error instanceof TokenVerificationError, String(error));
    return "invalid";
  }
}

describe("claims are read strictly (pure readers)", () => {
  it("partner: exactly one partner id, else invalid", () => {
    fc.assert(
      fc.property(claimValue(), (value) => {
        const read = outcome(() => readPartnerClaim({ partner_id: value }, "partner_id"));
        if (typeof value === "string" && PARTNER_ID.test(value)) assert.equal(read, value);
        else assert.equal(read, "invalid");
      }),
      { numRuns: 500 },
    );
    assert.equal(readPartnerClaim({}, "partner_id"), undefined);
  });

  it("tenant: one non-empty string without surrounding whitespace, else invalid", () => {
    fc.assert(
      fc.property(claimValue(), (value) => {
        const read = outcome(() => readTenantClaim({ tenant: value }, "tenant"));
        if (read !== "invalid") {
          assert.equal(read, value);
          assert.ok(typeof value === "string" && value.length > 0 && value.trim() === value);
        } else {
          assert.ok(
            typeof value !== "string" ||
              value.trim() !== value ||
              value === "" ||
              value.length > 1024 ||
              /\p{Cc}/u.test(value),
          );
        }
      }),
      { numRuns: 500 },
    );
  });

  it("roles: a non-empty array of role names, else invalid", () => {
    fc.assert(
      fc.property(claimValue(), (value) => {
        const read = outcome(() => readRoles({ roles: value }));
        if (read === "invalid") return;
        assert.ok(Array.isArray(value) && value.length > 0);
        for (const role of value as unknown[]) {
          assert.ok(typeof role === "string" && role.length > 0 && !/\s/.test(role));
        }
        assert.deepEqual(read, [...new Set(value as string[])]);
      }),
      { numRuns: 500 },
    );
  });

  it("client id: one non-empty string, else invalid", () => {
    fc.assert(
      fc.property(claimValue(), claimValue(), (clientId, azp) => {
        const read = outcome(() => readClientId({ client_id: clientId, azp }));
        if (read !== "invalid") assert.equal(read, clientId);
        else assert.ok(typeof clientId !== "string" || clientId === "" || clientId.trim() !== clientId);
      }),
      { numRuns: 300 },
    );
  });
});

describe("claims are read strictly (verifiers, on signed tokens)", () => {
  let idp: IdpServer;
  let forge: TokenForge;
  before(async () => {
    idp = await createIdpServer({ audience: "authority" });
    await idp.listen();
    forge = tokenForge(idp);
  });
  after(() => idp.close());

  /** The verified token, or "invalid" (a 401 for every caller). */
  async function verified(
    verify: () => Promise<{
      partnerId?: string;
      roles: readonly string[];
      claims: Readonly<Record<string, unknown>>;
    }>,
  ) {
    try {
      return await verify();
    } catch (error) {
      assert.ok(error instanceof TokenVerificationError, String(error));
      assert.equal(error.unavailable, false);
      return "invalid" as const;
    }
  }

  it("one issuer (claims partner_id and roles): a present claim is read as its one value or the token is invalid", async () => {
    const verifier = createJwtVerifier({ issuer: idp.issuer, audience: "authority", jwks: idp.jwksUri });
    await fc.assert(
      fc.asyncProperty(claimValue(), claimValue(), async (partner, roles) => {
        const result = await verified(async () =>
          verifier.verify(await forge.signed("agent-1", { partner_id: partner, roles })),
        );
        if (result === "invalid") return;
        assert.equal(result.partnerId, partner);
        assert.ok(Array.isArray(roles));
        assert.deepEqual(result.roles, [...new Set(roles as string[])]);
      }),
      { numRuns: 150 },
    );
  });

  it("several issuers with a mapped partner and roles claim: the same, and partner_id cannot be smuggled", async () => {
    const verifier = createTrustedIssuersVerifier([
      {
        issuer: idp.issuer,
        jwksUrl: idp.jwksUri,
        audience: ["authority"],
        claims: { ...defaultClaimMapping, partnerId: "org", roles: "groups" },
        tokenUse: "access",
        vouchedSubjects: false,
      },
    ]);
    await fc.assert(
      fc.asyncProperty(claimValue(), claimValue(), async (org, groups) => {
        const token = await forge.signed("agent-1", { org, groups, partner_id: "smuggled" });
        const result = await verified(() => verifier.verify(token));
        if (result === "invalid") return;
        assert.equal(result.partnerId, org);
        assert.equal(result.claims.partner_id, org);
        assert.deepEqual(result.roles, [...new Set(groups as string[])]);
      }),
      { numRuns: 150 },
    );
    // Absent claims are simply absent: no partner, no roles.
    const bare = await verifier.verify(await forge.signed("agent-1", { partner_id: "smuggled" }));
    assert.equal(bare.partnerId, undefined);
    assert.equal(bare.claims.partner_id, undefined);
    assert.deepEqual(bare.roles, []);
  });
});
