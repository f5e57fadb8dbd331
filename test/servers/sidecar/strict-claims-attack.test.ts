/**
 * Attack: a token whose partner claim is malformed (an array, empty, whitespace, a number, an
 * object, null, very long) was read as "no partner", i.e. unscoped: a sidecar token of one
 * partner read another partner's auth-profile secret in plain text, and an agent token of
 * another partner was admitted as a platform-vouched subject. A malformed partner or role
 * claim now makes the token invalid (401 invalid_token / ext_authz invalid_token) on the
 * authority's sidecar routes, its admin routes and the sidecar's Check alike.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { type TokenForge, tokenForge } from "../../helpers/forge-token.ts";
import {
  AGENT,
  CAPABILITY,
  deniedBody,
  PARTNER,
  PROFILE,
  type SidecarHandle,
  startWorld,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

/** Partner claim values that do not name exactly one partner. */
export const malformedPartnerClaim = (): fc.Arbitrary<unknown> =>
  fc.oneof(
    fc.constantFrom(
      [],
      [PARTNER],
      [PARTNER, "globex"],
      "",
      " ",
      "\t",
      ` ${PARTNER}`,
      `${PARTNER} `,
      null,
      0,
      1,
      true,
      {},
    ),
    fc.array(fc.string(), { minLength: 1, maxLength: 3 }),
    fc.integer(),
    fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 })),
    fc.stringMatching(/^\s+$/),
    fc.constant("p".repeat(70)),
    fc.constant("x".repeat(100_000).slice(0, 4000)),
  );

/** Role claim values that are not a list of role names (each a non-empty token). */
export const malformedRolesClaim = (): fc.Arbitrary<unknown> =>
  fc.oneof(
    fc.constantFrom(
      [],
      [""],
      [" "],
      ["sidecar", ""],
      [["sidecar"]],
      [{ role: "sidecar" }],
      [7],
      "sidecar",
      null,
      0,
      {},
    ),
    fc
      .array(fc.oneof(fc.integer(), fc.constant(null), fc.stringMatching(/^\s*$/)), {
        minLength: 1,
        maxLength: 3,
      })
      .map((bad) => ["sidecar", ...bad]),
    fc.constant(["sidecar", " admin"]),
    fc.constant(["x".repeat(5000)]),
  );

describe("a malformed partner or role claim makes the token invalid, never unscoped", () => {
  let world: World;
  let sidecar: SidecarHandle;
  let forge: TokenForge;
  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
    forge = tokenForge(world.idp);
  });
  after(() => world.close());

  /** Signed by the world's real issuer with these claims (and roles, when given). */
  const tokenWith = (subject: string, claims: Record<string, unknown>, roles?: unknown) =>
    forge.signed(subject, roles === undefined ? claims : { ...claims, roles });

  const get = async (path: string, token: string) => {
    const response = await fetch(`${world.authorityUrl}${path}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    return { status: response.status, text: await response.text() };
  };

  test("a sidecar token of another partner cannot read this partner's auth-profile secret", async () => {
    await fc.assert(
      fc.asyncProperty(malformedPartnerClaim(), async (value) => {
        const token = await tokenWith("sidecar-globex", { partner_id: value }, ["sidecar"]);
        for (const path of [
          `/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`,
          `/v1/sidecar/policies/${AGENT}`,
          `/v1/sidecar/capabilities/${PARTNER}/${CAPABILITY}`,
        ]) {
          const reply = await get(path, token);
          assert.equal(reply.status, 401, `${path} with partner_id ${JSON.stringify(value)}: ${reply.text}`);
          assert.equal(JSON.parse(reply.text).error, "invalid_token");
          assert.ok(!reply.text.includes(UPSTREAM_SECRET));
        }
      }),
      { numRuns: 25 },
    );
  });

  test("a partner admin token with a malformed partner claim is refused, not an admin of no partner", async () => {
    for (const value of [[PARTNER], "", " ", null, 7]) {
      const token = await tokenWith("acme-admin", { partner_id: value }, ["partner_admin"]);
      const reply = await get(`/partners/${PARTNER}/users`, token);
      assert.equal(reply.status, 401, `partner_id ${JSON.stringify(value)}: ${reply.text}`);
    }
  });

  test("a role claim of the wrong type, empty or holding an empty role is refused", async () => {
    await fc.assert(
      fc.asyncProperty(malformedRolesClaim(), async (roles) => {
        const token = await tokenWith("sidecar-x", {}, roles);
        const reply = await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, token);
        assert.equal(reply.status, 401, `roles ${JSON.stringify(roles)}: ${reply.text}`);
        assert.ok(!reply.text.includes(UPSTREAM_SECRET));
      }),
      { numRuns: 25 },
    );
    // The well-formed claim is still read as it was (with the capability of the pod's map).
    const sidecarToken = await tokenWith(
      "sidecar-x",
      { partner_id: PARTNER, scope: `authority/sidecar.capability:${CAPABILITY}` },
      ["sidecar"],
    );
    assert.equal((await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, sidecarToken)).status, 200);
  });

  test("an agent token of another partner is not admitted to a platform-vouched subject through the sidecar", async () => {
    await fc.assert(
      fc.asyncProperty(malformedPartnerClaim(), async (value) => {
        const decision = await sidecar.check({ token: await tokenWith(AGENT, { partner_id: value }) });
        assert.equal(decision.http_response, "denied_response", `partner_id ${JSON.stringify(value)}`);
        assert.equal(deniedBody(decision).reason, "invalid_token");
      }),
      { numRuns: 25 },
    );
    // The same subject's own token (no partner claim, vouched) is still allowed.
    assert.equal((await sidecar.check({ token: world.tokens.agent })).http_response, "ok_response");
  });
});
