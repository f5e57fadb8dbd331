import type { Command } from "commander";
import { pino } from "pino";
import { type DevCommandConfig, devSchema } from "../../config/dev.ts";
import { startDevEnvironment } from "../../dev/environment.ts";
import { devInstructions } from "../../dev/instructions.ts";
import { loggerOptions } from "../../observability/logger.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority dev`: every service on localhost in one process with seeded demo data
 * (src/dev/environment.ts), until SIGINT/SIGTERM. The instructions go to stdout, component
 * logs (default level warn) to stderr.
 */

async function run(flags: DevCommandConfig): Promise<void> {
  const log = pino({ ...loggerOptions(flags.logLevel), name: "dev" }, pino.destination(2));
  const env = await startDevEnvironment({
    stateDir: flags.stateDir,
    ports: "default",
    log,
    sidecar: flags.sidecar,
    egressAllow: flags.egressAllow,
    ...(flags.redisUrl === undefined ? {} : { redisUrl: flags.redisUrl }),
  });
  for (const line of devInstructions({
    urls: env.urls,
    stateDir: env.stateDir,
    credentialsFile: env.credentialsFile,
    managedCertFile: String(env.credentials.managed_tls_cert),
    report: env.report,
    warnings: env.warnings,
  })) {
    process.stdout.write(`${line}\n`);
  }
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      process.stdout.write(`\n${signal}: stopping…\n`);
      // A stuck socket must not keep the process alive for ever.
      setTimeout(() => {
        process.stderr.write("authority dev: shutdown did not finish in time\n");
        process.exit(1);
      }, 20_000).unref();
      env.close().then(resolve, (error: unknown) => {
        log.error({ err: error }, "shutdown failed");
        process.exitCode = 1;
        resolve();
      });
    };
    process.once("SIGINT", () => stop("SIGINT"));
    process.once("SIGTERM", () => stop("SIGTERM"));
  });
  process.stdout.write("stopped.\n");
}

export function register(program: Command): void {
  const command = program
    .command("dev")
    .description("Run every service on localhost with seeded demo data until Ctrl-C (the quick start)");
  addSettingOptions(command, devSchema).action(async (_options: unknown, cmd: Command) => {
    await run(await loadCommandConfig(devSchema, cmd));
  });
}
