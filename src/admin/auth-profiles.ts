import { isValidId } from "../core/ids.ts";
import { AuthorityError } from "../errors.ts";
import {
  type AuthProfile,
  AuthProfileError,
  NO_AUTH_PROFILE_ID,
  noAuthProfile,
  parseAuthProfile,
  type SecretResolver,
} from "../execute/auth-profiles.ts";
import { MIN_SECRET_LENGTH, SecretTooShortError, secretForms } from "../execute/secret-scrub.ts";
import {
  type AssignmentRecord,
  type AuthProfileRecord,
  authProfileSecretOwner,
  type CapabilityRecord,
  type CatalogVersionRecord,
  collections,
  storeKeys,
} from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { openSecret, sealSecret } from "./secret-seal.ts";
import { type PageOf, type PageRequest, pageUnder, scan, scanAll } from "./store-scan.ts";

/** Request bodies of PUT …/auth-profiles/{profile}. Secrets are write-only. */
export type AuthProfileInput =
  | {
      readonly type: "static";
      readonly kind: "api_key";
      readonly in: "header" | "query";
      readonly name: string;
      readonly secret?: string;
    }
  | { readonly type: "static"; readonly kind: "bearer"; readonly secret?: string }
  | {
      readonly type: "oauth_client_credentials";
      readonly token_url: string;
      readonly client_id: string;
      readonly client_secret?: string;
      readonly scopes?: readonly string[];
      readonly audience?: string | null;
      readonly client_auth?: "client_secret_basic" | "client_secret_post";
    }
  | {
      readonly type: "oauth_user";
      readonly authorization_url: string;
      readonly token_url: string;
      readonly revocation_url?: string | null;
      readonly client_id: string;
      /** Absent: keep the stored one (same type) or a public client; null: a public client. */
      readonly client_secret?: string | null;
      readonly scopes?: readonly string[];
      readonly audience?: string | null;
      readonly client_auth?: "client_secret_basic" | "client_secret_post";
      readonly redirect_uri: string;
    }
  | {
      readonly type: "oauth_token_exchange";
      readonly token_url: string;
      readonly client_id: string;
      readonly client_secret?: string | null;
      readonly scopes?: readonly string[];
      readonly audience?: string | null;
      readonly resource?: string | null;
      readonly client_auth?: "client_secret_basic" | "client_secret_post";
      readonly subject_token_type?: "access_token" | "jwt" | "id_token";
    };

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** What callers see: every setting, never the secret, not even a fingerprint of it. */
export type AuthProfileView = DistributiveOmit<AuthProfileRecord, "sealed_secret"> & {
  readonly secret_present: boolean;
};

export function toAuthProfileView(record: AuthProfileRecord): AuthProfileView {
  const { sealed_secret, ...visible } = record;
  return { ...visible, secret_present: sealed_secret.length > 0 };
}

/** The execution layer's name for a stored secret: `auth-profile:<partner>/<profile>`. */
export const AUTH_PROFILE_SECRET_SCHEME = "auth-profile:";

export const authProfileSecretRef = (partnerId: string, profileId: string): string =>
  `${AUTH_PROFILE_SECRET_SCHEME}${partnerId}/${profileId}`;

/** The execution layer's form of a stored profile (src/execute AuthProfile); secrets stay references. */
export function toExecutionAuthProfile(record: AuthProfileRecord): AuthProfile {
  const secretRef = authProfileSecretRef(record.partner_id, record.profile_id);
  switch (record.type) {
    case "static":
      return record.kind === "bearer"
        ? { type: "static", id: record.profile_id, kind: "bearer", secretRef }
        : {
            type: "static",
            id: record.profile_id,
            kind: "api_key",
            in: record.in,
            name: record.name,
            secretRef,
          };
    case "oauth_client_credentials":
      return {
        type: "oauth_client_credentials",
        id: record.profile_id,
        tokenUrl: record.token_url,
        clientId: record.client_id,
        clientSecretRef: secretRef,
        scopes: record.scopes,
        clientAuth: record.client_auth,
        ...(record.audience === null ? {} : { audience: record.audience }),
      };
    case "oauth_user":
      return {
        type: "oauth_user",
        id: record.profile_id,
        authorizationUrl: record.authorization_url,
        tokenUrl: record.token_url,
        clientId: record.client_id,
        scopes: record.scopes,
        clientAuth: record.client_auth,
        ...(record.sealed_secret.length === 0 ? {} : { clientSecretRef: secretRef }),
        ...(record.audience === null ? {} : { audience: record.audience }),
        ...(record.revocation_url === null ? {} : { revocationUrl: record.revocation_url }),
      };
    case "oauth_token_exchange":
      return {
        type: "oauth_token_exchange",
        id: record.profile_id,
        tokenUrl: record.token_url,
        clientId: record.client_id,
        scopes: record.scopes,
        clientAuth: record.client_auth,
        subjectTokenType: record.subject_token_type,
        ...(record.sealed_secret.length === 0 ? {} : { clientSecretRef: secretRef }),
        ...(record.audience === null ? {} : { audience: record.audience }),
        ...(record.resource === null ? {} : { resource: record.resource }),
      };
  }
}

