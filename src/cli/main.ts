import { Command } from "commander";

type CommandModule = { register(program: Command): void };

/**
 * The `authority` command. Each subcommand lives in its own file under commands/ and
 * exports `register(program)`; this file only lists them. Only the requested command's
 * module is loaded, so `authority sidecar` does not carry the other servers in memory.
 */
const commandModules: Readonly<Record<string, () => Promise<CommandModule>>> = {
  serve: () => import("./commands/serve.ts"),
  managed: () => import("./commands/managed.ts"),
  crypto: () => import("./commands/crypto.ts"),
  idp: () => import("./commands/idp.ts"),
  sidecar: () => import("./commands/sidecar.ts"),
  inject: () => import("./commands/inject.ts"),
  dev: () => import("./commands/dev.ts"),
  demo: () => import("./commands/demo.ts"),
  token: () => import("./commands/token.ts"),
};

export async function main(argv: string[]): Promise<void> {
  const program = new Command("authority")
    .description("Authorization for AI agents, users and API clients")
    .showHelpAfterError();
  const requested = argv[2];
  const load = requested === undefined ? undefined : commandModules[requested];
  for (const loader of load === undefined ? Object.values(commandModules) : [load]) {
    (await loader()).register(program);
  }
  await program.parseAsync(argv);
}
