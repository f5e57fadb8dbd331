/**
 * The `trusted-issuers` setting: a list of issuers whose bearer tokens a server accepts, each
 * with its JWKS, audiences, token use and claim mapping (docs/configuration.md). In a config
 * file it is a list; in a flag or environment variable, the same list as JSON. The single
 * issuer settings (`issuer`, `jwks-url`, `audience`) keep working: they name the primary
 * issuer, first of the list.
 */

import { ConfigError } from "../core/config-error.ts";
import { isRecord } from "../core/own-property.ts";
import { type ClaimMapping, defaultClaimMapping, type TrustedIssuer } from "../identity/trusted-issuers.ts";
import type { SettingReader } from "./schema.ts";
import {
  type bearerTokenSettings,
  DEFAULT_ISSUER,
  httpUrl,
  type RawValue,
  type SettingSpec,
} from "./settings.ts";

const ENTRY_KEYS = [
  "issuer",
  "jwks-url",
  "audience",
  "token-use",
  "token-types",
  "vouched-subjects",
  "claims",
];
const CLAIM_KEYS: Readonly<Record<string, keyof ClaimMapping>> = {
  subject: "subject",
  roles: "roles",
  "partner-id": "partnerId",
  scopes: "scopes",
};
const CLAIM_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;
const MAX_ISSUERS = 32;

/** A parsed entry; `vouchedSubjects` is undecided until its place in the list is known. */
export type TrustedIssuerEntry = Omit<TrustedIssuer, "vouchedSubjects"> & {
  readonly vouchedSubjects: boolean | undefined;
};

function strings(value: unknown, where: string): string[] {
  const items = typeof value === "string" ? [value] : value;
  if (!Array.isArray(items) || items.length === 0)
    throw new ConfigError(`${where} must be a string or a non-empty list`);
  return items.map((item) => {
    if (typeof item !== "string" || item.trim().length === 0 || item.length > 4096) {
      throw new ConfigError(`${where} must hold non-empty strings`);
    }
    return item.trim();
  });
}

function claimMapping(value: unknown, where: string): ClaimMapping {
  if (value === undefined) return defaultClaimMapping;
  if (!isRecord(value)) throw new ConfigError(`${where} must be a mapping`);
  const mapping: Record<string, string> = { ...defaultClaimMapping };
  for (const [key, claim] of Object.entries(value)) {
    const field = CLAIM_KEYS[key];
    if (field === undefined) {
      throw new ConfigError(
        `${where} has unknown key ${JSON.stringify(key)} (known: ${Object.keys(CLAIM_KEYS).join(", ")})`,
      );
    }
    if (typeof claim !== "string" || !CLAIM_NAME.test(claim)) {
      throw new ConfigError(`${where}.${key} must be a claim name`);
    }
    mapping[field] = claim;
  }
  return mapping as unknown as ClaimMapping;
}

function entry(value: unknown, where: string): TrustedIssuerEntry {
  if (!isRecord(value)) throw new ConfigError(`${where} must be a mapping with an issuer`);
  const unknown = Object.keys(value).filter((key) => !ENTRY_KEYS.includes(key));
  if (unknown.length > 0) {
    throw new ConfigError(
      `${where} has unknown key ${JSON.stringify(unknown[0])} (known: ${ENTRY_KEYS.join(", ")})`,
    );
  }
  if (typeof value.issuer !== "string") throw new ConfigError(`${where}.issuer is required`);
  const issuer = httpUrl(value.issuer, `${where}.issuer`);
  const jwks = value["jwks-url"];
  if (jwks !== undefined && typeof jwks !== "string")
    throw new ConfigError(`${where}.jwks-url must be a URL`);
  const tokenUse = value["token-use"];
  if (tokenUse !== undefined && tokenUse !== false && (typeof tokenUse !== "string" || tokenUse === "")) {
    throw new ConfigError(`${where}.token-use must be a claim value or false`);
  }
  const vouched = value["vouched-subjects"];
  if (vouched !== undefined && typeof vouched !== "boolean") {
    throw new ConfigError(`${where}.vouched-subjects must be true or false`);
  }
  const types = value["token-types"];
  return {
    issuer,
    jwksUrl: jwks === undefined ? `${issuer}/.well-known/jwks.json` : httpUrl(jwks, `${where}.jwks-url`),
    audience: value.audience === undefined ? ["authority"] : strings(value.audience, `${where}.audience`),
    claims: claimMapping(value.claims, `${where}.claims`),
    tokenUse: tokenUse === undefined ? "access" : (tokenUse as string | false),
    ...(types === undefined ? {} : { tokenTypes: strings(types, `${where}.token-types`) }),
    vouchedSubjects: vouched,
  };
}

