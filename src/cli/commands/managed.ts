import type { Command } from "commander";
import { type ManagedCommandConfig, managedSchema } from "../../config/managed.ts";
import { createLogger } from "../../observability/logger.ts";
import { buildManagedService } from "../../servers/managed/build.ts";
import { ManagedConfigError } from "../../servers/managed/options.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority managed`: the managed crypto API over HTTPS. Thin: resolve its settings
 * (src/config/managed.ts; docs/configuration.md, docs/managed-crypto.md), build the service
 * (which reads or creates the certificate), start, stop gracefully on SIGINT/SIGTERM.
 */

async function run(config: ManagedCommandConfig): Promise<void> {
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
  const command = program
    .command("managed")
    .description(
      "Run the managed crypto API (HTTPS: /v1/encrypt, /v1/decrypt, /v1/sign-encrypt, /v1/decrypt-verify)",
    );
  addSettingOptions(command, managedSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(managedSchema, cmd);
    try {
      await run(config);
    } catch (error) {
      if (error instanceof ManagedConfigError) cmd.error(`authority managed: ${error.message}`);
      throw error;
    }
  });
}
