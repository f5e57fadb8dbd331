import { type Command, Option } from "commander";
import { pino } from "pino";
import { logLevels } from "../../config/authority.ts";
import { runDemo } from "../../dev/demo/run.ts";
import { loggerOptions } from "../../observability/logger.ts";

/**
 * `authority demo`: starts the development environment on free ports in a temporary
 * directory, walks through every runtime path printing each step and its outcome, shuts
 * down, and exits 0 only when every outcome was the expected one.
 */

interface DemoFlags {
  readonly redisUrl?: string;
  readonly logLevel: string;
  readonly color?: boolean;
}

export function register(program: Command): void {
  program
    .command("demo")
    .description("Walk through allowed and denied calls on every path against a temporary environment")
    .addOption(
      new Option("--redis-url <url>", "Redis for the sidecar's verified-policy cache (optional)").env(
        "AUTHORITY_REDIS_URL",
      ),
    )
    .addOption(
      new Option("--log-level <level>", "component log level (stderr)")
        .choices([...logLevels])
        .default("error"),
    )
    .option("--no-color", "plain output")
    .action(async (flags: DemoFlags) => {
      const log = pino({ ...loggerOptions(flags.logLevel), name: "demo" }, pino.destination(2));
      const result = await runDemo({
        write: (line) => process.stdout.write(`${line}\n`),
        color: flags.color !== false && process.stdout.isTTY === true,
        log,
        ...(flags.redisUrl === undefined ? {} : { redisUrl: flags.redisUrl }),
      });
      process.exitCode = result.failed === 0 ? 0 : 1;
    });
}
