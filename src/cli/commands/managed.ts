import { type Command, Option } from "commander";
import { createLogger } from "../../observability/logger.ts";
import { buildManagedService } from "../../servers/managed/build.ts";
import { ManagedConfigError, type ManagedServerOptions } from "../../servers/managed/options.ts";
import { parseListenAddress } from "./idp.ts";

/**
 * `authority managed`: the managed crypto API over HTTPS. Thin: resolve flags and
 * environment (docs/managed-crypto.md), read or create the certificate, start, stop
 * gracefully on SIGINT/SIGTERM.
 */

export interface ManagedCommandFlags {
  readonly listen: string;
  readonly tlsCert?: string;
  readonly tlsKey?: string;
  readonly stateDir: string;
  readonly idpTokenUrl: string;
  readonly idpClientId?: string;
  readonly idpScope?: string;
  readonly idpAudience?: string;
  readonly cryptoUrl: string;
  readonly rateLimit: string;
  readonly rateBurst: string;
  readonly upstreamTimeout: string;
  readonly logLevel: string;
}

export interface ManagedCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly tls: { readonly certFile: string; readonly keyFile: string } | undefined;
  readonly stateDir: string;
  readonly logLevel: string;
  readonly server: Omit<ManagedServerOptions, "https" | "logger">;
}

function positive(value: string, name: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n <= 0) {
    throw new ManagedConfigError(`${name} must be a positive integer`);
  }
  return n;
}

/** `clientSecret` comes from the environment only, so it never shows in `ps`. */
export function resolveManagedCommandConfig(
  flags: ManagedCommandFlags,
  env: Readonly<Record<string, string | undefined>> = process.env,
): ManagedCommandConfig {
  const { host, port } = parseListenAddress(flags.listen);
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined)) {
    throw new ManagedConfigError("--tls-cert and --tls-key go together");
  }
  const clientSecret = env.AUTHORITY_MANAGED_IDP_CLIENT_SECRET;
  if ((flags.idpClientId === undefined) !== (clientSecret === undefined)) {
    throw new ManagedConfigError(
      "--idp-client-id needs AUTHORITY_MANAGED_IDP_CLIENT_SECRET, and the reverse",
    );
  }
  return {
    host,
    port,
    tls:
      flags.tlsCert === undefined || flags.tlsKey === undefined
        ? undefined
        : { certFile: flags.tlsCert, keyFile: flags.tlsKey },
    stateDir: flags.stateDir,
    logLevel: flags.logLevel,
    server: {
      idpTokenUrl: flags.idpTokenUrl,
      cryptoUrl: flags.cryptoUrl,
      upstreamTimeoutMs: positive(flags.upstreamTimeout, "--upstream-timeout"),
      rateLimit: {
        perUserPerMinute: positive(flags.rateLimit, "--rate-limit"),
        burst: positive(flags.rateBurst, "--rate-burst"),
      },
      idp: {
        ...(flags.idpClientId === undefined || clientSecret === undefined
          ? {}
          : { clientId: flags.idpClientId, clientSecret }),
        ...(flags.idpScope === undefined ? {} : { scope: flags.idpScope }),
        ...(flags.idpAudience === undefined ? {} : { audience: flags.idpAudience }),
      },
    },
  };
}

async function run(flags: ManagedCommandFlags): Promise<void> {
  const config = resolveManagedCommandConfig(flags);
  const log = createLogger("managed", config.logLevel);
  const server = await buildManagedService(config, { logger: log });
  const url = await server.listen();
  log.info(
    { url, crypto: config.server.cryptoUrl, idp: config.server.idpTokenUrl },
    "managed crypto API listening",
  );
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "managed crypto API shutting down");
    setTimeout(() => process.exit(1), 10_000).unref();
    server.close().then(
      () => {
        process.exitCode = 0;
      },
      (error: unknown) => {
        log.error({ err: error }, "managed crypto API failed to close");
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

export function register(program: Command): void {
  program
    .command("managed")
    .description(
      "Run the managed crypto API (HTTPS: /v1/encrypt, /v1/decrypt, /v1/sign-encrypt, /v1/decrypt-verify)",
    )
    .addOption(
      new Option("--listen <host:port>", "address to listen on")
        .env("AUTHORITY_MANAGED_LISTEN")
        .default("127.0.0.1:8081"),
    )
    .addOption(new Option("--tls-cert <file>", "PEM certificate (chain)").env("AUTHORITY_TLS_CERT_FILE"))
    .addOption(new Option("--tls-key <file>", "PEM private key").env("AUTHORITY_TLS_KEY_FILE"))
    .addOption(
      new Option("--state-dir <dir>", "where a development certificate is kept when no TLS files are given")
        .env("AUTHORITY_STATE_DIR")
        .default("./.authority"),
    )
    .addOption(
      new Option("--idp-token-url <url>", "identity provider token endpoint (password grant)")
        .env("AUTHORITY_IDP_TOKEN_URL")
        .default("http://127.0.0.1:8083/oauth2/token"),
    )
    .addOption(
      new Option(
        "--idp-client-id <id>",
        "client id for the password grant (secret: AUTHORITY_MANAGED_IDP_CLIENT_SECRET)",
      ).env("AUTHORITY_MANAGED_IDP_CLIENT_ID"),
    )
    .addOption(new Option("--idp-scope <scopes>", "scopes to request").env("AUTHORITY_MANAGED_IDP_SCOPE"))
    .addOption(
      new Option("--idp-audience <aud>", "audience to request").env("AUTHORITY_MANAGED_IDP_AUDIENCE"),
    )
    .addOption(
      new Option("--crypto-url <url>", "upstream crypto service")
        .env("AUTHORITY_CRYPTO_URL")
        .default("http://127.0.0.1:8082"),
    )
    .addOption(
      new Option("--rate-limit <n>", "requests per user per minute")
        .env("AUTHORITY_MANAGED_RATE_LIMIT")
        .default("600"),
    )
    .addOption(
      new Option("--rate-burst <n>", "requests a user may send at once")
        .env("AUTHORITY_MANAGED_RATE_BURST")
        .default("60"),
    )
    .addOption(
      new Option("--upstream-timeout <ms>", "deadline of one upstream call")
        .env("AUTHORITY_MANAGED_UPSTREAM_TIMEOUT_MS")
        .default("5000"),
    )
    .addOption(new Option("--log-level <level>", "log level").env("AUTHORITY_LOG_LEVEL").default("info"))
    .action(async (flags: ManagedCommandFlags, command: Command) => {
      try {
        await run(flags);
      } catch (error) {
        if (error instanceof ManagedConfigError) command.error(`authority managed: ${error.message}`);
        throw error;
      }
    });
}