// The execution layer's field names, spelled as this API spells them.
const apiField: Readonly<Record<string, string>> = {
  authorizationUrl: "authorization_url",
  revocationUrl: "revocation_url",
  subjectTokenType: "subject_token_type",
  tokenUrl: "token_url",
  clientId: "client_id",
  clientAuth: "client_auth",
  clientSecretRef: "client_secret",
  secretRef: "secret",
  id: "profile_id",
};

// Visible ASCII: a secret with CR/LF or controls could split headers when injected.
const SECRET_TEXT = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;
const MAX_SECRET_LENGTH = 16384;

/** The secret given: a string, null (remove it: a public client) or undefined (not given). */
function secretOf(input: AuthProfileInput): string | null | undefined {
  return input.type === "static" ? input.secret : input.client_secret;
}

/** OAuth clients that may be public (PKCE, token exchange): no secret is needed. */
const mayBePublic = (input: AuthProfileInput): boolean =>
  input.type === "oauth_user" || input.type === "oauth_token_exchange";

/** Same type (and kind): an update may keep the stored secret. */
function sameShape(record: AuthProfileRecord, input: AuthProfileInput): boolean {
  if (record.type !== input.type) return false;
  return record.type !== "static" || input.type !== "static" || record.kind === input.kind;
}

function recordOf(
  partnerId: string,
  profileId: string,
  input: AuthProfileInput,
  sealed: string,
  times: { created_at: string; updated_at: string; secret_updated_at: string },
): AuthProfileRecord {
  const base = { partner_id: partnerId, profile_id: profileId, sealed_secret: sealed, ...times };
  switch (input.type) {
    case "static":
      return input.kind === "bearer"
        ? { ...base, type: "static", kind: "bearer" }
        : { ...base, type: "static", kind: "api_key", in: input.in, name: input.name };
    case "oauth_client_credentials":
      return {
        ...base,
        type: "oauth_client_credentials",
        token_url: input.token_url,
        client_id: input.client_id,
        scopes: [...(input.scopes ?? [])],
        audience: input.audience ?? null,
        client_auth: input.client_auth ?? "client_secret_basic",
      };
    case "oauth_user":
      return {
        ...base,
        type: "oauth_user",
        authorization_url: input.authorization_url,
        token_url: input.token_url,
        revocation_url: input.revocation_url ?? null,
        client_id: input.client_id,
        scopes: [...(input.scopes ?? [])],
        audience: input.audience ?? null,
        client_auth: input.client_auth ?? "client_secret_basic",
        redirect_uri: input.redirect_uri,
      };
    case "oauth_token_exchange":
      return {
        ...base,
        type: "oauth_token_exchange",
        token_url: input.token_url,
        client_id: input.client_id,
        scopes: [...(input.scopes ?? [])],
        audience: input.audience ?? null,
        resource: input.resource ?? null,
        client_auth: input.client_auth ?? "client_secret_basic",
        subject_token_type: input.subject_token_type ?? "access_token",
      };
  }
}

/**
 * Where the provider sends the user back: an absolute https URL (http only on loopback) without
 * credentials or fragment, fixed in the profile — no request may choose another (open redirect).
 */
function checkRedirectUri(value: string): void {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  const loopback = url !== undefined && /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/.test(url.hostname);
  if (
    url === undefined ||
    url.username !== "" ||
    url.password !== "" ||
    url.hash !== "" ||
    value.includes("#") ||
    !(url.protocol === "https:" || (url.protocol === "http:" && loopback))
  ) {
    throw new AuthorityError(
      "invalid_request",
      "The auth profile is invalid: redirect_uri must be an absolute https URL (http only on loopback) without credentials or fragment.",
      { details: { field: "redirect_uri" } },
    );
  }
}

/** Checks the profile with the execution layer's own rules, so a stored profile is always usable. */
function validate(record: AuthProfileRecord): void {
  try {
    parseAuthProfile(toExecutionAuthProfile(record));
  } catch (error) {
    if (error instanceof AuthProfileError) {
      const field = apiField[error.field] ?? error.field;
      const problem = error.message.replace(/^auth profile \S+: /, "");
      throw new AuthorityError("invalid_request", `The auth profile is invalid: ${field} ${problem}.`, {
        details: { field, problem },
      });
    }
    throw error;
  }
}

