import type { Command } from "commander";
import { ConfigError } from "../../core/config-error.ts";
import { isCryptoError } from "../../crypto/index.ts";
import { createLogger } from "../../observability/logger.ts";
import { PolicyCacheError } from "../../policy/cache/index.ts";
import { buildSidecar } from "../../servers/sidecar/build.ts";
import { type SidecarConfig, sidecarSchema } from "../../servers/sidecar/config.ts";
import { SidecarConfigError } from "../../servers/sidecar/errors.ts";
import { lowerHelperThreadPriority } from "../../servers/sidecar/helper-threads.ts";
import { installProcessGuard } from "../../servers/sidecar/request-guard.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority sidecar`: Envoy ext_authz (gRPC), the forward proxy and the metrics/health port
 * (docs/sidecar.md). Settings: flags > environment > config file (`--config`) > defaults
 * (docs/configuration.md).
 * SIGTERM / SIGINT: not ready at once, still answering for `--shutdown-wait-ms` (requests keep
 * arriving while the pod's endpoints are withdrawn), then in-flight requests drain, then exit.
 * An exception that nothing caught fails its request closed, or ends the process (exit code
 * 70) outside one.
 */

/** The longest a start keeps V8's helper threads at the event loop's priority. */
const HELPER_THREADS_LOWERED_BY_MS = 60_000;

async function run(config: SidecarConfig): Promise<void> {
  const log = createLogger("sidecar", config.logLevel);
  const sidecar = await buildSidecar(config, { logger: log });
  // The last line of defence (request-guard.ts): an exception nothing caught fails its request
  // closed; outside any request it ends the process (decision records are in the journal).
  installProcessGuard({ logger: log, onFatal: () => process.exit(70) });
  try {
    await sidecar.start();
  } catch (error) {
    await sidecar.close({ graceMs: 0 });
    throw error;
  }
  // Once warm (or after a minute without), the event loop first and V8's helper threads when it
  // waits; during the start their background compiles are worth their slices (decision 3092).
  const lowerBy = Date.now() + HELPER_THREADS_LOWERED_BY_MS;
  const lowerWhenReady = setInterval(() => {
    if (!sidecar.ready && Date.now() < lowerBy) return;
    clearInterval(lowerWhenReady);
    log.debug({ threads: lowerHelperThreadPriority() }, "V8 helper threads at the lowest priority");
  }, 50).unref();
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "sidecar shutting down");
    // drain, then the servers' grace, then the decision records' flush (the same grace again)
    setTimeout(
      () => {
        log.error("shutdown did not finish in time");
        process.exit(1);
      },
      config.shutdownWaitMs + 2 * config.shutdownGraceMs + 5000,
    ).unref();
    sidecar.close({ graceMs: config.shutdownGraceMs, drainMs: config.shutdownWaitMs }).then(
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

export function register(program: Command): void {
  const command = program
    .command("sidecar")
    .description("Run the per-pod sidecar: Envoy ext_authz (gRPC), forward proxy, metrics and health");
  addSettingOptions(command, sidecarSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(sidecarSchema, cmd);
    try {
      await run(config);
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
