import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Command } from "commander";
import { processSchemas } from "../../src/cli/configuration-doc.ts";
import { allSettings } from "../../src/config/schema.ts";

/**
 * Every flag and environment variable each subcommand took before the settings were defined in
 * one place (README, docs/onboarding.md, the chart, deploy/ and the injector's patch use them):
 * each must keep working.
 */
const BEFORE: Readonly<Record<string, { flags: string; env: string }>> = {
  serve: {
    flags:
      "audience audit-buffer body-limit config crypto-credentials-file crypto-token-url crypto-url egress-allow init-kek issuer jwks-url kek-file listen log-level managed-url mcp-allowed-origins mcp-upstream-timeout-ms parameter-scoping parameter-scoping-partners policy-cache-size policy-cache-ttl policy-protection public-url record-cache-ms redis-url service-identity shutdown-timeout state-dir store token-cache-size trusted-issuers",
    env: "AUDIENCE AUDIT_BUFFER BODY_LIMIT CONFIG_FILE CRYPTO_CREDENTIALS_FILE CRYPTO_TOKEN_URL CRYPTO_URL EGRESS_ALLOW INIT_KEK ISSUER JWKS_URL KEK KEK_FILE LISTEN LOG_LEVEL MANAGED_URL MCP_ALLOWED_ORIGINS MCP_UPSTREAM_TIMEOUT_MS PARAMETER_SCOPING PARAMETER_SCOPING_PARTNERS POLICY_CACHE_SIZE POLICY_CACHE_TTL POLICY_PROTECTION PUBLIC_URL RECORD_CACHE_MS REDIS_URL SERVICE_IDENTITY SHUTDOWN_TIMEOUT STATE_DIR STORE_URL TOKEN_CACHE_SIZE TRUSTED_ISSUERS",
  },
  sidecar: {
    flags:
      "audience audit-max-pending authority-url cache-key-file capability-map client-id decision-timeout-ms egress-allow grpc-listen idp-token-url issuer jwks-url log-level max-request-bytes max-response-bytes metrics-listen parameter-scoping parameter-scoping-partners policy-keys-file policy-max-age-ms policy-ttl-ms proxy-decision-timeout-ms proxy-listen redis-url service-identity shutdown-grace-ms shutdown-wait-ms staleness-ms token-file trusted-issuers upstream-timeout-ms",
    env: "AUDIENCE CLIENT_ID CLIENT_SECRET EGRESS_ALLOW IDP_TOKEN_URL ISSUER JWKS_URL LOG_LEVEL PARAMETER_SCOPING PARAMETER_SCOPING_PARTNERS REDIS_URL SERVICE_IDENTITY SIDECAR_AUDIT_MAX_PENDING SIDECAR_CACHE_KEY_FILE SIDECAR_CAPABILITY_MAP SIDECAR_DECISION_TIMEOUT_MS SIDECAR_GRPC_LISTEN SIDECAR_MAX_REQUEST_BYTES SIDECAR_MAX_RESPONSE_BYTES SIDECAR_METRICS_LISTEN SIDECAR_POLICY_KEYS_FILE SIDECAR_POLICY_MAX_AGE_MS SIDECAR_POLICY_TTL_MS SIDECAR_PROXY_DECISION_TIMEOUT_MS SIDECAR_PROXY_LISTEN SIDECAR_SHUTDOWN_GRACE_MS SIDECAR_SHUTDOWN_WAIT_MS SIDECAR_STALENESS_MS SIDECAR_TOKEN_FILE SIDECAR_UPSTREAM_TIMEOUT_MS TRUSTED_ISSUERS URL",
  },
  crypto: {
    flags: "admin-role audience init-kek issuer jwks-url kek-file listen log-level state-dir store",
    env: "AUDIENCE CRYPTO_ADMIN_ROLE CRYPTO_LISTEN INIT_KEK ISSUER JWKS_URL KEK KEK_FILE LOG_LEVEL STATE_DIR STORE_URL",
  },
  demo: { flags: "log-level no-color redis-url", env: "REDIS_URL" },
  dev: { flags: "log-level no-sidecar redis-url state-dir", env: "LOG_LEVEL REDIS_URL STATE_DIR" },
  idp: {
    flags:
      "accounts-file audience issuer keys-dir listen log-level rotation-grace tenant-claim token-lifetime",
    env: "IDP_ACCOUNTS_FILE IDP_AUDIENCE IDP_ISSUER IDP_KEYS_DIR IDP_LISTEN IDP_ROTATION_GRACE IDP_TENANT_CLAIM IDP_TOKEN_LIFETIME LOG_LEVEL",
  },
  inject: {
    flags: "listen log-level settings-file sidecar-image tls-cert tls-key tls-reload-seconds",
    env: "INJECT_LISTEN INJECT_SETTINGS_FILE INJECT_TLS_RELOAD_SECONDS LOG_LEVEL SIDECAR_IMAGE TLS_CERT_FILE TLS_KEY_FILE",
  },
  managed: {
    flags:
      "crypto-url idp-audience idp-client-id idp-scope idp-token-url listen log-level rate-burst rate-limit state-dir tls-cert tls-key upstream-timeout",
    env: "CRYPTO_URL IDP_TOKEN_URL LOG_LEVEL MANAGED_IDP_AUDIENCE MANAGED_IDP_CLIENT_ID MANAGED_IDP_CLIENT_SECRET MANAGED_IDP_SCOPE MANAGED_LISTEN MANAGED_RATE_BURST MANAGED_RATE_LIMIT MANAGED_UPSTREAM_TIMEOUT_MS STATE_DIR TLS_CERT_FILE TLS_KEY_FILE",
  },
  token: {
    flags: "audience client-id client-secret json password scope token-url username",
    env: "CLIENT_ID CLIENT_SECRET IDP_TOKEN_URL PASSWORD USERNAME",
  },
};

describe("flag and variable names", () => {
  it("every name a subcommand took before still works", async () => {
    for (const [name, before] of Object.entries(BEFORE)) {
      const program = new Command("authority");
      const module = (await import(`../../src/cli/commands/${name}.ts`)) as { register(p: Command): void };
      module.register(program);
      const command = program.commands.find((c) => c.name() === name);
      assert.ok(command, name);
      const flags = new Set(command.options.map((option) => option.long));
      for (const flag of before.flags.split(" "))
        assert.ok(flags.has(`--${flag}`), `authority ${name} lost --${flag}`);
      const schema = processSchemas.find((s) => s.command === name);
      assert.ok(schema, name);
      const envs = new Set(allSettings(schema).map((spec) => spec.env));
      for (const env of before.env.split(" ")) {
        assert.ok(envs.has(`AUTHORITY_${env}`), `authority ${name} lost AUTHORITY_${env}`);
      }
    }
  });
});
