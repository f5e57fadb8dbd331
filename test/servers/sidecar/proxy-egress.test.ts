import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { createEgressPolicy, endpointOfUrl } from "../../../src/execute/egress.ts";
import { egressAllowing } from "../../helpers/egress.ts";
import { startWorld, UPSTREAM_HOST, type World } from "./world.ts";

describe("sidecar forward proxy and the egress policy", () => {
  let world: World;

  before(async () => {
    world = await startWorld();
  });
  beforeEach(() => {
    world.upstream.seen.length = 0;
  });
  after(() => world.close());

  test("an allowed decision whose upstream is loopback is refused on connect: 403 egress_denied, nothing sent", async () => {
    // The strict default: the reviewed upstream (127.0.0.1:<port>) is not on this sidecar's allow list.
    const sidecar = await world.startSidecar({ egress: createEgressPolicy() });
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/42` });
    assert.equal(reply.status, 403);
    assert.deepEqual(
      { ...reply.json(), requestId: undefined },
      {
        status: "denied",
        reason: "egress_denied",
        requestId: undefined,
        rule: "egress/destination",
      },
    );
    assert.equal(world.upstream.seen.length, 0);
    assert.ok(!reply.body.toString("utf8").includes("127.0.0.1"));
  });

  test("the platform's own service is refused even when a CIDR covers its range", async () => {
    const upstreamPort = Number(new URL(world.upstream.url).port);
    const sidecar = await world.startSidecar({
      egress: createEgressPolicy({
        allow: egressAllowing([world.upstream.url]).allow,
        // The upstream's address:port declared a service of the platform (as the authority's would be).
        platformEndpoints: [
          { host: "127.0.0.1", port: upstreamPort },
          endpointOfUrl(world.authorityUrl),
        ].filter((e) => e !== undefined),
      }),
    });
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/42` });
    assert.equal(reply.status, 403);
    assert.equal(reply.json().reason, "egress_denied");
    assert.equal(world.upstream.seen.length, 0);
  });

  test("with exactly the upstream's address:port allowed, the same call goes through", async () => {
    const sidecar = await world.startSidecar({ egress: egressAllowing([world.upstream.url]) });
    const reply = await sidecar.proxy({ target: `http://${UPSTREAM_HOST}/orders/42` });
    assert.equal(reply.status, 200);
    assert.equal(world.upstream.seen.length, 1);
  });
});
