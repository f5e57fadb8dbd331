/**
 * The configuration of `authority token`: which token endpoint, which grant, what to ask for.
 * Secrets may come from the environment so they stay out of shell history and `ps`.
 */

import { ConfigError } from "../core/config-error.ts";
import type { TokenRequest } from "../identity/token-client.ts";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import { boolean, httpUrl, setting, text } from "./settings.ts";

export interface TokenCommandConfig {
  readonly request: TokenRequest;
  /** Print the whole token response as JSON, not only the access token. */
  readonly json: boolean;
}

export const tokenSettings = {
  tokenUrl: setting({
    key: "token-url",
    env: "AUTHORITY_IDP_TOKEN_URL",
    description: "token endpoint",
    default: "http://127.0.0.1:8083/oauth2/token",
    parse: httpUrl,
  }),
  clientId: setting({
    key: "client-id",
    env: "AUTHORITY_CLIENT_ID",
    description: "client id (client_credentials grant; optional client authentication on the password grant)",
    parse: text(),
  }),
  clientSecret: setting({
    key: "client-secret",
    env: "AUTHORITY_CLIENT_SECRET",
    description: "client secret (prefer the environment: a flag shows in `ps`)",
    secret: true,
    parse: text({ secret: true }),
  }),
  username: setting({
    key: "username",
    env: "AUTHORITY_USERNAME",
    description: "service-account username (password grant)",
    parse: text(),
  }),
  password: setting({
    key: "password",
    env: "AUTHORITY_PASSWORD",
    description: "service-account password (prefer the environment: a flag shows in `ps`)",
    secret: true,
    parse: text({ secret: true }),
  }),
  scope: setting({
    key: "scope",
    description: "space-separated scopes to request",
    parse: text(),
  }),
  audience: setting({
    key: "audience",
    description: "audience to request",
    parse: text(),
  }),
  json: setting({
    key: "json",
    description: "print the whole token response as JSON",
    default: false,
    parse: boolean,
  }),
} as const;

export const tokenSchema = defineProcess({
  command: "token",
  title: "Access token (`authority token`)",
  settings: tokenSettings,
  build(read): TokenCommandConfig {
    const clientId = read.optional("clientId");
    const clientSecret = read.optional("clientSecret");
    const username = read.optional("username");
    const password = read.optional("password");
    const scope = read.optional("scope");
    const audience = read.optional("audience");
    const common = {
      tokenUrl: read.value("tokenUrl"),
      ...(scope === undefined ? {} : { scope }),
      ...(audience === undefined ? {} : { audience }),
    };
    const json = read.value("json");
    if ((clientId === undefined) !== (clientSecret === undefined)) {
      throw new ConfigError("--client-id and --client-secret go together");
    }
    if (username !== undefined || password !== undefined) {
      if (username === undefined || password === undefined) {
        throw new ConfigError("--username and --password go together");
      }
      const client = clientId === undefined || clientSecret === undefined ? {} : { clientId, clientSecret };
      return { json, request: { ...common, grant: { type: "password", username, password, ...client } } };
    }
    if (clientId === undefined || clientSecret === undefined) {
      throw new ConfigError("give --client-id and --client-secret, or --username and --password");
    }
    return { json, request: { ...common, grant: { type: "client_credentials", clientId, clientSecret } } };
  },
});

export function resolveTokenConfig(inputs: ProcessInputs): TokenCommandConfig {
  return resolveProcessConfig(tokenSchema, inputs);
}
