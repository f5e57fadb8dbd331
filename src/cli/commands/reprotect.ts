import { type Command, Option } from "commander";
import { reprotectPolicies } from "../../admin/reprotect.ts";
import { type AuthorityConfig, authoritySchema } from "../../config/authority.ts";
import { isCryptoError, loadKek } from "../../crypto/index.ts";
import { createLogger } from "../../observability/logger.ts";
import { createLocalPolicyProtector } from "../../policy/local-protector.ts";
import { createStoredKeyRings } from "../../policy/stored-key-rings.ts";
import { buildAuthorityService } from "../../servers/authority/build.ts";
import { isStoreError } from "../../store/index.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority reprotect`: after a key rotation in the crypto service, re-protects every stored
 * policy under the current keys (src/admin/reprotect.ts). Same settings as `authority
 * serve` (it opens and protects policies the same way); prints one JSON progress line per
 * policy; resumable — run it again after an interruption, or with --restart to start over.
 */
async function run(
  config: AuthorityConfig,
  restart: boolean,
  fromKekFile: string | undefined,
): Promise<void> {
  const log = createLogger("reprotect", config.logLevel);
  const service = await buildAuthorityService(config, { logger: log });
  try {
    // Moving an embedded store into custody: its policies open with the key rings under the
    // old KEK (read-only here), the configured mode protects them (decision 2513).
    const from =
      fromKekFile === undefined
        ? undefined
        : createLocalPolicyProtector({
            keyRings: createStoredKeyRings({
              store: service.context.store,
              kek: await loadKek({ kekFile: fromKekFile, createIfMissing: false }),
            }),
            serviceIdentity: config.serviceIdentity,
          });
    const result = await reprotectPolicies(service.context, {
      restart,
      ...(from === undefined ? {} : { from }),
      onProgress: (progress) => process.stdout.write(`${JSON.stringify(progress)}\n`),
    });
    log.info(result, result.finished ? "re-protection finished" : "re-protection stopped");
  } finally {
    await service.close();
  }
}

export function register(program: Command): void {
  const command = program
    .command("reprotect")
    .description("Re-protect every stored policy under the current keys (after a rotation); resumable")
    .addOption(new Option("--restart", "ignore the checkpoint of an interrupted run and start over"))
    .addOption(
      new Option(
        "--from-embedded-kek-file <path>",
        "move an embedded store into custody: open its policies with the key rings under this KEK, protect them in the configured mode",
      ),
    );
  addSettingOptions(command, authoritySchema).action(
    async (options: { restart?: boolean; fromEmbeddedKekFile?: string }, cmd: Command) => {
      const config = await loadCommandConfig(authoritySchema, cmd);
      try {
        await run(config, options.restart === true, options.fromEmbeddedKekFile);
      } catch (error) {
        if (isCryptoError(error) || isStoreError(error)) cmd.error(`authority reprotect: ${error.message}`);
        throw error;
      }
    },
  );
}
