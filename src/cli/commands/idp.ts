import { type Command, Option } from "commander";
import {
  type ListenAddress,
  parseListenAddress as parseSharedListenAddress,
} from "../../config/listen-address.ts";
import { createLogger } from "../../observability/logger.ts";
import { IdpConfigError } from "../../servers/idp/errors.ts";
import type { IdpServerOptions } from "../../servers/idp/options.ts";
import { createIdpServer, type IdpServer } from "../../servers/idp/server.ts";

/**
 * `authority idp`: the development identity provider. Flags win over the environment
 * (names in docs/configuration.md and docs/identity.md).
 */

export interface IdpCommandFlags {
  readonly listen: string;
  readonly issuer?: string;
  readonly accountsFile?: string;
  readonly keysDir?: string;
  readonly audience?: string;
  readonly tokenLifetime?: string;
  readonly tenantClaim?: string;
  readonly rotationGrace?: string;
  readonly logLevel: string;
}

export interface IdpCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly server: Omit<IdpServerOptions, "logger">;
  readonly logLevel: string;
}

/** `host:port` or `[v6]:port`, as an IdpConfigError (managed and crypto use it too). */
export function parseListenAddress(value: string): ListenAddress {
  try {
    return parseSharedListenAddress(value, "--listen");
  } catch (error) {
    throw new IdpConfigError(error instanceof Error ? error.message : String(error));
  }
}

function seconds(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n <= 0) {
    throw new IdpConfigError(`${name} must be a positive number of seconds`);
  }
  return n;
}

export function resolveIdpCommandConfig(flags: IdpCommandFlags): IdpCommandConfig {
  const { host, port } = parseListenAddress(flags.listen);
  const tokenLifetimeSec = seconds(flags.tokenLifetime, "--token-lifetime");
  const rotationGraceSec = seconds(flags.rotationGrace, "--rotation-grace");
  return {
    host,
    port,
    logLevel: flags.logLevel,
    server: {
      ...(flags.issuer === undefined ? {} : { issuer: flags.issuer }),
      ...(flags.accountsFile === undefined ? {} : { accountsFile: flags.accountsFile }),
      ...(flags.keysDir === undefined ? {} : { keysDir: flags.keysDir }),
      ...(flags.audience === undefined ? {} : { audience: flags.audience }),
      ...(flags.tenantClaim === undefined ? {} : { tenantClaim: flags.tenantClaim }),
      ...(tokenLifetimeSec === undefined ? {} : { tokenLifetimeSec }),
      ...(rotationGraceSec === undefined ? {} : { rotationGraceSec }),
    },
  };
}

async function run(flags: IdpCommandFlags): Promise<IdpServer> {
  const config = resolveIdpCommandConfig(flags);
  const log = createLogger("idp", config.logLevel);
  const server = await createIdpServer({ ...config.server, logger: log });
  const url = await server.listen({ host: config.host, port: config.port });
  const loaded = server.directory.size();
  if (loaded.serviceAccounts + loaded.clients === 0) {
    log.warn("no service accounts or clients loaded; pass --accounts-file");
  }
  log.info(
    {
      url,
      issuer: server.issuer,
      token_endpoint: server.tokenEndpoint,
      jwks_uri: server.jwksUri,
      service_accounts: loaded.serviceAccounts,
      clients: loaded.clients,
    },
    "identity provider listening",
  );
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "identity provider shutting down");
    // A stuck connection must not keep the process alive forever.
    setTimeout(() => process.exit(1), 10_000).unref();
    server.close().then(
      () => {
        process.exitCode = 0;
      },
      (error: unknown) => {
        log.error({ err: error }, "identity provider failed to close");
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
  return server;
}

export function register(program: Command): void {
  program
    .command("idp")
    .description("Run the development identity provider (password and client-credentials grants, JWKS)")
    .addOption(
      new Option("--listen <host:port>", "address to listen on")
        .env("AUTHORITY_IDP_LISTEN")
        .default("127.0.0.1:8083"),
    )
    .addOption(
      new Option("--issuer <url>", "public issuer URL (default: http://<listen>)").env(
        "AUTHORITY_IDP_ISSUER",
      ),
    )
    .addOption(
      new Option("--accounts-file <path>", "JSON file of service accounts and clients").env(
        "AUTHORITY_IDP_ACCOUNTS_FILE",
      ),
    )
    .addOption(
      new Option("--keys-dir <dir>", "persist signing keys here (mode 0600); in memory when unset").env(
        "AUTHORITY_IDP_KEYS_DIR",
      ),
    )
    .addOption(
      new Option("--audience <aud>", "default token audience (default: authority)").env(
        "AUTHORITY_IDP_AUDIENCE",
      ),
    )
    .addOption(
      new Option("--token-lifetime <seconds>", "access-token lifetime (default: 900)").env(
        "AUTHORITY_IDP_TOKEN_LIFETIME",
      ),
    )
    .addOption(
      new Option("--tenant-claim <name>", "name of the tenant claim (default: tenant)").env(
        "AUTHORITY_IDP_TENANT_CLAIM",
      ),
    )
    .addOption(
      new Option(
        "--rotation-grace <seconds>",
        "how long a rotated-out key stays published (default: 3600)",
      ).env("AUTHORITY_IDP_ROTATION_GRACE"),
    )
    .addOption(new Option("--log-level <level>", "log level").env("AUTHORITY_LOG_LEVEL").default("info"))
    .action(async (flags: IdpCommandFlags, command: Command) => {
      try {
        await run(flags);
      } catch (error) {
        if (error instanceof IdpConfigError) command.error(`authority idp: ${error.message}`);
        throw error;
      }
    });
}
