import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import { headersToRemove, isForwarded } from "../../../src/servers/sidecar/request-input.ts";
import { TRACING } from "../../helpers/tracing-headers.ts";
import { headerMap, type SidecarHandle, startWorld, UPSTREAM_HOST, type World } from "./world.ts";

/** Still stripped from an allowed request: credentials, our namespace, undeclared headers. */
const STRIPPED: Record<string, string> = {
  cookie: "session=caller",
  "x-authority-subject": "root-admin",
  "x-custom": "1",
};

/** Routing overrides are never forwarded (a request carrying one is refused as invalid_input). */
const ROUTING: Record<string, string> = { "x-http-method-override": "DELETE", "x-original-url": "/admin" };

describe("tracing headers: the forwarding rules", () => {
  it("forwards every tracing header, in the proxy and in headers_to_remove", () => {
    const declared = new Set<string>();
    for (const name of Object.keys(TRACING)) assert.ok(isForwarded(name, declared), `${name} is forwarded`);
    const removed = headersToRemove({ ...TRACING, ...STRIPPED, ...ROUTING }, declared, {});
    assert.deepEqual(removed.sort(), Object.keys({ ...STRIPPED, ...ROUTING }).sort());
  });

  it("never forwards a credential or routing override, whatever its name shares with tracing", () => {
    for (const name of [
      "authorization",
      "proxy-authorization",
      "cookie",
      "x-authority-trace",
      "x-original-uri",
    ])
      assert.equal(isForwarded(name, new Set([name])), false, name);
  });
});

describe("tracing headers: through the sidecar", () => {
  let world: World;
  let sidecar: SidecarHandle;

  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
    assert.equal(await sidecar.sidecar.whenReady(30_000), true);
  });
  beforeEach(() => {
    world.upstream.seen.length = 0;
  });
  after(() => world.close());

  it("the forward proxy sends every tracing header upstream unchanged", async () => {
    const reply = await sidecar.proxy({
      target: `http://${UPSTREAM_HOST}/orders/42`,
      headers: { ...TRACING, ...STRIPPED },
    });
    assert.equal(reply.status, 200, reply.body.toString());
    const seen = world.upstream.seen[0]?.headers ?? {};
    for (const [name, value] of Object.entries(TRACING)) assert.equal(seen[name], value, name);
    for (const name of Object.keys(STRIPPED)) assert.equal(seen[name], undefined, name);
    assert.equal(seen["proxy-authorization"], undefined);
  });

  it("ext_authz removes none of them and still removes the caller's credentials", async () => {
    const answer = await sidecar.check({ headers: { ...TRACING, ...STRIPPED } });
    assert.equal(answer.status.code, 0);
    const removed = new Set<string>(answer.ok_response.headers_to_remove);
    for (const name of Object.keys(TRACING)) assert.ok(!removed.has(name), `${name} is kept`);
    for (const name of [...Object.keys(STRIPPED), "authorization"])
      assert.ok(removed.has(name), `${name} is removed`);
    for (const name of Object.keys(TRACING))
      assert.equal(headerMap(answer)[name], undefined, `${name} is not rewritten`);
  });
});
