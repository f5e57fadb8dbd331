import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { checkMethod, type Decoded, envoyCheckRequest, unary } from "./grpc/helpers.ts";
import {
  CAPABILITY,
  OTHER_AGENT,
  type SidecarHandle,
  startWorld,
  UPSTREAM_HOST,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

/**
 * Authorization-only mode (issue 16, item 7): an assignment with the `none` auth profile is
 * decided and enforced like any other, but nothing is injected — ext_authz allows without
 * setting a credential and the forward proxy forwards without one. Whether the caller's own
 * `Authorization` reaches the upstream is the route's choice (`caller_authorization: keep`
 * in Envoy's context_extensions), removed by default.
 */

const headerPairs = (response: Decoded): Record<string, string> =>
  Object.fromEntries(
    (response.ok_response?.headers ?? []).map((h: { header: { key: string; value: string } }) => [
      h.header.key,
      h.header.value,
    ]),
  );

describe("authorization-only mode: the none auth profile", () => {
  let world: World;
  let sidecar: SidecarHandle;
  let token: string;

  before(async () => {
    world = await startWorld();
    await world.assign(OTHER_AGENT, { auth_profile_ref: "none" });
    token = world.tokens.otherAgent;
    sidecar = await world.startSidecar();
  });
  after(() => world.close());

  const check = (
    path: string,
    contextExtensions: Record<string, string>,
    authorization = `Bearer ${token}`,
  ) =>
    unary(
      sidecar.client,
      checkMethod,
      envoyCheckRequest({
        method: "GET",
        path,
        host: UPSTREAM_HOST,
        headers: { authorization },
        contextExtensions: { capability_id: CAPABILITY, ...contextExtensions },
        id: `req-${randomBytes(6).toString("hex")}`,
      }),
    );

  test("ext_authz allows without injecting, and removes the caller's Authorization by default", async () => {
    const response = await check("/orders/7", {});
    assert.equal(response.status.code, 0, JSON.stringify(response.denied_response ?? {}));
    const set = headerPairs(response);
    assert.deepEqual(Object.keys(set).sort(), ["x-authority-permission-id", "x-authority-request-id"]);
    assert.ok(!JSON.stringify(response).includes(UPSTREAM_SECRET));
    assert.deepEqual(response.ok_response.headers_to_remove, ["authorization"]);
    assert.deepEqual(response.ok_response.query_parameters_to_set ?? [], []);
  });

  test("a route with caller_authorization: keep forwards the caller's Authorization untouched", async () => {
    const kept = await check("/orders/7", { caller_authorization: "keep" });
    assert.equal(kept.status.code, 0);
    assert.deepEqual(kept.ok_response.headers_to_remove ?? [], []);
    assert.equal(headerPairs(kept).authorization, undefined, "never rewritten by the sidecar");
    // Any other value removes it: only the exact opt-in keeps a token on its way upstream.
    for (const value of ["KEEP", "true", "yes", ""]) {
      const removed = await check("/orders/7", { caller_authorization: value });
      assert.deepEqual(removed.ok_response.headers_to_remove, ["authorization"], value);
    }
  });

  test("with keep, an operation outside the policy is still denied", async () => {
    const denied = await check("/not-in-the-catalog", { caller_authorization: "keep" });
    assert.notEqual(denied.status.code, 0);
    assert.equal(denied.ok_response, undefined);
  });

  test("an injecting profile still replaces the caller's Authorization even with keep", async () => {
    const response = await unary(
      sidecar.client,
      checkMethod,
      envoyCheckRequest({
        method: "GET",
        path: "/orders/7",
        host: UPSTREAM_HOST,
        headers: { authorization: `Bearer ${world.tokens.agent}` },
        contextExtensions: { capability_id: CAPABILITY, caller_authorization: "keep" },
        id: `req-${randomBytes(6).toString("hex")}`,
      }),
    );
    assert.equal(response.status.code, 0);
    assert.equal(headerPairs(response)["x-api-key"], UPSTREAM_SECRET);
  });

  test("the forward proxy forwards without any credential", async () => {
    const before = world.upstream.seen.length;
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/7`, token });
    assert.equal(reply.status, 200, reply.body.toString());
    const seen = world.upstream.seen.slice(before);
    assert.equal(seen.length, 1);
    const headers = seen[0]?.headers ?? {};
    assert.equal(headers["x-api-key"], undefined);
    assert.equal(headers.authorization, undefined);
    assert.equal(headers["proxy-authorization"], undefined);
  });
});
