import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SignJWT } from "jose";
import { createTokenKeys } from "../../src/bindings/token-keys.ts";
import { createWorkloadTokenService, WORKLOAD_TOKEN_AUDIENCE } from "../../src/bindings/workload-tokens.ts";
import { TokenVerificationError } from "../../src/identity/errors.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import type { WorkloadClientRecord } from "../../src/store/binding-model.ts";
import { openStore } from "../../src/store/index.ts";
import type { Store } from "../../src/store/store.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const client: WorkloadClientRecord = {
  client_id: "wlc_AAAAAAAAAAAAAAAA",
  binding_id: "b1",
  partner_id: "acme",
  name: "runtime",
  scopes: ["authority/bindings.invoke"],
  secret_hash: "unused",
  status: "active",
  created_at: "2026-01-01T00:00:00Z",
  revoked_at: null,
};

describe("workload tokens", () => {
  let dir: TempDir;
  let store: Store;
  before(async () => {
    dir = await makeTempDir("workload-tokens-");
    store = await openStore(`sqlite:${join(dir.path, "s.db")}`);
  });
  after(async () => {
    await store.close();
    await dir.cleanup();
  });

  it("issues binding-scoped ES256 tokens and verifies them", async () => {
    const service = createWorkloadTokenService({
      keys: createTokenKeys({ store }),
      issuer: "https://authority.example",
    });
    const issued = await service.issue(client, ["authority/bindings.invoke"]);
    assert.equal(issued.token_type, "Bearer");
    assert.equal(issued.expires_in, 300);
    const header = JSON.parse(Buffer.from(issued.access_token.split(".")[0] ?? "", "base64url").toString());
    assert.equal(header.alg, "ES256");
    assert.equal(header.typ, "at+jwt");
    const claims = JSON.parse(Buffer.from(issued.access_token.split(".")[1] ?? "", "base64url").toString());
    assert.equal(claims.sub, client.client_id);
    assert.equal(claims.binding_id, "b1");
    assert.equal(claims.partner_id, "acme");
    assert.equal(claims.token_use, "access");
    assert.equal(claims.aud, WORKLOAD_TOKEN_AUDIENCE);
    assert.equal(typeof claims.jti, "string");
    assert.deepEqual(await service.verify(issued.access_token), {
      clientId: client.client_id,
      bindingId: "b1",
      partnerId: "acme",
      scopes: ["authority/bindings.invoke"],
      jwtId: claims.jti,
    });
    const jwks = await service.jwks();
    assert.equal(jwks.keys.length, 1);
    assert.equal(jwks.keys[0]?.d, undefined);
  });

  it("refuses tokens of another key, issuer or shape", async () => {
    const keys = createTokenKeys({ store });
    const service = createWorkloadTokenService({ keys, issuer: "https://authority.example" });
    const other = createWorkloadTokenService({
      keys: createTokenKeys({ store }),
      issuer: "https://authority.example",
    });
    const foreign = await other.issue(client, ["authority/bindings.invoke"]);
    await assert.rejects(service.verify(foreign.access_token), TokenVerificationError);
    const elsewhere = createWorkloadTokenService({ keys, issuer: "https://elsewhere.example" });
    await assert.rejects(
      service.verify((await elsewhere.issue(client, [])).access_token),
      (e: unknown) => e instanceof TokenVerificationError && e.code === "token_issuer",
    );
    const key = await keys.current();
    const noBinding = await new SignJWT({ client_id: client.client_id, token_use: "access" })
      .setProtectedHeader({ alg: "ES256", kid: key.kid, typ: "at+jwt" })
      .setIssuer("https://authority.example")
      .setSubject(client.client_id)
      .setAudience(WORKLOAD_TOKEN_AUDIENCE)
      .setIssuedAt()
      .setExpirationTime("1m")
      .sign(key.privateKey);
    await assert.rejects(service.verify(noBinding), TokenVerificationError);
  });

  it("shares one stored, sealed signing key between replicas", async () => {
    const keyRings = createProcessKeyRings();
    const [a, b] = await Promise.all([
      createTokenKeys({ store, keyRings }).current(),
      createTokenKeys({ store, keyRings }).current(),
    ]);
    assert.equal(a.kid, b.kid);
    const stored = await store.get<Record<string, unknown>>("workload_token_keys", "signing");
    assert.equal(typeof stored?.sealed_private_jwk, "string");
    assert.ok(!JSON.stringify(stored).includes('"d"'), "no private key in the clear");
    const service = createWorkloadTokenService({
      keys: createTokenKeys({ store, keyRings }),
      issuer: "https://a.example",
    });
    const replica = createWorkloadTokenService({
      keys: createTokenKeys({ store, keyRings }),
      issuer: "https://a.example",
    });
    const issued = await service.issue(client, []);
    assert.equal((await replica.verify(issued.access_token)).clientId, client.client_id);
  });
});
