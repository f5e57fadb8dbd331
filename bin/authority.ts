#!/usr/bin/env node
import { main } from "../src/cli/main.ts";

main(process.argv).catch((error: unknown) => {
  process.stderr.write(`authority: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
