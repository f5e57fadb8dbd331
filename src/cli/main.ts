import { Command } from "commander";

/**
 * The `authority` command. Each subcommand lives in its own file under commands/ and
 * exports `register(program)`; this file only lists them.
 */
const commandModules: Array<() => Promise<{ register(program: Command): void }>> = [
  () => import("./commands/inject.ts"),
  () => import("./commands/idp.ts"),
  () => import("./commands/token.ts"),
  () => import("./commands/serve.ts"),
  () => import("./commands/crypto.ts"),
  () => import("./commands/managed.ts"),
  () => import("./commands/sidecar.ts"),
  () => import("./commands/dev.ts"),
  () => import("./commands/demo.ts"),
];

export async function main(argv: string[]): Promise<void> {
  const program = new Command("authority")
    .description("Authorization for AI agents, users and API clients")
    .showHelpAfterError();
  for (const load of commandModules) (await load()).register(program);
  await program.parseAsync(argv);
}
