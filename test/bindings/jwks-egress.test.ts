/**
 * Attack: a partner admin points a binding's `jwks_url` at an internal address, so the
 * authority fetches it when a user assertion arrives (blind SSRF). Every JWKS fetch of a
 * binding goes through the egress gate, on the address connected to: loopback, link-local,
 * a name that resolves to loopback and a redirect to loopback are all refused, and a
 * listener on loopback sees no connection at all.
 */
import assert from "node:assert/strict";
import { createServer as createHttpServer } from "node:http";
import { type AddressInfo, createServer as createTcpServer, type Server } from "node:net";
import { after, before, describe, it } from "node:test";
import { createAssertionVerifiers } from "../../src/bindings/assertions.ts";
import { createEgressPolicy, type EgressPolicy, egressDenialOf } from "../../src/execute/egress.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import type { BindingRecord } from "../../src/store/binding-model.ts";
import { egressAllowing } from "../helpers/egress.ts";

/** A TCP listener on loopback that counts every connection made to it (HTTP or not). */
async function connectionCounter(): Promise<{
  port: number;
  count: () => number;
  close: () => Promise<void>;
}> {
  let connections = 0;
  const server: Server = createTcpServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    count: () => connections,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function bindingWith(jwksUrl: string, idp: IdpServer, id: string): BindingRecord {
  return {
    binding_id: id,
    partner_id: "acme",
    issuer: idp.issuer,
    jwks_url: jwksUrl,
    jwks: null,
    audience: "partner-api",
    tenant_claim: "tenant",
    tenant_value: "t1",
    algorithms: ["ES256"],
    mapping_version: "1",
    active: true,
    auth_profile_ref: null,
    created_at: "2026-01-01T00:00:00Z",
    updated_at: "2026-01-01T00:00:00Z",
  };
}

/** The assertion's outcome: the public error code and the egress rule behind it, if any. */
async function outcome(
  egress: EgressPolicy,
  binding: BindingRecord,
  token: string,
): Promise<{ code: string; rule?: string }> {
  const verifiers = createAssertionVerifiers({ fetch: egress.fetch });
  try {
    await verifiers.verify(binding, token);
    return { code: "accepted" };
  } catch (error) {
    const code = (error as { code?: string }).code ?? "unknown";
    const rule = (error as { details?: { rule?: string } }).details?.rule ?? egressDenialOf(error)?.rule;
    return rule === undefined ? { code } : { code, rule };
  }
}

describe("binding JWKS fetches pass the egress gate", () => {
  let idp: IdpServer;
  let listener: Awaited<ReturnType<typeof connectionCounter>>;
  let token: string;
  before(async () => {
    idp = await createIdpServer({ audience: "partner-api" });
    await idp.listen();
    listener = await connectionCounter();
    token = (await idp.issueToken({ subject: "user-1", audience: "partner-api", tenant: "t1" })).accessToken;
  });
  after(async () => {
    await idp.close();
    await listener.close();
  });

  it("a jwks_url on loopback is refused and nothing connects to it", async () => {
    const egress = createEgressPolicy();
    const binding = bindingWith(`http://127.0.0.1:${listener.port}/jwks.json`, idp, "b-loopback");
    assert.deepEqual(await outcome(egress, binding, token), { code: "egress_denied", rule: "loopback" });
    const v6 = bindingWith(`http://[::ffff:127.0.0.1]:${listener.port}/jwks.json`, idp, "b-mapped");
    assert.deepEqual(await outcome(egress, v6, token), { code: "egress_denied", rule: "loopback" });
    assert.equal(listener.count(), 0);
    await egress.close();
  });

  it("link-local and metadata addresses are refused without connecting", async () => {
    const egress = createEgressPolicy();
    for (const [url, rule] of [
      ["http://169.254.10.20/jwks.json", "link_local"],
      ["http://169.254.169.254/latest/meta-data/", "metadata"],
      ["http://[fe80::1]/jwks.json", "link_local"],
    ] as const) {
      assert.deepEqual(await outcome(egress, bindingWith(url, idp, `b-${rule}`), token), {
        code: "egress_denied",
        rule,
      });
    }
    await egress.close();
  });

  it("a name that resolves to loopback when fetched is refused on the resolved address", async () => {
    let answer = "93.184.216.34";
    const egress = createEgressPolicy({ resolve: async () => [{ address: answer, family: 4 }] });
    const url = `https://jwks.partner.test:${listener.port}/jwks.json`;
    // Checked when the binding is saved, the name looks public…
    assert.deepEqual(await egress.checkUrl(url, { resolve: true }), { ok: true });
    // …and when the key set is fetched it points at this machine.
    answer = "127.0.0.1";
    assert.deepEqual(await outcome(egress, bindingWith(url, idp, "b-rebind"), token), {
      code: "egress_denied",
      rule: "loopback",
    });
    assert.equal(listener.count(), 0);
    await egress.close();
  });

  it("a redirect to loopback is not followed, by the key-set fetch or by the gate's fetch", async () => {
    const redirector = createHttpServer((_req, res) => {
      res.writeHead(302, { location: `http://127.0.0.1:${listener.port}/jwks.json` });
      res.end();
    });
    await new Promise<void>((resolve) => redirector.listen(0, "127.0.0.1", resolve));
    const origin = `http://127.0.0.1:${(redirector.address() as AddressInfo).port}`;
    // The redirecting server itself is allowed (as a platform admin would list a partner's IdP).
    const egress = egressAllowing([origin]);
    const result = await outcome(egress, bindingWith(`${origin}/jwks.json`, idp, "b-redirect"), token);
    assert.equal(result.code, "upstream_unavailable");
    // Whoever asks the gate to follow redirects gets each hop checked where it connects.
    const followed = await egress.fetch(`${origin}/jwks.json`, { redirect: "follow" }).then(
      () => "followed",
      (error: unknown) => egressDenialOf(error)?.rule ?? "other error",
    );
    assert.equal(followed, "loopback");
    assert.equal(listener.count(), 0);
    await egress.close();
    redirector.closeAllConnections();
    await new Promise<void>((resolve) => redirector.close(() => resolve()));
  });

  it("an allowed partner IdP is still fetched and its assertions verified", async () => {
    const egress = egressAllowing([idp.issuer]);
    const binding = bindingWith(idp.jwksUri, idp, "b-allowed");
    assert.deepEqual(await outcome(egress, binding, token), { code: "accepted" });
    await egress.close();
  });

  it("the operator's own issuer JWKS, named exactly, is fetched as the operator configured it", async () => {
    // The platform's IdP is a platform service (never opened by the allow list); a binding
    // that names its exact JWKS URL makes the authority fetch nothing it does not fetch already.
    const egress = createEgressPolicy({
      platformEndpoints: [{ host: "127.0.0.1", port: Number(new URL(idp.issuer).port) }],
      operatorUrls: [idp.jwksUri],
    });
    assert.deepEqual(await outcome(egress, bindingWith(idp.jwksUri, idp, "b-operator"), token), {
      code: "accepted",
    });
    // Any other path on the same service is the platform service, refused.
    const other = bindingWith(`${idp.issuer}/other/jwks.json`, idp, "b-operator-other");
    assert.deepEqual(await outcome(egress, other, token), {
      code: "egress_denied",
      rule: "platform_service",
    });
    await egress.close();
  });
});
