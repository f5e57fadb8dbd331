import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAssertionVerifiers } from "../../src/bindings/assertions.ts";
import { AuthorityError } from "../../src/errors.ts";
import type { EgressPolicy } from "../../src/execute/egress.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";
import type { BindingRecord } from "../../src/store/binding-model.ts";
import { egressAllowing } from "../helpers/egress.ts";

describe("user assertion verifiers", () => {
  let idp: IdpServer;
  let binding: BindingRecord;
  let egress: EgressPolicy;
  before(async () => {
    idp = await createIdpServer({ audience: "partner-api" });
    await idp.listen();
    // The partner's IdP (and the closed port below), as a platform admin would allow them.
    egress = egressAllowing([idp.issuer, "http://127.0.0.1:9"]);
    binding = {
      binding_id: "b1",
      partner_id: "acme",
      issuer: idp.issuer,
      jwks_url: idp.jwksUri,
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
  });
  after(async () => {
    await idp.close();
    await egress.close();
  });

  const rejected = (error: unknown) =>
    error instanceof AuthorityError && error.code === "invalid_user_assertion";

  it("verifies against the binding's issuer, keys, audience and tenant", async () => {
    const verifiers = createAssertionVerifiers({ fetch: egress.fetch });
    const token = (await idp.issueToken({ subject: "user-1", audience: "partner-api", tenant: "t1" }))
      .accessToken;
    const verified = await verifiers.verify(binding, token);
    assert.equal(verified.subject, "user-1");
    assert.equal(verified.tenant, "t1");
    await assert.rejects(verifiers.verify(binding, undefined), rejected);
    await assert.rejects(verifiers.verify(binding, "garbage"), rejected);
  });

  it("re-checks a remembered assertion when the binding's settings change", async () => {
    const verifiers = createAssertionVerifiers({ fetch: egress.fetch });
    const token = (await idp.issueToken({ subject: "user-1", audience: "partner-api", tenant: "t1" }))
      .accessToken;
    await verifiers.verify(binding, token);
    await verifiers.verify(binding, token);
    await assert.rejects(verifiers.verify({ ...binding, tenant_value: "t2" }, token), rejected);
    await assert.rejects(verifiers.verify({ ...binding, audience: "other-api" }, token), rejected);
    await assert.rejects(verifiers.verify({ ...binding, algorithms: ["RS256"] }, token), rejected);
  });

  it("uses inline keys when the binding has no JWKS URL", async () => {
    const verifiers = createAssertionVerifiers({ fetch: egress.fetch });
    const jwks = (await (await fetch(idp.jwksUri)).json()) as { keys: Record<string, unknown>[] };
    const inline = { ...binding, binding_id: "b2", jwks_url: null, jwks };
    const token = (await idp.issueToken({ subject: "user-2", audience: "partner-api", tenant: "t1" }))
      .accessToken;
    assert.equal((await verifiers.verify(inline, token)).subject, "user-2");
    await assert.rejects(verifiers.verify({ ...inline, jwks: { keys: [] } }, token), rejected);
  });

  it("answers 503 rather than 401 when the issuer's keys cannot be fetched", async () => {
    const verifiers = createAssertionVerifiers({ fetch: egress.fetch });
    const token = (await idp.issueToken({ subject: "user-3", audience: "partner-api", tenant: "t1" }))
      .accessToken;
    const unreachable = { ...binding, binding_id: "b3", jwks_url: "http://127.0.0.1:9/jwks.json" };
    await assert.rejects(
      verifiers.verify(unreachable, token),
      (error: unknown) => error instanceof AuthorityError && error.code === "upstream_unavailable",
    );
  });
});
