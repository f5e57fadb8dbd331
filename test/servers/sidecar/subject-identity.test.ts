import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createSubject } from "../../../src/admin/subjects.ts";
import { AGENT, deniedBody, type SidecarHandle, startWorld, type World } from "./world.ts";

/**
 * Subject squatting through the sidecar: a subject stands only for the principals its
 * identity admits (docs/decisions/0701-subject-ownership.md), whatever the sidecar has cached.
 */
describe("sidecar ext_authz: a subject admits only its own principals", () => {
  let world: World;
  let sidecar: SidecarHandle;

  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
  });
  after(() => world.close());

  const tokenOf = async (subject: string, partnerId?: string, roles?: string[]) =>
    (
      await world.idp.issueToken({
        subject,
        ...(roles === undefined ? {} : { roles }),
        ...(partnerId === undefined ? {} : { claims: { partner_id: partnerId } }),
      })
    ).accessToken;

  test("a partner admin's subject named after the platform admin or another partner's agent admits neither", async () => {
    for (const subjectId of ["root-admin", "globex-agent"]) {
      await createSubject(world.context, "acme", {
        subject_id: subjectId,
        subject_type: "agent",
        display_name: subjectId,
        identity: "partner_token",
      });
      await world.assign(subjectId, {});
    }
    const admin = await sidecar.check({ token: await tokenOf("root-admin", undefined, ["admin"]) });
    assert.equal(admin.http_response, "denied_response");
    assert.equal(deniedBody(admin).reason, "missing_policy");
    const globex = await sidecar.check({ token: await tokenOf("globex-agent", "globex") });
    assert.equal(deniedBody(globex).reason, "missing_policy");
    // The partner's own principal (its claim names the partner) is the subject.
    const own = await sidecar.check({ token: await tokenOf("globex-agent", "acme") });
    assert.equal(own.http_response, "ok_response");
  });

  test("a cached policy is not handed to a token of the same sub from another partner", async () => {
    const vouched = await sidecar.check({ token: await tokenOf(AGENT) });
    assert.equal(vouched.http_response, "ok_response");
    const foreign = await sidecar.check({ token: await tokenOf(AGENT, "globex") });
    assert.equal(foreign.http_response, "denied_response");
    assert.equal(deniedBody(foreign).reason, "missing_policy");
  });
});
