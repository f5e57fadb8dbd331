import { readFile, stat } from "node:fs/promises";
import type { Command } from "commander";
import pkg from "../../../package.json" with { type: "json" };
import { readConfigFile } from "../../config/file.ts";
import { type InjectCommandConfig, injectSchema } from "../../config/inject.ts";
import { ConfigError } from "../../core/config-error.ts";
import { createLogger } from "../../observability/logger.ts";
import { createMetricsRegistry } from "../../observability/metrics.ts";
import { InjectorSettingsError, parseSidecarSettings } from "../../servers/inject/settings.ts";
import { createWebhookServer, type TlsMaterial } from "../../servers/inject/webhook-server.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority inject`: the mutating admission webhook. Thin: resolve its settings
 * (src/config/inject.ts), load the sidecar settings file and the certificate, start the
 * server, reload the certificate when the files change (cert-manager renews it in place),
 * stop on SIGTERM.
 */

async function readTls(certFile: string, keyFile: string): Promise<TlsMaterial> {
  const [cert, key] = await Promise.all([readFile(certFile), readFile(keyFile)]);
  return { cert, key };
}

async function mtimes(files: readonly string[]): Promise<string> {
  const stats = await Promise.all(files.map((f) => stat(f)));
  return stats.map((s) => s.mtimeMs).join(",");
}

async function run(config: InjectCommandConfig): Promise<void> {
  const { host, port } = config;
  const reloadSeconds = config.tlsReloadSeconds;
  // Read like a config file: size-bounded, and a syntax error names the line, not the content.
  const raw = config.settingsFile === undefined ? {} : await readConfigFile(config.settingsFile);
  const settings = parseSidecarSettings(raw, { image: config.sidecarImage, version: pkg.version });
  const log = createLogger("authority-inject", config.logLevel);
  const certFiles = [config.tls.certFile, config.tls.keyFile];
  const server = createWebhookServer({
    tls: await readTls(config.tls.certFile, config.tls.keyFile),
    settings,
    logger: log,
    metrics: createMetricsRegistry(),
  });
  const { url } = await server.listen(host, port);
  log.info({ url, image: settings.image }, "injector listening");

  let seen = await mtimes(certFiles);
  const timer =
    reloadSeconds === 0
      ? undefined
      : setInterval(() => {
          void (async () => {
            try {
              const now = await mtimes(certFiles);
              if (now === seen) return;
              server.reloadTls(await readTls(certFiles[0] ?? "", certFiles[1] ?? ""));
              seen = now;
              log.info("TLS certificate reloaded");
            } catch (error) {
              // Keep serving with the old certificate; a half-written pair is retried next tick.
              log.warn({ err: error }, "TLS certificate reload failed");
            }
          })();
        }, reloadSeconds * 1000);
  timer?.unref();

  const stop = (signal: string) => {
    log.info({ signal }, "injector stopping");
    if (timer !== undefined) clearInterval(timer);
    server.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
}

export function register(program: Command): void {
  const command = program
    .command("inject")
    .description("Kubernetes mutating admission webhook that adds the Authority sidecar to labelled pods");
  addSettingOptions(command, injectSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(injectSchema, cmd);
    try {
      await run(config);
    } catch (error) {
      if (error instanceof InjectorSettingsError || error instanceof ConfigError)
        cmd.error(`authority inject: ${error.message}`);
      throw error;
    }
  });
}
