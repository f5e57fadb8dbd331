import { readFileSync } from "node:fs";
import { Command, type ErrorOptions } from "commander";

type CommandModule = { register(program: Command): void };

/**
 * The `authority` command. Each subcommand lives in its own file under commands/ and
 * exports `register(program)`; this file only lists them. Only the requested command's
 * module is loaded, so `authority sidecar` does not carry the other servers in memory.
 */
const commandModules: Readonly<Record<string, () => Promise<CommandModule>>> = {
  serve: () => import("./commands/serve.ts"),
  reprotect: () => import("./commands/reprotect.ts"),
  managed: () => import("./commands/managed.ts"),
  crypto: () => import("./commands/crypto.ts"),
  idp: () => import("./commands/idp.ts"),
  sidecar: () => import("./commands/sidecar.ts"),
  inject: () => import("./commands/inject.ts"),
  dev: () => import("./commands/dev.ts"),
  demo: () => import("./commands/demo.ts"),
  token: () => import("./commands/token.ts"),
  store: () => import("./commands/store.ts"),
  audit: () => import("./commands/audit.ts"),
  explain: () => import("./commands/explain.ts"),
  replay: () => import("./commands/replay.ts"),
};

/**
 * Help follows usage errors only (an unknown option, a missing argument: commander's own codes).
 * A runtime failure that a command reports with `command.error(message)` is one line: the
 * help text would bury it.
 */
class AuthorityCommand extends Command {
  override createCommand(name?: string): AuthorityCommand {
    return new AuthorityCommand(name);
  }

  override error(message: string, options?: ErrorOptions): never {
    const usageError = options?.code !== undefined && options.code !== "commander.error";
    if (!usageError) this.showHelpAfterError(false);
    return super.error(message, options);
  }
}

export function productVersion(): string {
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return manifest.version;
}

export async function main(argv: string[]): Promise<void> {
  const program = new AuthorityCommand("authority")
    .description("Authorization for AI agents, users and API clients")
    .version(productVersion(), "-V, --version", "print the version and exit")
    .showHelpAfterError();
  const requested = argv[2];
  const load = requested === undefined ? undefined : commandModules[requested];
  for (const loader of load === undefined ? Object.values(commandModules) : [load]) {
    (await loader()).register(program);
  }
  await program.parseAsync(argv);
}
