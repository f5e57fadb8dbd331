/**
 * The entry of the sidecar's V8 start-up snapshot (scripts/build-sidecar-snapshot.ts): evaluating
 * this bundle at image build puts the sidecar's module graph into the snapshot; the process that
 * starts from the snapshot runs `authority sidecar` with its arguments.
 */
import { startupSnapshot } from "node:v8";
import { Command } from "commander";
import { register } from "../src/cli/commands/sidecar.ts";
import { warmCompiledParts } from "../src/servers/sidecar/warm-decision.ts";

if (process.env.SNAPSHOT_WARM === "1") warmCompiledParts();

startupSnapshot.setDeserializeMainFunction(() => {
  const program = new Command("authority");
  register(program);
  const args = process.argv.slice(process.argv.indexOf("sidecar"));
  program.parseAsync(args, { from: "user" }).catch((error: unknown) => {
    process.stderr.write(`authority: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
});
