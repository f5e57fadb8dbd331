#!/usr/bin/env node
import { fileURLToPath } from "node:url";
import { startSidecarFromSnapshot } from "../src/cli/sidecar-snapshot.ts";

// Before anything else is loaded: the sidecar starts from its start-up snapshot when one was
// built for this Node and these sources (decision 2799); this call returns only when it was not.
if (process.argv[2] === "sidecar") startSidecarFromSnapshot(fileURLToPath(new URL("../", import.meta.url)));

const { main } = await import("../src/cli/main.ts");
main(process.argv).catch((error: unknown) => {
  process.stderr.write(`authority: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
