/**
 * The sidecar side of per-partner subject ids: partner B pre-created the subject under the
 * `sub` partner A's principals use; A's own subject (`acme~<sub>`, in A's namespace) is what
 * A's tokens reach through ext_authz, B's tokens reach only B's subject, and a token without
 * a partner claim reaches neither.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createPartner } from "../../../src/admin/partners.ts";
import { createSubject } from "../../../src/admin/subjects.ts";
import { deniedBody, PARTNER, type SidecarHandle, startWorld, type World } from "./world.ts";

describe("sidecar ext_authz: a sub pre-claimed by another partner takes nothing from this one", () => {
  let world: World;
  let sidecar: SidecarHandle;
  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
  });
  after(() => world.close());

  const tokenOf = async (subject: string, partnerId?: string) =>
    (
      await world.idp.issueToken({
        subject,
        ...(partnerId === undefined ? {} : { claims: { partner_id: partnerId } }),
      })
    ).accessToken;

  test("B squats the sub first; A's subject and policy still serve A's user, and only A's", async () => {
    await createPartner(world.context, { partner_id: "globex", name: "Globex" });
    const squat = await createSubject(world.context, "globex", {
      subject_id: "alice",
      subject_type: "user",
      display_name: "squat",
      identity: "partner_token",
    });
    assert.equal(squat.subject_id, "alice");
    const own = await createSubject(world.context, PARTNER, {
      subject_id: "alice",
      subject_type: "user",
      display_name: "alice",
      identity: "partner_token",
    });
    assert.equal(own.subject_id, `${PARTNER}~alice`);
    await world.assign(own.subject_id, {});

    const acme = await sidecar.check({ token: await tokenOf("alice", PARTNER) });
    assert.equal(acme.http_response, "ok_response", JSON.stringify(acme));
    for (const token of [await tokenOf("alice", "globex"), await tokenOf("alice")]) {
      const other = await sidecar.check({ token });
      assert.equal(other.http_response, "denied_response");
      assert.equal(deniedBody(other).reason, "missing_policy");
    }
  });
});
