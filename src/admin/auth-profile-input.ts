import { compileSchema, type SchemaCheck } from "../core/schema-validator.ts";
import { AuthorityError } from "../errors.ts";
import type { AuthProfileInput } from "./auth-profiles.ts";

const text = (max: number) => ({ type: "string", minLength: 1, maxLength: max }) as const;
const secret = text(16384);

const apiKeyShape = {
  type: "object",
  additionalProperties: false,
  required: ["type", "kind", "in", "name"],
  properties: {
    type: { const: "static" },
    kind: { const: "api_key" },
    in: { enum: ["header", "query"] },
    name: text(256),
    secret,
  },
} as const;

const bearerShape = {
  type: "object",
  additionalProperties: false,
  required: ["type", "kind"],
  properties: { type: { const: "static" }, kind: { const: "bearer" }, secret },
} as const;

const clientCredentialsShape = {
  type: "object",
  additionalProperties: false,
  required: ["type", "token_url", "client_id"],
  properties: {
    type: { const: "oauth_client_credentials" },
    token_url: text(2048),
    client_id: text(2048),
    client_secret: secret,
    scopes: { type: "array", maxItems: 100, items: text(256) },
    audience: { anyOf: [text(2048), { type: "null" }] },
    client_auth: { enum: ["client_secret_basic", "client_secret_post"] },
  },
} as const;

const nullableUrl = { anyOf: [text(2048), { type: "null" }] } as const;
// Absent: keep the stored secret (same type) or a public client; null: make it a public client.
const optionalSecret = { anyOf: [secret, { type: "null" }] } as const;

const oauthUserShape = {
  type: "object",
  additionalProperties: false,
  required: ["type", "authorization_url", "token_url", "client_id", "redirect_uri"],
  properties: {
    type: { const: "oauth_user" },
    authorization_url: text(2048),
    token_url: text(2048),
    revocation_url: nullableUrl,
    client_id: text(2048),
    client_secret: optionalSecret,
    scopes: { type: "array", maxItems: 100, items: text(256) },
    audience: nullableUrl,
    client_auth: { enum: ["client_secret_basic", "client_secret_post"] },
    redirect_uri: text(2048),
  },
} as const;

const tokenExchangeShape = {
  type: "object",
  additionalProperties: false,
  required: ["type", "token_url", "client_id"],
  properties: {
    type: { const: "oauth_token_exchange" },
    token_url: text(2048),
    client_id: text(2048),
    client_secret: optionalSecret,
    scopes: { type: "array", maxItems: 100, items: text(256) },
    audience: nullableUrl,
    resource: nullableUrl,
    client_auth: { enum: ["client_secret_basic", "client_secret_post"] },
    subject_token_type: { enum: ["access_token", "jwt", "id_token"] },
  },
} as const;

const shapes: Readonly<Record<string, SchemaCheck<AuthProfileInput>>> = {
  "static/api_key": compileSchema(apiKeyShape),
  "static/bearer": compileSchema(bearerShape),
  oauth_client_credentials: compileSchema(clientCredentialsShape),
  oauth_user: compileSchema(oauthUserShape),
  oauth_token_exchange: compileSchema(tokenExchangeShape),
};

/** The kinds of profile this API stores. */
export const authProfileTypes = [
  "static",
  "oauth_client_credentials",
  "oauth_user",
  "oauth_token_exchange",
] as const;

/**
 * Checks a PUT body against the shape its `type` (and `kind`) selects, so every problem
 * is reported against the right fields. Messages name fields, never values.
 */
export function parseAuthProfileInput(body: unknown): AuthProfileInput {
  const record =
    typeof body === "object" && body !== null && !Array.isArray(body)
      ? (body as Record<string, unknown>)
      : {};
  const type = record.type;
  const key = type === "static" ? `static/${String(record.kind)}` : String(type);
  // Own keys only: a type such as "__proto__" or "constructor" names no shape.
  const check = Object.hasOwn(shapes, key) ? shapes[key] : undefined;
  if (check === undefined) {
    const problem =
      type === "static"
        ? "/kind must be api_key or bearer"
        : `/type must be one of: ${authProfileTypes.join(", ")}`;
    throw new AuthorityError("invalid_request", "The auth profile is invalid.", {
      details: { problems: [problem] },
    });
  }
  const result = check(body);
  if (!result.ok) {
    throw new AuthorityError("invalid_request", "The auth profile is invalid.", {
      details: { problems: result.messages },
    });
  }
  return result.value;
}
