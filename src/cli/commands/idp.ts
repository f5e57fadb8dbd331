import type { Command } from "commander";
import { type IdpCommandConfig, idpSchema } from "../../config/idp.ts";
import { createLogger } from "../../observability/logger.ts";
import { IdpConfigError } from "../../servers/idp/errors.ts";
import { createIdpServer, type IdpServer } from "../../servers/idp/server.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority idp`: the development identity provider. Settings: src/config/idp.ts (flags >
 * environment > `--config` file > defaults; docs/configuration.md, docs/identity.md).
 */

async function run(config: IdpCommandConfig): Promise<IdpServer> {
  const log = createLogger("idp", config.logLevel);
  const server = await createIdpServer({ ...config.server, logger: log });
  const url = await server.listen({ host: config.host, port: config.port });
  const loaded = server.directory.size();
  if (loaded.serviceAccounts + loaded.clients === 0) {
    log.warn("no service accounts or clients loaded; pass --accounts-file");
  }
  log.info(
    {
      url,
      issuer: server.issuer,
      token_endpoint: server.tokenEndpoint,
      jwks_uri: server.jwksUri,
      service_accounts: loaded.serviceAccounts,
      clients: loaded.clients,
    },
    "identity provider listening",
  );
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "identity provider shutting down");
    // A stuck connection must not keep the process alive forever.
    setTimeout(() => process.exit(1), 10_000).unref();
    server.close().then(
      () => {
        process.exitCode = 0;
      },
      (error: unknown) => {
        log.error({ err: error }, "identity provider failed to close");
        process.exitCode = 1;
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
  return server;
}

export function register(program: Command): void {
  const command = program
    .command("idp")
    .description("Run the development identity provider (password and client-credentials grants, JWKS)");
  addSettingOptions(command, idpSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(idpSchema, cmd);
    try {
      await run(config);
    } catch (error) {
      if (error instanceof IdpConfigError) cmd.error(`authority idp: ${error.message}`);
      throw error;
    }
  });
}
