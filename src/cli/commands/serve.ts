import type { Command } from "commander";
import { type AuthorityConfig, authoritySchema } from "../../config/authority.ts";
import { isCryptoError } from "../../crypto/index.ts";
import { createLogger } from "../../observability/logger.ts";
import { buildAuthorityService } from "../../servers/authority/build.ts";
import { isStoreError } from "../../store/index.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority serve`: the authority service. Settings: flags > environment > config file
 * (`--config`) > defaults, names in docs/configuration.md. SIGTERM / SIGINT stop it in
 * order: not ready but still serving for --shutdown-wait, stop accepting, finish requests in
 * flight, flush the audit buffer, close the store — bounded by --shutdown-timeout.
 */

async function run(config: AuthorityConfig): Promise<void> {
  const log = createLogger("authority", config.logLevel);
  const service = await buildAuthorityService(config, { logger: log });
  const url = await service.listen();
  // Sources only: values (store URLs, keys) may be secrets.
  log.info(
    { url, issuer: config.issuer, store: service.context.store.backend, sources: config.sources },
    "authority service listening",
  );

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "authority service shutting down");
    // A stuck socket or store must not keep the process alive past the budget.
    setTimeout(
      () => {
        log.error("shutdown did not finish in time");
        process.exit(1);
      },
      config.shutdownWaitMs + config.shutdownTimeoutMs + 5000,
    ).unref();
    service.close({ drainMs: config.shutdownWaitMs }).then(
      ({ auditFlushed, auditLost }) => {
        if (!auditFlushed) log.error({ auditLost }, "audit records lost at shutdown");
        log.info("authority service stopped");
        process.exitCode = auditFlushed ? 0 : 1;
      },
      (error: unknown) => {
        log.error({ err: error }, "authority service failed to close");
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

export function register(program: Command): void {
  const command = program
    .command("serve")
    .description("Run the authority service (admin API, authorize-invocation, audit and usage)");
  addSettingOptions(command, authoritySchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(authoritySchema, cmd);
    try {
      await run(config);
    } catch (error) {
      if (isCryptoError(error) || isStoreError(error)) cmd.error(`authority serve: ${error.message}`);
      throw error;
    }
  });
}
