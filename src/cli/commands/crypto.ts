import type { Command } from "commander";
import { type CryptoCommandConfig, cryptoSchema } from "../../config/crypto.ts";
import { CryptoError } from "../../crypto/index.ts";
import { createLogger } from "../../observability/logger.ts";
import { buildCryptoService } from "../../servers/crypto/build.ts";
import { CryptoServerConfigError } from "../../servers/crypto/index.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority crypto`: the upstream post-quantum crypto service. Thin: resolve its settings
 * (src/config/crypto.ts; docs/configuration.md, docs/managed-crypto.md), build the service,
 * start, stop gracefully on SIGINT/SIGTERM.
 */

async function run(config: CryptoCommandConfig): Promise<void> {
  const log = createLogger("crypto", config.logLevel);
  const service = await buildCryptoService(config, { logger: log });
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
  const command = program
    .command("crypto")
    .description("Run the upstream post-quantum crypto service (per-owner ML-KEM-768 / ML-DSA-65 key rings)");
  addSettingOptions(command, cryptoSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(cryptoSchema, cmd);
    try {
      await run(config);
    } catch (error) {
      if (error instanceof CryptoServerConfigError || error instanceof CryptoError) {
        cmd.error(`authority crypto: ${error.message}`);
      }
      throw error;
    }
  });
}
