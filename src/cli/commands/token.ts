import { type Command, Option } from "commander";
import { requestToken, type TokenRequest, TokenRequestError } from "../../identity/token-client.ts";

/**
 * `authority token`: trades client credentials or a service account's username and
 * password for an access token and prints it, for `curl -H "Authorization: Bearer $(…)"`.
 * Secrets may come from the environment so they stay out of shell history and `ps`.
 */

export interface TokenCommandFlags {
  readonly tokenUrl: string;
  readonly clientId?: string;
  readonly clientSecret?: string;
  readonly username?: string;
  readonly password?: string;
  readonly scope?: string;
  readonly audience?: string;
  readonly json?: boolean;
}

export class TokenCommandError extends Error {
  readonly code = "token_command_invalid";

  constructor(message: string) {
    super(message);
    this.name = "TokenCommandError";
  }
}

export function resolveTokenCommand(flags: TokenCommandFlags): TokenRequest {
  const { tokenUrl, clientId, clientSecret, username, password, scope, audience } = flags;
  const common = {
    tokenUrl,
    ...(scope === undefined ? {} : { scope }),
    ...(audience === undefined ? {} : { audience }),
  };
  if ((clientId === undefined) !== (clientSecret === undefined)) {
    throw new TokenCommandError("--client-id and --client-secret go together");
  }
  if (username !== undefined || password !== undefined) {
    if (username === undefined || password === undefined) {
      throw new TokenCommandError("--username and --password go together");
    }
    return {
      ...common,
      grant: {
        type: "password",
        username,
        password,
        ...(clientId === undefined || clientSecret === undefined ? {} : { clientId, clientSecret }),
      },
    };
  }
  if (clientId === undefined || clientSecret === undefined) {
    throw new TokenCommandError("give --client-id and --client-secret, or --username and --password");
  }
  return { ...common, grant: { type: "client_credentials", clientId, clientSecret } };
}

export function register(program: Command): void {
  program
    .command("token")
    .description("Get an access token from an OAuth 2.0 token endpoint and print it")
    .addOption(
      new Option("--token-url <url>", "token endpoint")
        .env("AUTHORITY_IDP_TOKEN_URL")
        .default("http://127.0.0.1:8083/oauth2/token"),
    )
    .addOption(new Option("--client-id <id>", "client id (client_credentials)").env("AUTHORITY_CLIENT_ID"))
    .addOption(new Option("--client-secret <secret>", "client secret").env("AUTHORITY_CLIENT_SECRET"))
    .addOption(
      new Option("--username <name>", "service-account username (password grant)").env("AUTHORITY_USERNAME"),
    )
    .addOption(new Option("--password <password>", "service-account password").env("AUTHORITY_PASSWORD"))
    .option("--scope <scopes>", "space-separated scopes to request")
    .option("--audience <aud>", "audience to request")
    .option("--json", "print the whole token response as JSON")
    .action(async (flags: TokenCommandFlags, command: Command) => {
      let request: TokenRequest;
      try {
        request = resolveTokenCommand(flags);
      } catch (error) {
        if (error instanceof TokenCommandError) command.error(`authority token: ${error.message}`);
        throw error;
      }
      try {
        const token = await requestToken(request);
        process.stdout.write(
          flags.json === true
            ? `${JSON.stringify({ access_token: token.accessToken, token_type: token.tokenType, expires_in: token.expiresIn, scope: token.scope })}\n`
            : `${token.accessToken}\n`,
        );
      } catch (error) {
        if (error instanceof TokenRequestError) command.error(`authority token: ${error.message}`);
        throw error;
      }
    });
}
