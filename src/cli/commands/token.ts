import type { Command } from "commander";
import { tokenSchema } from "../../config/token.ts";
import { requestToken, TokenRequestError } from "../../identity/token-client.ts";
import { addSettingOptions, loadCommandConfig } from "../settings-options.ts";

/**
 * `authority token`: trades client credentials or a service account's username and
 * password for an access token and prints it, for `curl -H "Authorization: Bearer $(…)"`.
 * Settings: src/config/token.ts.
 */
export function register(program: Command): void {
  const command = program
    .command("token")
    .description("Get an access token from an OAuth 2.0 token endpoint and print it");
  addSettingOptions(command, tokenSchema).action(async (_options: unknown, cmd: Command) => {
    const config = await loadCommandConfig(tokenSchema, cmd);
    try {
      const token = await requestToken(config.request);
      process.stdout.write(
        config.json
          ? `${JSON.stringify({ access_token: token.accessToken, token_type: token.tokenType, expires_in: token.expiresIn, scope: token.scope })}\n`
          : `${token.accessToken}\n`,
      );
    } catch (error) {
      if (error instanceof TokenRequestError) cmd.error(`authority token: ${error.message}`);
      throw error;
    }
  });
}
