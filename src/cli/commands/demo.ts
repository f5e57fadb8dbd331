import type { Command } from "commander";
import { pino } from "pino";
import { demoSchema } from "../../config/dev.ts";
import { runDemo } from "../../dev/demo/run.ts";
import { loggerOptions } from "../../observability/logger.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority demo`: starts the development environment on free ports in a temporary
 * directory, walks through every runtime path printing each step and its outcome, shuts
 * down, and exits 0 only when every outcome was the expected one.
 */

export function register(program: Command): void {
  const command = program
    .command("demo")
    .description("Walk through allowed and denied calls on every path against a temporary environment");
  addSettingOptions(command, demoSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(demoSchema, cmd);
    const log = pino({ ...loggerOptions(config.logLevel), name: "demo" }, pino.destination(2));
    const result = await runDemo({
      write: (line) => process.stdout.write(`${line}\n`),
      color: config.color && process.stdout.isTTY === true,
      log,
      ...(config.redisUrl === undefined ? {} : { redisUrl: config.redisUrl }),
    });
    process.exitCode = result.failed === 0 ? 0 : 1;
  });
}
