/**
 * The entry of the sidecar's V8 start-up snapshot (scripts/build-sidecar-snapshot.ts, decisions
 * 2799, 2951). Evaluated when the snapshot is built: the sidecar's module graph, its compiled
 * schemas and its ext_authz codecs end up in the blob (the networking built-ins are loaded only
 * when first used, after start: Node cannot snapshot them). A process started from the blob
 * (bin/authority-sidecar, bin/authority.ts) first checks that the blob still matches the
 * sources (or starts them instead), then runs `authority sidecar` with its arguments.
 */
import { startupSnapshot } from "node:v8";
import { Command } from "commander";
import { register } from "../src/cli/commands/sidecar.ts";
import { checkSnapshotInMain } from "../src/cli/sidecar-snapshot.ts";
import { takeExposedGc, warmCompiledParts } from "../src/servers/sidecar/warm-decision.ts";

warmCompiledParts();
// The command and its options are built here too (static defaults only: the environment and the
// flags are read when it runs).
const program = new Command("authority");
register(program);

startupSnapshot.setDeserializeMainFunction(() => {
  takeExposedGc();
  checkSnapshotInMain();
  program.parseAsync(process.argv.slice(2), { from: "user" }).catch((error: unknown) => {
    process.stderr.write(`authority: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
});
