import { readFile } from "node:fs/promises";
import { type Command, Option } from "commander";
import { ConfigError } from "../../config/errors.ts";
import { isCryptoError, type PublicKeyRingJson } from "../../crypto/index.ts";
import { createEgressPolicy, endpointOfUrl } from "../../execute/egress.ts";
import { createTrustedIssuersVerifier } from "../../identity/trusted-issuers.ts";
import { createLogger } from "../../observability/logger.ts";
import { PolicyCacheError, parseCacheKey } from "../../policy/cache/index.ts";
import { parsePinnedPolicyKeys } from "../../policy/signed-policy.ts";
import { createAuthorityClient } from "../../servers/sidecar/authority-client.ts";
import { parseCapabilityMap } from "../../servers/sidecar/capability-map.ts";
import { resolveSidecarConfig, type SidecarConfig, sidecarSettings } from "../../servers/sidecar/config.ts";
import { SidecarConfigError } from "../../servers/sidecar/errors.ts";
import {
  clientCredentialsTokenSource,
  fileTokenSource,
  type ServiceTokenSource,
} from "../../servers/sidecar/service-token.ts";
import { createSidecar } from "../../servers/sidecar/sidecar.ts";

/**
 * `authority sidecar`: Envoy ext_authz (gRPC), the forward proxy and the metrics/health port
 * (docs/sidecar.md). Settings: flags > environment > defaults (docs/configuration.md).
 * SIGTERM / SIGINT: not ready at once, in-flight requests drain, then exit.
 */

function tokenSource(config: SidecarConfig): ServiceTokenSource {
  const credentials = config.credentials;
  return credentials.kind === "token_file"
    ? fileTokenSource(credentials.path)
    : clientCredentialsTokenSource({
        tokenUrl: credentials.tokenUrl,
        clientId: credentials.clientId,
        clientSecret: credentials.clientSecret,
      });
}

/** The pinned policy keys; a file that is missing or malformed stops the start, naming the path. */
async function readPinnedKeys(path: string): Promise<PublicKeyRingJson[]> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, "utf8"));
  } catch (error) {
    const reason =
      (error as { code?: unknown }).code === "ENOENT" ? "does not exist" : "is not readable JSON";
    throw new ConfigError(`the policy keys file ${path} ${reason}`);
  }
  try {
    parsePinnedPolicyKeys(json);
  } catch (error) {
    throw new ConfigError(
      `the policy keys file ${path} is not a public key ring or a list of them (${error instanceof Error ? error.message : "invalid"})`,
    );
  }
  return (Array.isArray(json) ? json : [json]) as PublicKeyRingJson[];
}

async function run(flags: Record<string, string | undefined>): Promise<void> {
  const config = resolveSidecarConfig({ flags, env: process.env });
  const log = createLogger("sidecar", config.logLevel);
  // No key that opens or signs a policy: signed policies are verified with public keys
  // (pinned here, or fetched from the authority; docs/sidecar.md "Policy keys").
  const pinned =
    config.policyKeysFile === undefined ? undefined : await readPinnedKeys(config.policyKeysFile);
  const redis =
    config.redis === undefined
      ? undefined
      : { url: config.redis.url, cacheKey: parseCacheKey(await readFile(config.redis.cacheKeyFile, "utf8")) };
  const sidecar = createSidecar({
    authority: createAuthorityClient({ baseUrl: config.authorityUrl, token: tokenSource(config) }),
    verifier: createTrustedIssuersVerifier(config.trustedIssuers),
    policyKeys: {
      serviceIdentity: config.serviceIdentity,
      ...(pinned === undefined ? {} : { pinned }),
    },
    capabilityMap: parseCapabilityMap(config.capabilityMap),
    ...(redis === undefined ? {} : { redis }),
    listen: config.listen,
    decisionTimeoutMs: config.decisionTimeoutMs,
    proxyDecisionTimeoutMs: config.proxyDecisionTimeoutMs,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    maxResponseBytes: config.maxResponseBytes,
    maxRequestBytes: config.maxRequestBytes,
    constraintsRollout: config.parameterScoping,
    auditMaxPending: config.auditMaxPending,
    stalenessMs: config.stalenessMs,
    policyTtlMs: config.policyTtlMs,
    policyMaxAgeMs: config.policyMaxAgeMs,
    logger: log,
    // The platform's services this sidecar knows of are never an upstream; its own ports are added on start.
    egress: createEgressPolicy({
      allow: config.egressAllow,
      platformEndpoints: [
        config.authorityUrl,
        ...config.trustedIssuers.flatMap((trusted) => [trusted.issuer, trusted.jwksUrl]),
        config.credentials.kind === "client_credentials" ? config.credentials.tokenUrl : undefined,
        config.redis?.url,
      ]
        .map(endpointOfUrl)
        .filter((endpoint) => endpoint !== undefined),
    }),
  });
  try {
    await sidecar.start();
  } catch (error) {
    await sidecar.close({ graceMs: 0 });
    throw error;
  }
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "sidecar shutting down");
    setTimeout(() => {
      log.error("shutdown did not finish in time");
      process.exit(1);
    }, config.shutdownGraceMs + 5000).unref();
    sidecar.close({ graceMs: config.shutdownGraceMs }).then(
      () => {
        process.exitCode = 0;
      },
      (error: unknown) => {
        log.error({ err: error }, "sidecar failed to close");
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

/** commander's attribute name for a flag key (`grpc-listen` → `grpcListen`). */
function attribute(key: string): string {
  return key.replace(/-([a-z])/g, (_match, letter: string) => letter.toUpperCase());
}

export function register(program: Command): void {
  const command = program
    .command("sidecar")
    .description("Run the per-pod sidecar: Envoy ext_authz (gRPC), forward proxy, metrics and health");
  for (const setting of Object.values(sidecarSettings)) {
    if ("noFlag" in setting && setting.noFlag === true) continue;
    const env = setting.env === undefined ? "" : ` [env ${setting.env}]`;
    command.addOption(new Option(`--${setting.key} <value>`, `${setting.description}${env}`));
  }
  command.action(async (options: Record<string, unknown>, cmd: Command) => {
    const flags: Record<string, string | undefined> = {};
    for (const setting of Object.values(sidecarSettings)) {
      const value = options[attribute(setting.key)];
      if (typeof value === "string") flags[setting.key] = value;
    }
    try {
      await run(flags);
    } catch (error) {
      if (
        error instanceof ConfigError ||
        error instanceof SidecarConfigError ||
        error instanceof PolicyCacheError
      ) {
        cmd.error(`authority sidecar: ${error.message}`);
      }
      if (isCryptoError(error)) cmd.error(`authority sidecar: ${error.message}`);
      throw error;
    }
  });
}
