import { once } from "node:events";
import { createWriteStream } from "node:fs";
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { exportChains } from "../../audit/chain-export.ts";
import { recordNameOf } from "../../audit/receipts.ts";
import { type ChainVerification, type SealRequirement, verifyChainExport } from "../../audit/verify-chain.ts";
import { auditExportSchema } from "../../config/audit-export.ts";
import { isCryptoError, PublicKeyRing } from "../../crypto/index.ts";
import { isStoreError, openStore } from "../../store/index.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/** Writes the export to `out` (a file path, or standard output). */
async function exportTo(storeUrl: string, out: string | undefined): Promise<number> {
  const store = await openStore(storeUrl);
  const sink = out === undefined ? process.stdout : createWriteStream(out, { flags: "wx", mode: 0o600 });
  let lines = 0;
  try {
    for await (const line of exportChains(store, new Date())) {
      lines++;
      if (!sink.write(`${line}\n`)) await once(sink, "drain");
    }
  } finally {
    await store.close();
    if (sink !== process.stdout) await new Promise<void>((resolve) => sink.end(() => resolve()));
  }
  return lines;
}

async function publicKeys(path: string): Promise<PublicKeyRing> {
  const text = await readFile(path, "utf8");
  return PublicKeyRing.import(JSON.parse(text));
}

function summary(result: ChainVerification): string {
  const counts = `${result.records} records in ${result.streams} chains, ${result.checkpoints} checkpoints, ${result.duplicates} retried twins, ${result.unchained} unchained, ${result.unsealed} unsealed (after their stream's newest checkpoint)`;
  const open = Object.entries(result.unsealedByStream).map(
    ([stream, n]) => `\n  unsealed: ${n} in ${stream}`,
  );
  if (result.failure === undefined) return `verified: ${counts}${open.join("")}`;
  return `FAILED (${result.failure.kind}) at line ${result.failure.line}: ${result.failure.message}\n${counts}${open.join("")}`;
}

/** `--require-sealed` and `--sealed-through <time | record id | receipt>` as one requirement. */
function sealRequirement(options: VerifyFlags): SealRequirement | string | undefined {
  if (options.requireSealed === true && options.sealedThrough !== undefined)
    return "give --require-sealed or --sealed-through, not both";
  if (options.requireSealed === true) return { all: true };
  const named = options.sealedThrough;
  if (named === undefined) return undefined;
  if (recordNameOf(named) !== undefined) return { record: named };
  const time = Date.parse(named);
  if (!/^\d{4}-\d{2}-\d{2}/.test(named) || !Number.isFinite(time))
    return "--sealed-through takes an ISO 8601 time, a record id or a receipt";
  return { through: time };
}

interface VerifyFlags {
  readonly keys: string;
  readonly requireSealed?: boolean;
  readonly sealedThrough?: string;
}

/**
 * `authority audit export` and `authority audit verify` (docs/security.md, "Tamper-evident
 * decision records"): verify runs offline, with an export and the service identity's public
 * keys only, and exits 1 naming the first record that was modified, removed, inserted or
 * reordered, or a forged checkpoint.
 */
export function register(program: Command): void {
  const audit = program.command("audit").description("Export and verify the tamper-evident decision records");
  const exportCommand = audit
    .command("export")
    .description("Write the decision chains and their signed checkpoints as JSON lines")
    .option("--out <file>", "write to this new file instead of standard output");
  addSettingOptions(exportCommand, auditExportSchema).action(
    async (options: { out?: string }, cmd: Command) => {
      const config = await loadCommandConfig(auditExportSchema, cmd);
      try {
        const lines = await exportTo(config.storeUrl, options.out);
        if (options.out !== undefined) process.stderr.write(`exported ${lines} lines to ${options.out}\n`);
      } catch (error) {
        if (isStoreError(error)) cmd.error(`authority audit export: ${error.message}`);
        throw error;
      }
    },
  );
  audit
    .command("verify")
    .description("Check an export offline with the service identity's public keys")
    .argument("<export>", "the file `authority audit export` wrote")
    .requiredOption("--keys <file>", "the service identity's public keys (authority.public-keys.v1 JSON)")
    .option("--require-sealed", "fail when any record is after its stream's newest checkpoint")
    .option(
      "--sealed-through <time|record>",
      "fail unless every record up to this ISO 8601 time is sealed and a checkpoint is at or after it; or unless this record (id or receipt) is sealed",
    )
    .action(async (exportFile: string, options: VerifyFlags, cmd: Command) => {
      const sealed = sealRequirement(options);
      if (typeof sealed === "string") cmd.error(`authority audit verify: ${sealed}`);
      let keys: PublicKeyRing;
      try {
        keys = await publicKeys(options.keys);
      } catch (error) {
        const why = isCryptoError(error)
          ? error.code
          : error instanceof SyntaxError
            ? "not JSON"
            : "unreadable";
        cmd.error(`authority audit verify: the keys file cannot be used (${why})`);
      }
      let text: string;
      try {
        text = await readFile(exportFile, "utf8");
      } catch {
        cmd.error(`authority audit verify: the export ${exportFile} cannot be read`);
      }
      const result = await verifyChainExport(text, keys, sealed === undefined ? {} : { sealed });
      process.stdout.write(`${summary(result)}\n`);
      if (!result.ok) process.exitCode = 1;
    });
}
