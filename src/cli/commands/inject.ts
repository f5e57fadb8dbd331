import { readFile, stat } from "node:fs/promises";
import { type Command, Option } from "commander";
import { parse as parseYaml } from "yaml";
import pkg from "../../../package.json" with { type: "json" };
import { parseListenAddress } from "../../config/listen-address.ts";
import { createLogger } from "../../observability/logger.ts";
import { parseSidecarSettings } from "../../servers/inject/settings.ts";
import { createWebhookServer, type TlsMaterial } from "../../servers/inject/webhook-server.ts";

/**
 * `authority inject`: the mutating admission webhook. Thin: read flags/env, load the
 * settings file and the certificate, start the server, reload the certificate when the
 * files change (cert-manager renews it in place), stop on SIGTERM.
 */

interface InjectFlags {
  readonly listen: string;
  readonly tlsCert?: string;
  readonly tlsKey?: string;
  readonly sidecarImage?: string;
  readonly settingsFile?: string;
  readonly logLevel: string;
  readonly tlsReloadSeconds: string;
}

async function readTls(certFile: string, keyFile: string): Promise<TlsMaterial> {
  const [cert, key] = await Promise.all([readFile(certFile), readFile(keyFile)]);
  return { cert, key };
}

async function mtimes(files: readonly string[]): Promise<string> {
  const stats = await Promise.all(files.map((f) => stat(f)));
  return stats.map((s) => s.mtimeMs).join(",");
}

async function run(flags: InjectFlags): Promise<void> {
  if (flags.tlsCert === undefined || flags.tlsKey === undefined) {
    throw new Error(
      "--tls-cert and --tls-key (AUTHORITY_TLS_CERT_FILE / AUTHORITY_TLS_KEY_FILE) are required",
    );
  }
  const { host, port } = parseListenAddress(flags.listen);
  const reloadSeconds = Number(flags.tlsReloadSeconds);
  if (!Number.isInteger(reloadSeconds) || reloadSeconds < 0) {
    throw new Error("--tls-reload-seconds must be a non-negative integer");
  }
  const raw =
    flags.settingsFile === undefined ? {} : (parseYaml(await readFile(flags.settingsFile, "utf8")) ?? {});
  const settings = parseSidecarSettings(raw, { image: flags.sidecarImage, version: pkg.version });
  const log = createLogger("authority-inject", flags.logLevel);
  const certFiles = [flags.tlsCert, flags.tlsKey];
  const server = createWebhookServer({
    tls: await readTls(flags.tlsCert, flags.tlsKey),
    settings,
    logger: log,
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
  program
    .command("inject")
    .description("Kubernetes mutating admission webhook that adds the Authority sidecar to labelled pods")
    .addOption(
      new Option("--listen <host:port>", "HTTPS listen address")
        .env("AUTHORITY_INJECT_LISTEN")
        .default("0.0.0.0:8443"),
    )
    .addOption(
      new Option("--tls-cert <file>", "PEM certificate served to the API server").env(
        "AUTHORITY_TLS_CERT_FILE",
      ),
    )
    .addOption(new Option("--tls-key <file>", "PEM private key of --tls-cert").env("AUTHORITY_TLS_KEY_FILE"))
    .addOption(
      new Option("--sidecar-image <image>", "sidecar image (wins over the settings file)").env(
        "AUTHORITY_SIDECAR_IMAGE",
      ),
    )
    .addOption(
      new Option("--settings-file <file>", "YAML/JSON sidecar settings (the chart's injector ConfigMap)").env(
        "AUTHORITY_INJECT_SETTINGS_FILE",
      ),
    )
    .addOption(
      new Option(
        "--tls-reload-seconds <n>",
        "how often to check the certificate files for renewal (0: never)",
      )
        .env("AUTHORITY_INJECT_TLS_RELOAD_SECONDS")
        .default("60"),
    )
    .addOption(new Option("--log-level <level>", "pino level").env("AUTHORITY_LOG_LEVEL").default("info"))
    .action(async (flags: InjectFlags) => {
      await run(flags);
    });
}
