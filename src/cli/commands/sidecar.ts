import { readFile } from "node:fs/promises";
import { type Command, Option } from "commander";
import { ConfigError } from "../../config/errors.ts";
import { isCryptoError, loadKek } from "../../crypto/index.ts";
import { createEgressPolicy, endpointOfUrl } from "../../execute/egress.ts";
import { createJwtVerifier } from "../../identity/jwt-verifier.ts";
import { createLogger } from "../../observability/logger.ts";
import { PolicyCacheError, parseCacheKey } from "../../policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../policy/local-protector.ts";
import { createStoredKeyRings } from "../../policy/stored-key-rings.ts";
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
import { isStoreError, openStore } from "../../store/index.ts";

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

async function run(flags: Record<string, string | undefined>): Promise<void> {
  const config = resolveSidecarConfig({ flags, env: process.env });
  const log = createLogger("sidecar", config.logLevel);
  // Policy keys: the authority's key rings, read from its store under its KEK (the upstream
  // crypto service's protector replaces this by configuration; docs/sidecar.md "Trust model").
  const kek = await loadKek({
    ...(config.keyRings.kek === undefined ? {} : { kek: config.keyRings.kek }),
    ...(config.keyRings.kekFile === undefined ? {} : { kekFile: config.keyRings.kekFile }),
    createIfMissing: false,
  });
  const store = await openStore(config.keyRings.storeUrl);
  const protector = createLocalPolicyProtector({
    keyRings: createStoredKeyRings({ store, kek }),
    serviceIdentity: config.serviceIdentity,
  });
  const redis =
    config.redis === undefined
      ? undefined
      : { url: config.redis.url, cacheKey: parseCacheKey(await readFile(config.redis.cacheKeyFile, "utf8")) };
  const sidecar = createSidecar({
    authority: createAuthorityClient({ baseUrl: config.authorityUrl, token: tokenSource(config) }),
    verifier: createJwtVerifier({
      issuer: config.issuer,
      audience: config.audience,
      jwks: { url: config.jwksUrl },
      requireTokenUse: "access",
    }),
    protector,
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
        config.issuer,
        config.jwksUrl,
        config.credentials.kind === "client_credentials" ? config.credentials.tokenUrl : undefined,
        config.redis?.url,
        config.keyRings.storeUrl,
      ]
        .map(endpointOfUrl)
        .filter((endpoint) => endpoint !== undefined),
    }),
  });
  try {
    await sidecar.start();
  } catch (error) {
    await sidecar.close({ graceMs: 0 });
    await store.close();
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
    sidecar
      .close({ graceMs: config.shutdownGraceMs })
      .then(() => store.close())
      .then(
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
      if (isCryptoError(error) || isStoreError(error)) cmd.error(`authority sidecar: ${error.message}`);
      throw error;
    }
  });
}
