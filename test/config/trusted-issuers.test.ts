import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { parseConfigText } from "../../src/config/file.ts";
import { ConfigError } from "../../src/core/config-error.ts";
import { resolveSidecarConfig } from "../../src/servers/sidecar/config.ts";

const PLATFORM = "https://login.platform.example";

describe("trusted-issuers setting", () => {
  test("without it, the single-issuer settings are the one (primary) issuer, as before", () => {
    const config = resolveAuthorityConfig({
      env: { AUTHORITY_POLICY_PROTECTION: "embedded", AUTHORITY_ISSUER: "https://idp.example" },
    });
    assert.equal(config.issuer, "https://idp.example");
    assert.deepEqual(config.trustedIssuers, [
      {
        issuer: "https://idp.example",
        jwksUrl: "https://idp.example/.well-known/jwks.json",
        audience: ["authority"],
        claims: { subject: "sub", roles: "roles", partnerId: "partner_id", scopes: "scope" },
        tokenUse: "access",
        vouchedSubjects: true,
      },
    ]);
  });

  test("a config file list adds issuers beside the primary; only the primary vouches bare subjects by default", () => {
    const file = parseConfigText(
      [
        "issuer: http://127.0.0.1:8083",
        "trusted-issuers:",
        `  - issuer: ${PLATFORM}`,
        "    audience: [api://authority, authority]",
        "    token-types: [at+jwt]",
        "    token-use: false",
        "    claims: { partner-id: org, roles: groups, subject: oid, scopes: scp }",
      ].join("\n"),
      "authority.yaml",
    );
    const config = resolveAuthorityConfig({
      env: { AUTHORITY_POLICY_PROTECTION: "embedded" },
      file,
      fileName: "authority.yaml",
    });
    assert.equal(config.issuer, "http://127.0.0.1:8083");
    assert.deepEqual(
      config.trustedIssuers.map((t) => [t.issuer, t.vouchedSubjects]),
      [
        ["http://127.0.0.1:8083", true],
        [PLATFORM, false],
      ],
    );
    const platform = config.trustedIssuers[1];
    assert.deepEqual(platform?.audience, ["api://authority", "authority"]);
    assert.equal(platform?.jwksUrl, `${PLATFORM}/.well-known/jwks.json`);
    assert.equal(platform?.tokenUse, false);
    assert.deepEqual(platform?.tokenTypes, ["at+jwt"]);
    assert.deepEqual(platform?.claims, { subject: "oid", roles: "groups", partnerId: "org", scopes: "scp" });
  });

  test("with only the list, its first entry is the primary issuer", () => {
    const config = resolveSidecarConfig({
      env: {
        AUTHORITY_SIDECAR_TOKEN_FILE: "/var/run/token",
        AUTHORITY_TRUSTED_ISSUERS: JSON.stringify([
          { issuer: PLATFORM },
          { issuer: "https://other.example" },
        ]),
      },
    });
    assert.equal(config.issuer, PLATFORM);
    assert.deepEqual(
      config.trustedIssuers.map((t) => [t.issuer, t.vouchedSubjects]),
      [
        [PLATFORM, true],
        ["https://other.example", false],
      ],
    );
  });

  test("bad lists are refused with the setting and the entry named", () => {
    const cases: Array<[unknown, RegExp]> = [
      ["not json", /AUTHORITY_TRUSTED_ISSUERS must be a JSON list/],
      ["[]", /non-empty list/],
      [JSON.stringify([{ jwks: "x" }]), /\[0\] has unknown key "jwks"/],
      [JSON.stringify([{ issuer: "ftp://x" }]), /\[0\]\.issuer must be an absolute http\(s\) URL/],
      [
        JSON.stringify([{ issuer: PLATFORM }, { issuer: `${PLATFORM}/` }]),
        /lists https:\/\/login.platform.example twice/,
      ],
      [JSON.stringify([{ issuer: PLATFORM, claims: { tenant: "t" } }]), /claims has unknown key "tenant"/],
      [
        JSON.stringify([{ issuer: PLATFORM, claims: { roles: "a b" } }]),
        /claims\.roles must be a claim name/,
      ],
      [JSON.stringify([{ issuer: PLATFORM, audience: [] }]), /audience must be/],
      [JSON.stringify([{ issuer: PLATFORM, "token-use": true }]), /token-use/],
      [JSON.stringify([{ issuer: PLATFORM, "vouched-subjects": "yes" }]), /vouched-subjects/],
    ];
    for (const [value, message] of cases) {
      assert.throws(
        () =>
          resolveAuthorityConfig({
            env: { AUTHORITY_POLICY_PROTECTION: "embedded", AUTHORITY_TRUSTED_ISSUERS: value as string },
          }),
        (error: unknown) => error instanceof ConfigError && message.test(error.message),
        String(value),
      );
    }
  });
});