export interface PutAuthProfileOutcome {
  readonly profile: AuthProfileView;
  readonly created: boolean;
}

/**
 * Creates or replaces a profile. The secret is sealed before it is stored; an update
 * without a secret keeps the stored one when the type (and kind) stay the same.
 */
export async function putAuthProfile(
  deps: AdminDeps,
  partnerId: string,
  profileId: string,
  input: AuthProfileInput,
): Promise<PutAuthProfileOutcome> {
  await getPartner(deps, partnerId);
  if (!isValidId("local", profileId)) {
    throw new AuthorityError("invalid_request", "The profile id must be 1-128 characters of [A-Za-z0-9._-].");
  }
  if (profileId === NO_AUTH_PROFILE_ID) {
    throw new AuthorityError(
      "invalid_request",
      `The profile id "${NO_AUTH_PROFILE_ID}" is reserved: it means no upstream credential.`,
    );
  }
  const key = storeKeys.authProfile(partnerId, profileId);
  const existing = await deps.store.get<AuthProfileRecord>(collections.authProfiles, key);
  const given = secretOf(input);
  const secret = given ?? undefined;
  const secretField = input.type === "static" ? "secret" : "client_secret";
  if (secret !== undefined && (secret.length > MAX_SECRET_LENGTH || !SECRET_TEXT.test(secret))) {
    throw new AuthorityError(
      "invalid_request",
      `${secretField} must be 1-${MAX_SECRET_LENGTH} visible ASCII characters (inner spaces allowed).`,
      { details: { field: secretField } },
    );
  }
  const keep = given === undefined && existing !== undefined && sameShape(existing, input);
  if (secret === undefined && !keep && !mayBePublic(input)) {
    throw new AuthorityError(
      "invalid_request",
      `${secretField} is required for a new profile or a new type.`,
      {
        details: { field: secretField },
      },
    );
  }
  const now = deps.now().toISOString();
  const times = {
    created_at: existing?.created_at ?? now,
    updated_at: now,
    secret_updated_at: keep && existing !== undefined ? existing.secret_updated_at : now,
  };
  // Validate before sealing, so a bad profile never touches the key ring.
  if (input.type === "oauth_user") checkRedirectUri(input.redirect_uri);
  validate(recordOf(partnerId, profileId, input, "", times));
  if (secret !== undefined) {
    try {
      // A secret too short to scrub from responses would be refused at every call: refused now.
      secretForms(secret);
    } catch (error) {
      if (!(error instanceof SecretTooShortError)) throw error;
      throw new AuthorityError(
        "invalid_request",
        `${secretField} must have at least ${MIN_SECRET_LENGTH} characters (after an auth scheme, and for Basic its password too): shorter ones cannot be scrubbed from upstream answers.`,
        { details: { field: secretField } },
      );
    }
  }
  const sealed =
    secret === undefined
      ? keep
        ? (existing?.sealed_secret ?? "")
        : ""
      : await sealSecret(
          deps.secretKeyRings,
          authProfileSecretOwner(partnerId),
          { partnerId, profileId },
          secret,
        );
  const record = recordOf(partnerId, profileId, input, sealed, times);
  await deps.store.put(collections.authProfiles, key, record);
  // Users' grants belong to the provider and client that issued them: another one voids them.
  if (existing?.type === "oauth_user" && !sameProvider(existing, record))
    await deleteUserGrantsOf(deps, partnerId, profileId);
  return { profile: toAuthProfileView(record), created: existing === undefined };
}

function sameProvider(before: AuthProfileRecord, after: AuthProfileRecord): boolean {
  return (
    before.type === "oauth_user" &&
    after.type === "oauth_user" &&
    before.token_url === after.token_url &&
    before.authorization_url === after.authorization_url &&
    before.client_id === after.client_id
  );
}

/** Deletes every user's grant (sealed token set) of a profile. */
async function deleteUserGrantsOf(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  profileId: string,
): Promise<void> {
  const grants = await scanAll(deps.store, collections.userTokenSets, `${partnerId}/${profileId}/`);
  for (const grant of grants) await deps.store.delete(collections.userTokenSets, grant.id);
}

export async function loadAuthProfileRecord(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  profileId: string,
): Promise<AuthProfileRecord> {
  const record = await deps.store.get<AuthProfileRecord>(
    collections.authProfiles,
    storeKeys.authProfile(partnerId, profileId),
  );
  if (record === undefined) throw new AuthorityError("not_found", "No such auth profile.");
  return record;
}

export async function getAuthProfile(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  profileId: string,
): Promise<AuthProfileView> {
  await getPartner(deps, partnerId);
  return toAuthProfileView(await loadAuthProfileRecord(deps, partnerId, profileId));
}

