import { join } from "node:path";
import { type Command, Option } from "commander";
import { CryptoError } from "../../crypto/index.ts";
import { createLogger } from "../../observability/logger.ts";
import { buildCryptoService } from "../../servers/crypto/build.ts";
import { CryptoServerConfigError } from "../../servers/crypto/index.ts";
import { parseListenAddress } from "./idp.ts";

/**
 * `authority crypto`: the upstream post-quantum crypto service. Thin: resolve flags and
 * environment (docs/configuration.md, docs/managed-crypto.md), open the store, load the
 * KEK, start, stop gracefully on SIGINT/SIGTERM.
 */

export interface CryptoCommandFlags {
  readonly listen: string;
  readonly stateDir: string;
  readonly store?: string;
  readonly kekFile?: string;
  readonly initKek?: boolean;
  readonly issuer: string;
  readonly jwksUrl?: string;
  readonly audience: string;
  readonly adminRole: string;
  readonly logLevel: string;
}

export interface CryptoCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly storeUrl: string;
  readonly kekFile: string;
  /** Create the KEK file when it is absent (explicit init; embedded SQLite store only). */
  readonly initKek: boolean;
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: string;
  readonly adminRole: string;
  readonly logLevel: string;
}

export function resolveCryptoCommandConfig(flags: CryptoCommandFlags): CryptoCommandConfig {
  const { host, port } = parseListenAddress(flags.listen);
  const issuer = flags.issuer.replace(/\/+$/, "");
  const storeUrl = flags.store ?? `sqlite:${join(flags.stateDir, "authority.db")}`;
  const initKek = flags.initKek === true;
  if (initKek && !storeUrl.toLowerCase().startsWith("sqlite:")) {
    throw new CryptoServerConfigError(
      "--init-kek is only for the embedded SQLite store: replicas sharing a store must share one KEK",
    );
  }
  return {
    host,
    port,
    storeUrl,
    kekFile: flags.kekFile ?? join(flags.stateDir, "kek"),
    initKek,
    issuer,
    jwksUrl: flags.jwksUrl ?? `${issuer}/.well-known/jwks.json`,
    audience: flags.audience,
    adminRole: flags.adminRole,
    logLevel: flags.logLevel,
  };
}

async function run(flags: CryptoCommandFlags): Promise<void> {
  const config = resolveCryptoCommandConfig(flags);
  const log = createLogger("crypto", config.logLevel);
  const service = await buildCryptoService(
    { ...config, kekValue: process.env.AUTHORITY_KEK },
    { logger: log },
  );
  const url = await service.listen();
  log.info(
    { url, store: service.store.backend, kek: service.kek.id, issuer: config.issuer },
    "crypto service listening",
  );
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "crypto service shutting down");
    setTimeout(() => process.exit(1), 10_000).unref();
    service.close().then(
      () => {
        process.exitCode = 0;
      },
      (error: unknown) => {
        log.error({ err: error }, "crypto service failed to close");
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

export function register(program: Command): void {
  program
    .command("crypto")
    .description("Run the upstream post-quantum crypto service (per-owner ML-KEM-768 / ML-DSA-65 key rings)")
    .addOption(
      new Option("--listen <host:port>", "address to listen on")
        .env("AUTHORITY_CRYPTO_LISTEN")
        .default("127.0.0.1:8082"),
    )
    .addOption(
      new Option("--state-dir <dir>", "embedded state directory")
        .env("AUTHORITY_STATE_DIR")
        .default("./.authority"),
    )
    .addOption(
      new Option(
        "--store <url>",
        "sqlite:<file> or redis://host:port/db (default: sqlite:<state-dir>/authority.db)",
      ).env("AUTHORITY_STORE_URL"),
    )
    .addOption(
      new Option(
        "--kek-file <path>",
        "key-encryption key file (default: <state-dir>/kek; AUTHORITY_KEK wins)",
      ).env("AUTHORITY_KEK_FILE"),
    )
    .addOption(
      new Option(
        "--init-kek",
        "create the KEK file if it does not exist (first start of an embedded install); otherwise a missing file is an error",
      ).env("AUTHORITY_INIT_KEK"),
    )
    .addOption(
      new Option("--issuer <url>", "issuer of accepted bearer tokens")
        .env("AUTHORITY_ISSUER")
        .default("http://127.0.0.1:8083"),
    )
    .addOption(
      new Option("--jwks-url <url>", "JWKS of the issuer (default: <issuer>/.well-known/jwks.json)").env(
        "AUTHORITY_JWKS_URL",
      ),
    )
    .addOption(
      new Option("--audience <aud>", "required token audience")
        .env("AUTHORITY_AUDIENCE")
        .default("authority"),
    )
    .addOption(
      new Option("--admin-role <role>", "role admin routes require")
        .env("AUTHORITY_CRYPTO_ADMIN_ROLE")
        .default("admin"),
    )
    .addOption(new Option("--log-level <level>", "log level").env("AUTHORITY_LOG_LEVEL").default("info"))
    .action(async (flags: CryptoCommandFlags, command: Command) => {
      try {
        await run(flags);
      } catch (error) {
        if (error instanceof CryptoServerConfigError || error instanceof CryptoError) {
          command.error(`authority crypto: ${error.message}`);
        }
        throw error;
      }
    });
}
