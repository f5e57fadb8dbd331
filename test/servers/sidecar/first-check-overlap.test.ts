import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import { startWorld, UPSTREAM_SECRET, type World } from "./world.ts";

/**
 * What a sidecar's first allowed Check waits for (decision 2871): the authority's answers it
 * needs come in two rounds, not four — the signer's keys beside the policy (their owner follows
 * from the subject), the upstream credentials beside the catalog (the verified policy names
 * their profile for the capability). Seen as the order of the sidecar's own requests: each
 * pair's second one starts before the first one's answer is in.
 */
describe("a sidecar's first Check", () => {
  let world: World;
  before(async () => {
    world = await startWorld();
  });
  after(async () => {
    await world?.close();
  });

  it("asks for the keys with the policy and the credentials with the catalog", async () => {
    const events: string[] = [];
    const kindOf = (url: string): string => new URL(url).pathname.split("/")[3] ?? "";
    const recording: typeof fetch = async (input, init) => {
      const kind = kindOf(String(input));
      events.push(`${kind} asked`);
      const response = await fetch(input, init);
      events.push(`${kind} answered`);
      return response;
    };
    const sidecar = await world.startSidecar({
      authority: createAuthorityClient({
        baseUrl: world.authorityUrl,
        token: staticTokenSource(world.tokens.sidecar),
        fetch: recording,
      }),
    });
    try {
      assert.equal(await sidecar.sidecar.whenReady(30_000), true);
      events.length = 0;
      const response = await sidecar.check({});
      assert.equal(response.status.code, 0, "allowed");
      const injected = (response.ok_response.headers as { header: { key: string; value: string } }[]).find(
        (h) => h.header.key === "x-api-key",
      );
      assert.equal(injected?.header.value, UPSTREAM_SECRET);
      const at = (event: string): number => {
        const index = events.indexOf(event);
        assert.notEqual(index, -1, `${event} in ${events.join(", ")}`);
        return index;
      };
      assert.ok(at("policy-keys asked") < at("policies answered"), events.join(", "));
      assert.ok(at("auth-profiles asked") < at("capabilities answered"), events.join(", "));
    } finally {
      await sidecar.close();
    }
  });
});
