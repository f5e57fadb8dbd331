import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { putAuthProfile } from "../../../src/admin/auth-profiles.ts";
import { importOpenApi } from "../../../src/admin/capabilities.ts";
import { createPartner } from "../../../src/admin/partners.ts";
import { CAPABILITY, PARTNER, PROFILE, startWorld, UPSTREAM_SECRET, type World } from "./world.ts";

/**
 * Scoped sidecar credentials (decision 2513): a credential without a partner is refused on
 * every sidecar route unless the operator marked it platform-wide; a partner's sidecar reads
 * the upstream credentials of an auth profile only when a capability its credential names
 * (`authority/sidecar.capability:<id>`, its pod's capability map) uses that profile — never
 * another partner's, nor another capability's of its own partner.
 */
describe("sidecar credentials are scoped to a partner and its pod's capabilities", () => {
  const OTHER_PARTNER = "globex";
  const OTHER_CAPABILITY = "billing";
  const OTHER_PROFILE = "billing-key";
  const OTHER_SECRET = "billing-secret-0123456789";
  const GLOBEX_SECRET = "globex-secret-0123456789";
  let world: World;

  const get = async (path: string, token: string) => {
    const response = await fetch(`${world.authorityUrl}${path}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    return { status: response.status, text: await response.text() };
  };
  const sidecarToken = async (claims: Record<string, unknown>, scopes: string[] = [], roles = ["sidecar"]) =>
    (await world.idp.issueToken({ subject: "sidecar-x", roles, scopes, claims, lifetimeSec: 600 }))
      .accessToken;
  const capabilityScope = (id: string) => `authority/sidecar.capability:${id}`;

  before(async () => {
    world = await startWorld();
    const actor = { subject: "root-admin", requestId: "seed" };
    const staticProfile = (secret: string) => ({
      type: "static" as const,
      kind: "api_key" as const,
      in: "header" as const,
      name: "x-api-key",
      secret,
    });
    // Partner A's second capability, with its own profile.
    await putAuthProfile(world.context, PARTNER, OTHER_PROFILE, staticProfile(OTHER_SECRET));
    const document = {
      openapi: "3.0.3",
      info: { title: "Billing", version: "1" },
      paths: {
        "/invoices": { get: { operationId: "listInvoices", responses: { 200: { description: "ok" } } } },
      },
    };
    await importOpenApi(world.context, actor, PARTNER, {
      capability_id: OTHER_CAPABILITY,
      name: "Billing",
      document,
      upstream_base_url: world.upstream.url,
      auth_profile_ref: OTHER_PROFILE,
    });
    // Partner B, with a capability of the same id and a profile of the same name as A's.
    await createPartner(world.context, { partner_id: OTHER_PARTNER, name: "Globex" });
    await putAuthProfile(world.context, OTHER_PARTNER, PROFILE, staticProfile(GLOBEX_SECRET));
    await importOpenApi(world.context, actor, OTHER_PARTNER, {
      capability_id: CAPABILITY,
      name: "Orders",
      document,
      upstream_base_url: world.upstream.url,
      auth_profile_ref: PROFILE,
    });
  });
  after(() => world.close());

  test("a credential of partner A mapped to capability X reads X's secret, and neither Y's nor partner B's", async () => {
    const token = await sidecarToken({ partner_id: PARTNER }, [capabilityScope(CAPABILITY)]);
    const own = await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, token);
    assert.equal(own.status, 200, own.text);
    assert.match(own.text, new RegExp(UPSTREAM_SECRET));

    const otherCapability = await get(`/v1/sidecar/auth-profiles/${PARTNER}/${OTHER_PROFILE}`, token);
    assert.equal(otherCapability.status, 403, otherCapability.text);
    assert.doesNotMatch(otherCapability.text, new RegExp(OTHER_SECRET));

    const otherPartner = await get(`/v1/sidecar/auth-profiles/${OTHER_PARTNER}/${PROFILE}`, token);
    assert.equal(otherPartner.status, 403, otherPartner.text);
    assert.doesNotMatch(otherPartner.text, new RegExp(GLOBEX_SECRET));

    // Naming partner B's capability changes nothing: the capability is looked up in A.
    const spoofed = await sidecarToken({ partner_id: PARTNER }, [
      capabilityScope(CAPABILITY),
      capabilityScope(`../${OTHER_PARTNER}/${CAPABILITY}`),
    ]);
    assert.equal((await get(`/v1/sidecar/auth-profiles/${OTHER_PARTNER}/${PROFILE}`, spoofed)).status, 403);
  });

  test("a partner's credential that names no capability reads no secret", async () => {
    const token = await sidecarToken({ partner_id: PARTNER });
    const reply = await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, token);
    assert.equal(reply.status, 403, reply.text);
    assert.doesNotMatch(reply.text, new RegExp(UPSTREAM_SECRET));
  });

  test("an unscoped credential is refused on every sidecar route unless marked platform-wide", async () => {
    const unscoped = await sidecarToken({}, [capabilityScope(CAPABILITY)]);
    for (const path of [
      `/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`,
      `/v1/sidecar/auth-profiles/${OTHER_PARTNER}/${PROFILE}`,
      `/v1/sidecar/capabilities/${PARTNER}/${CAPABILITY}`,
      "/v1/sidecar/self",
    ]) {
      const reply = await get(path, unscoped);
      assert.equal(reply.status, 403, `${path}: ${reply.text}`);
      assert.match(reply.text, /sidecar_platform/);
    }
    const platform = await sidecarToken({}, [], ["sidecar", "sidecar_platform"]);
    assert.equal((await get(`/v1/sidecar/auth-profiles/${OTHER_PARTNER}/${PROFILE}`, platform)).status, 200);
    const platformScope = await sidecarToken({}, ["authority/sidecar", "authority/sidecar.platform"], []);
    assert.equal(
      (await get(`/v1/sidecar/auth-profiles/${PARTNER}/${OTHER_PROFILE}`, platformScope)).status,
      200,
    );
    // The platform-wide mark does not widen a partner's credential.
    const partnerMarked = await sidecarToken({ partner_id: PARTNER }, [], ["sidecar", "sidecar_platform"]);
    assert.equal((await get(`/v1/sidecar/auth-profiles/${PARTNER}/${PROFILE}`, partnerMarked)).status, 403);
  });
});
