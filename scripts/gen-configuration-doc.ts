/** Writes docs/configuration.md from the settings definitions (src/cli/configuration-doc.ts). */
import { writeFile } from "node:fs/promises";
import { renderConfigurationDoc } from "../src/cli/configuration-doc.ts";

const target = new URL("../docs/configuration.md", import.meta.url);
await writeFile(target, renderConfigurationDoc());
process.stdout.write(`wrote ${target.pathname}\n`);