export async function listAuthProfiles(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  request: PageRequest,
): Promise<PageOf<AuthProfileView>> {
  await getPartner(deps, partnerId);
  const page = await pageUnder<AuthProfileRecord>(
    deps.store,
    collections.authProfiles,
    `${partnerId}/`,
    request,
  );
  const items = page.items.map((item) => toAuthProfileView(item.value));
  return page.next === undefined ? { items } : { items, next: page.next };
}

/** Where a profile is still named: capability defaults, current catalog operations, assignments. */
export interface AuthProfileReferences {
  readonly capabilities: readonly string[];
  readonly assignments: ReadonlyArray<{ readonly subject_id: string; readonly capability_id: string }>;
}

export async function authProfileReferences(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  profileId: string,
): Promise<AuthProfileReferences> {
  const prefix = `${partnerId}/`;
  const capabilities: string[] = [];
  for await (const item of scan<CapabilityRecord>(deps.store, collections.capabilities, prefix)) {
    const capability = item.value;
    let named = capability.auth_profile_ref === profileId;
    if (!named) {
      const version = await deps.store.get<CatalogVersionRecord>(
        collections.catalogVersions,
        storeKeys.catalogVersion(partnerId, capability.capability_id, capability.current_version),
      );
      named = version?.operations.some((op) => op.auth_profile_ref === profileId) ?? false;
    }
    if (named) capabilities.push(capability.capability_id);
  }
  const assignments: Array<{ subject_id: string; capability_id: string }> = [];
  for await (const item of scan<AssignmentRecord>(deps.store, collections.assignments, prefix)) {
    const a = item.value;
    if (a.auth_profile_ref === profileId || a.operations.some((op) => op.auth_profile_ref === profileId)) {
      assignments.push({ subject_id: a.subject_id, capability_id: a.capability_id });
    }
  }
  return { capabilities, assignments };
}

/** Refused (409, details list the references) while a capability or an assignment names it. */
export async function deleteAuthProfile(
  deps: AdminDeps,
  partnerId: string,
  profileId: string,
): Promise<void> {
  await getPartner(deps, partnerId);
  await loadAuthProfileRecord(deps, partnerId, profileId);
  const references = await authProfileReferences(deps, partnerId, profileId);
  if (references.capabilities.length > 0 || references.assignments.length > 0) {
    throw new AuthorityError("conflict", "The auth profile is still referenced.", {
      details: {
        capabilities: references.capabilities.slice(0, 100),
        assignments: references.assignments.slice(0, 100),
      },
    });
  }
  await deps.store.delete(collections.authProfiles, storeKeys.authProfile(partnerId, profileId));
  // Users' grants of the profile go with it (sealed token sets nobody could use any more).
  await deleteUserGrantsOf(deps, partnerId, profileId);
}

/** The execution layer's view of one stored profile. */
export async function loadExecutionAuthProfile(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  profileId: string,
): Promise<AuthProfile> {
  // Authorization only: nothing is stored, nothing is injected.
  if (profileId === NO_AUTH_PROFILE_ID) return noAuthProfile;
  return toExecutionAuthProfile(await loadAuthProfileRecord(deps, partnerId, profileId));
}

/**
 * The plaintext secret of a profile, for the execution layer only (after input
 * validation and constraint checks passed). Never log or return it.
 */
export async function resolveAuthProfileSecret(
  deps: Pick<AdminDeps, "store" | "secretKeyRings">,
  partnerId: string,
  profileId: string,
): Promise<string> {
  const record = await loadAuthProfileRecord(deps, partnerId, profileId);
  if (record.sealed_secret.length === 0)
    throw new AuthorityError("not_found", "The auth profile has no secret.");
  return openSecret(
    deps.secretKeyRings,
    authProfileSecretOwner(partnerId),
    { partnerId, profileId },
    record.sealed_secret,
  );
}

/** A SecretResolver (src/execute) for the refs toExecutionAuthProfile writes. */
export function createAuthProfileSecretResolver(
  deps: Pick<AdminDeps, "store" | "secretKeyRings">,
): SecretResolver {
  return async (ref) => {
    if (!ref.startsWith(AUTH_PROFILE_SECRET_SCHEME)) throw new Error("unknown secret reference scheme");
    const rest = ref.slice(AUTH_PROFILE_SECRET_SCHEME.length);
    const slash = rest.indexOf("/");
    if (slash <= 0 || slash !== rest.lastIndexOf("/"))
      throw new Error("malformed auth profile secret reference");
    return resolveAuthProfileSecret(deps, rest.slice(0, slash), rest.slice(slash + 1));
  };
}