/** Parses the list (a file's list, or JSON text from a flag or the environment). */
export function parseTrustedIssuers(value: unknown, where: string): TrustedIssuerEntry[] {
  let list = value;
  if (typeof value === "string") {
    try {
      list = JSON.parse(value);
    } catch {
      throw new ConfigError(`${where} must be a JSON list of issuers`);
    }
  }
  if (!Array.isArray(list) || list.length === 0)
    throw new ConfigError(`${where} must be a non-empty list of issuers`);
  if (list.length > MAX_ISSUERS) throw new ConfigError(`${where} lists more than ${MAX_ISSUERS} issuers`);
  const entries = list.map((item, index) => entry(item, `${where}[${index}]`));
  const seen = new Set<string>();
  for (const { issuer } of entries) {
    if (seen.has(issuer)) throw new ConfigError(`${where} lists ${issuer} twice`);
    seen.add(issuer);
  }
  return entries;
}

export const trustedIssuersSetting: SettingSpec<TrustedIssuerEntry[]> = {
  key: "trusted-issuers",
  env: "AUTHORITY_TRUSTED_ISSUERS",
  type: "list of issuers (JSON)",
  description:
    "issuers whose tokens are accepted, each with jwks-url, audience, token-use, claims (a list in the config file; JSON in a flag or the environment)",
  parse: (raw: RawValue, where: string) => parseTrustedIssuers(raw, where),
  parseStructured: parseTrustedIssuers,
};

/**
 * The issuers a server trusts: the single-issuer settings name the primary (first) one; the
 * `trusted-issuers` list adds the others. With only the list, its first entry is the primary.
 * Only the primary admits `platform_vouched` subjects unless an entry says otherwise.
 */
export function resolveTrustedIssuers(input: {
  readonly primary:
    | { readonly issuer: string; readonly jwksUrl: string; readonly audience: string }
    | undefined;
  readonly list: readonly TrustedIssuerEntry[] | undefined;
}): TrustedIssuer[] {
  const list = input.list ?? [];
  const primary = input.primary;
  const listed = primary === undefined ? undefined : list.find((e) => e.issuer === primary.issuer);
  const first: TrustedIssuerEntry[] =
    primary === undefined
      ? []
      : [
          listed ?? {
            issuer: primary.issuer,
            jwksUrl: primary.jwksUrl,
            audience: [primary.audience],
            claims: defaultClaimMapping,
            tokenUse: "access",
            vouchedSubjects: undefined,
          },
        ];
  const others = list.filter((e) => e !== listed);
  const all = [...first, ...others];
  if (all.length === 0) throw new ConfigError("no trusted issuer is configured");
  return all.map((e, index) => ({ ...e, vouchedSubjects: e.vouchedSubjects ?? index === 0 }));
}

/**
 * The trusted issuers of a process (authority and sidecar alike): the single-issuer settings
 * (issuer, jwks-url, audience, with the development defaults) name the primary one, beside the
 * `trusted-issuers` list.
 */
export function configuredIssuers(
  issuer: string | undefined,
  jwksUrl: string | undefined,
  audience: string | undefined,
  list: Parameters<typeof resolveTrustedIssuers>[0]["list"],
): TrustedIssuer[] {
  const single =
    issuer !== undefined || jwksUrl !== undefined || audience !== undefined || list === undefined;
  const primaryIssuer = issuer ?? DEFAULT_ISSUER;
  return resolveTrustedIssuers({
    primary: single
      ? {
          issuer: primaryIssuer,
          jwksUrl: jwksUrl ?? `${primaryIssuer}/.well-known/jwks.json`,
          audience: audience ?? "authority",
        }
      : undefined,
    list,
  });
}

/** What a process's configuration carries of its issuers: the primary's fields, and all of them. */
export interface IssuerConfig {
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: string;
  readonly trustedIssuers: readonly TrustedIssuer[];
}

/** The issuer settings of a process that verifies tokens (authority and sidecar), read and resolved. */
export function issuerConfig(
  read: SettingReader<typeof bearerTokenSettings & { trustedIssuers: typeof trustedIssuersSetting }>,
): IssuerConfig {
  const trustedIssuers = configuredIssuers(
    read.optional("issuer"),
    read.optional("jwksUrl"),
    read.optional("audience"),
    read.optional("trustedIssuers"),
  );
  const primary = trustedIssuers[0] as TrustedIssuer;
  return {
    issuer: primary.issuer,
    jwksUrl: primary.jwksUrl,
    audience: primary.audience[0] ?? "authority",
    trustedIssuers,
  };
}
