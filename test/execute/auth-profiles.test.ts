import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { AuthProfileError, parseAuthProfile } from "../../src/execute/auth-profiles.ts";
import { DEFAULT_TOKEN_SET_COLLECTION } from "../../src/execute/token-set-store.ts";
import { openTokenStore, type TokenStoreFixture } from "./helpers.ts";

describe("parseAuthProfile", () => {
  it("refuses an API-key name that Envoy, the authority, a proxy or an upstream router reads as an instruction", () => {
    const apiKey = (where: string, name: string) => () =>
      parseAuthProfile({ type: "static", id: "a", kind: "api_key", in: where, name, secretRef: "s" });
    for (const name of [
      "Host",
      "Cookie",
      "X-Envoy-Original-Path",
      "x-envoy-upstream-rq-timeout-ms",
      "X-Authority-Permission-Id",
      "X-HTTP-Method-Override",
      "X-Original-URL",
      "X-Rewrite-URL",
      "X-Forwarded-Host",
      "Forwarded",
    ]) {
      assert.throws(
        apiKey("header", name),
        (error: unknown) => error instanceof AuthProfileError && error.field === "name",
        name,
      );
    }
    for (const name of ["_method", "_HttpMethod"]) {
      assert.throws(apiKey("query", name), AuthProfileError, name);
    }
    assert.doesNotThrow(apiKey("header", "Authorization"));
    assert.doesNotThrow(apiKey("header", "X-Api-Key"));
    assert.doesNotThrow(apiKey("query", "api_key"));
  });

  it("accepts each kind", () => {
    assert.deepEqual(
      parseAuthProfile({
        type: "static",
        id: "a",
        kind: "api_key",
        in: "header",
        name: "X-Api-Key",
        secretRef: "s",
      }),
      { type: "static", id: "a", kind: "api_key", in: "header", name: "X-Api-Key", secretRef: "s" },
    );
    assert.deepEqual(parseAuthProfile({ type: "static", id: "b", kind: "bearer", secretRef: "s" }), {
      type: "static",
      id: "b",
      kind: "bearer",
      secretRef: "s",
    });
    const cc = parseAuthProfile({
      type: "oauth_client_credentials",
      id: "c",
      tokenUrl: "https://idp.example.com/token",
      clientId: "client",
      clientSecretRef: "s",
      scopes: ["a", "b"],
      audience: "api",
    });
    assert.equal(cc.type, "oauth_client_credentials");
    const user = parseAuthProfile({
      type: "oauth_user",
      id: "d",
      authorizationUrl: "https://idp.example.com/authorize",
      tokenUrl: "http://127.0.0.1:9999/token",
      clientId: "spa",
    });
    assert.deepEqual(user, {
      type: "oauth_user",
      id: "d",
      authorizationUrl: "https://idp.example.com/authorize",
      tokenUrl: "http://127.0.0.1:9999/token",
      clientId: "spa",
      scopes: [],
    });
  });

  it("refuses unsafe or malformed profiles, naming the field only", () => {
    const bad: [unknown, string][] = [
      [null, "(root)"],
      [{ type: "static", id: "a", kind: "api_key", in: "header", name: "Host", secretRef: "s" }, "name"],
      [{ type: "static", id: "a", kind: "api_key", in: "header", name: "X Key", secretRef: "s" }, "name"],
      [{ type: "static", id: "a", kind: "api_key", in: "body", name: "k", secretRef: "s" }, "in"],
      [{ type: "static", id: "a", kind: "basic", secretRef: "s" }, "kind"],
      [{ type: "static", id: "a", kind: "bearer" }, "secretRef"],
      [
        {
          type: "oauth_client_credentials",
          id: "c",
          tokenUrl: "http://idp.example.com/t",
          clientId: "x",
          clientSecretRef: "s",
        },
        "tokenUrl",
      ],
      [
        {
          type: "oauth_client_credentials",
          id: "c",
          tokenUrl: "https://u:p@idp.example.com/t",
          clientId: "x",
          clientSecretRef: "s",
        },
        "tokenUrl",
      ],
      [
        {
          type: "oauth_client_credentials",
          id: "c",
          tokenUrl: "https://idp.example.com/t",
          clientId: "x",
          clientSecretRef: "s",
          scopes: ["a b"],
        },
        "scopes",
      ],
      [
        {
          type: "oauth_user",
          id: "d",
          authorizationUrl: "javascript:alert(1)",
          tokenUrl: "https://x/t",
          clientId: "x",
        },
        "authorizationUrl",
      ],
      [{ type: "saml", id: "e" }, "type"],
    ];
    for (const [value, field] of bad) {
      assert.throws(
        () => parseAuthProfile(value),
        (error: unknown) => error instanceof AuthProfileError && error.field === field,
        JSON.stringify(value),
      );
    }
  });
});

describe("createStoreTokenSetStore", () => {
  let fixture: TokenStoreFixture;
  before(async () => {
    fixture = await openTokenStore();
  });
  after(() => fixture.close());

  it("round-trips token sets through the Store and reads malformed documents as absent", async () => {
    const set = {
      accessToken: "at",
      refreshToken: "rt",
      expiresAt: 123,
      scope: "a",
      tokenType: "Bearer" as const,
    };
    await fixture.tokenSetStore.put("k1", set);
    assert.deepEqual(await fixture.tokenSetStore.get("k1"), set);
    await fixture.store.put(DEFAULT_TOKEN_SET_COLLECTION, "k2", { accessToken: 5 });
    assert.equal(await fixture.tokenSetStore.get("k2"), undefined);
    await fixture.tokenSetStore.delete("k1");
    assert.equal(await fixture.tokenSetStore.get("k1"), undefined);
  });
});
