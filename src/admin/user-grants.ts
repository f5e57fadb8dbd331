/**
 * A user's delegated grant for an `oauth_user` auth profile (docs/admin-api.md, "User
 * grants"): start (the authorization URL; the PKCE verifier and the state stay here, sealed,
 * bound to the partner, profile, subject and the principal who started it, expiring, used
 * once), complete on the callback, status (never a token), refresh, disconnect (revoked at the
 * provider where it has an endpoint). Every action is audited.
 */
import { createHash, randomBytes } from "node:crypto";
import { AuthorityError } from "../errors.ts";
import type { OAuthUserProfile } from "../execute/auth-profiles.ts";
import { ExecutionError } from "../execute/errors.ts";
import type { OAuthUserClient, Revocation, TokenSetInfo, UserGrantEvent } from "../execute/oauth-user.ts";
import type { TokenExchangeTokens } from "../execute/token-exchange.ts";
import { userGrantKey } from "../execute/token-set-store.ts";
import {
  type AuthProfileRecord,
  authProfileSecretOwner,
  collections,
  logs,
  type UserAuthorizationRecord,
  type UserGrantAuditRecord,
} from "../store/model.ts";
import { loadAuthProfileRecord, toExecutionAuthProfile } from "./auth-profiles.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { openWithAad, sealWithAad } from "./secret-seal.ts";
import { getSubject } from "./subjects.ts";

/** How long a started grant waits for its callback. */
export const USER_AUTHORIZATION_TTL_MS = 10 * 60 * 1000;

/** The process's user-OAuth client and exchanged-token cache (the executors' own). */
export interface UserGrantServices {
  readonly oauthUser: OAuthUserClient;
  readonly tokenExchange: TokenExchangeTokens;
}

export type UserGrantDeps = Pick<AdminDeps, "store" | "now" | "secretKeyRings" | "logger">;

/** What the API shows of a grant: never a token. */
export interface UserGrantView {
  readonly partner_id: string;
  readonly profile_id: string;
  readonly subject_id: string;
  readonly connected: boolean;
  readonly expires_at: string | null;
  readonly scope: string | null;
  readonly has_refresh_token: boolean;
}

export interface StartedUserGrant {
  readonly authorization_url: string;
  readonly state: string;
  readonly expires_at: string;
}

export interface CompleteUserGrantInput {
  readonly state: string;
  /** The `code` of the callback; absent when the provider answered with `error`. */
  readonly code?: string;
  /** The callback's `error` (the user refused, …): the started grant is closed. */
  readonly error?: string;
}

interface GrantTarget {
  readonly partnerId: string;
  readonly profileId: string;
  readonly subjectId: string;
}

const STATE = /^[A-Za-z0-9_-]{43}$/;
const stateKey = (state: string): string => createHash("sha256").update(state).digest("hex");
const verifierAad = (hash: string): string => `authority/oauth-user-verifier/v1\n${hash}`;

function viewOf(target: GrantTarget, info: TokenSetInfo | undefined): UserGrantView {
  return {
    partner_id: target.partnerId,
    profile_id: target.profileId,
    subject_id: target.subjectId,
    connected: info !== undefined,
    expires_at: info?.expiresAt === undefined ? null : new Date(info.expiresAt).toISOString(),
    scope: info?.scope ?? null,
    has_refresh_token: info?.hasRefreshToken ?? false,
  };
}

async function audit(
  deps: UserGrantDeps,
  target: GrantTarget,
  action: UserGrantAuditRecord["action"],
  actor: Actor | undefined,
  outcome: string | null,
): Promise<void> {
  const record: UserGrantAuditRecord = {
    kind: "user_grant",
    action,
    actor: actor?.subject ?? "system",
    partner_id: target.partnerId,
    profile_id: target.profileId,
    subject_id: target.subjectId,
    outcome,
    time: deps.now().toISOString(),
    requestId: actor?.requestId ?? null,
  };
  await deps.store.append(logs.audit, record);
}

/** The failure's issue and the provider's error code, for the audit record (never a value). */
function outcomeOf(error: unknown): string {
  if (error instanceof AuthorityError) {
    const issue = error.details?.issue;
    const oauthError = error.details?.oauth_error;
    return [error.code, issue, oauthError].filter((part) => typeof part === "string").join(":");
  }
  return "internal";
}

/** The partner, the subject (its own) and the profile, which must be of `type`. */
async function resolveTarget(
  deps: UserGrantDeps,
  target: GrantTarget,
  types: ReadonlyArray<AuthProfileRecord["type"]> = ["oauth_user"],
): Promise<AuthProfileRecord> {
  await getPartner(deps, target.partnerId);
  await getSubject(deps, target.partnerId, target.subjectId);
  const record = await loadAuthProfileRecord(deps, target.partnerId, target.profileId);
  if (!types.includes(record.type)) {
    throw new AuthorityError("conflict", `This action needs an auth profile of type ${types.join(" or ")}.`, {
      details: { type: record.type },
    });
  }
  return record;
}

function userProfileOf(record: AuthProfileRecord): OAuthUserProfile {
  const profile = toExecutionAuthProfile(record);
  if (profile.type !== "oauth_user") throw new AuthorityError("conflict", "Not a user OAuth profile.");
  return profile;
}

const keyOf = (target: GrantTarget): string =>
  userGrantKey(target.partnerId, target.profileId, target.subjectId);

/** Starts a grant: the authorization URL to send the user to. */
export async function startUserGrant(
  deps: UserGrantDeps,
  services: UserGrantServices,
  actor: Actor,
  target: GrantTarget,
): Promise<StartedUserGrant> {
  const record = await resolveTarget(deps, target);
  if (record.type !== "oauth_user") throw new AuthorityError("conflict", "Not a user OAuth profile.");
  const state = randomBytes(32).toString("base64url");
  const hash = stateKey(state);
  const started = services.oauthUser.startAuthorization({
    profile: userProfileOf(record),
    redirectUri: record.redirect_uri,
    state,
  });
  const expiresAt = new Date(deps.now().getTime() + USER_AUTHORIZATION_TTL_MS).toISOString();
  const pending: UserAuthorizationRecord = {
    partner_id: target.partnerId,
    profile_id: target.profileId,
    subject_id: target.subjectId,
    actor: actor.subject,
    redirect_uri: record.redirect_uri,
    sealed_verifier: await sealWithAad(
      deps.secretKeyRings,
      authProfileSecretOwner(target.partnerId),
      verifierAad(hash),
      started.codeVerifier,
    ),
    expires_at: expiresAt,
  };
  await deps.store.put(collections.userAuthorizations, hash, pending, { ttlMs: USER_AUTHORIZATION_TTL_MS });
  await audit(deps, target, "start", actor, null);
  return { authorization_url: started.authorizationUrl, state, expires_at: expiresAt };
}

const stateInvalid = (issue: string) =>
  new AuthorityError("oauth_state_invalid", undefined, { details: { issue } });

/**
 * Takes the started grant for `state` out of the store (once: a second taker finds nothing)
 * and checks it belongs to this partner, profile, subject and principal and has not expired.
 */
async function takeAuthorization(
  deps: UserGrantDeps,
  actor: Actor,
  target: GrantTarget,
  state: string,
): Promise<{ readonly pending: UserAuthorizationRecord; readonly hash: string }> {
  if (typeof state !== "string" || !STATE.test(state)) throw stateInvalid("state_malformed");
  const hash = stateKey(state);
  const pending = await deps.store.get<UserAuthorizationRecord>(collections.userAuthorizations, hash);
  if (pending === undefined) throw stateInvalid("state_unknown");
  // Used once, whoever presents it: a replay, or a second concurrent completion, finds nothing.
  if (!(await deps.store.delete(collections.userAuthorizations, hash))) throw stateInvalid("state_unknown");
  if (Date.parse(pending.expires_at) <= deps.now().getTime()) throw stateInvalid("state_expired");
  if (
    pending.partner_id !== target.partnerId ||
    pending.profile_id !== target.profileId ||
    pending.subject_id !== target.subjectId
  ) {
    throw stateInvalid("state_for_another_grant");
  }
  if (pending.actor !== actor.subject) throw stateInvalid("state_for_another_principal");
  return { pending, hash };
}

/** What the provider's refusal of a code means to the caller: their code, not an outage. */
function codeRefusal(error: unknown): unknown {
  if (error instanceof ExecutionError && error.details?.issue === "token_endpoint_refused") {
    return new AuthorityError("invalid_request", "The provider refused the authorization code.", {
      details: { oauth_error: error.details.oauth_error ?? "unspecified" },
    });
  }
  return error;
}

/** Completes a started grant with the callback's code: the user's token set is stored, sealed. */
export async function completeUserGrant(
  deps: UserGrantDeps,
  services: UserGrantServices,
  actor: Actor,
  target: GrantTarget,
  input: CompleteUserGrantInput,
): Promise<UserGrantView> {
  const record = await resolveTarget(deps, target);
  try {
    const { pending, hash } = await takeAuthorization(deps, actor, target, input.state);
    if (input.error !== undefined) {
      throw new AuthorityError("invalid_request", "The provider answered the authorization with an error.", {
        details: { oauth_error: /^[a-z_]{1,64}$/.test(input.error) ? input.error : "unspecified" },
      });
    }
    if (input.code === undefined) throw new AuthorityError("invalid_request", "code is required.");
    const codeVerifier = await openWithAad(
      deps.secretKeyRings,
      authProfileSecretOwner(target.partnerId),
      verifierAad(hash),
      pending.sealed_verifier,
    );
    const info = await services.oauthUser
      .exchangeCode({
        profile: userProfileOf(record),
        code: input.code,
        codeVerifier,
        // The URI the code was issued for; a request never names one.
        redirectUri: pending.redirect_uri,
        tokenSetKey: keyOf(target),
      })
      .catch((error: unknown) => {
        throw codeRefusal(error);
      });
    await audit(deps, target, "complete", actor, null);
    return viewOf(target, info);
  } catch (error) {
    await audit(deps, target, "complete_failed", actor, outcomeOf(error));
    throw error;
  }
}

export async function getUserGrant(
  deps: UserGrantDeps,
  services: UserGrantServices,
  target: GrantTarget,
): Promise<UserGrantView> {
  await resolveTarget(deps, target);
  return viewOf(target, await services.oauthUser.status(keyOf(target)));
}

/** Refreshes now (a failure is audited by the client's event, see auditUserGrantEvent). */
export async function refreshUserGrant(
  deps: UserGrantDeps,
  services: UserGrantServices,
  actor: Actor,
  target: GrantTarget,
): Promise<UserGrantView> {
  const record = await resolveTarget(deps, target);
  const info = await services.oauthUser.refresh({
    profile: userProfileOf(record),
    tokenSetKey: keyOf(target),
  });
  await audit(deps, target, "refresh", actor, null);
  return viewOf(target, info);
}

export interface DisconnectedUserGrant {
  readonly grant: UserGrantView;
  /** At the provider: revoked, failed (forgotten here all the same), not_supported, no_grant. */
  readonly revocation: Revocation;
  /** Exchanged tokens of this user dropped from this process's cache (token exchange). */
  readonly dropped_tokens: number;
}

/**
 * Forgets the user's grant here at once and revokes it at the provider where the profile has
 * a revocation endpoint; for a token-exchange profile, drops the user's exchanged tokens.
 */
export async function disconnectUserGrant(
  deps: UserGrantDeps,
  services: UserGrantServices,
  actor: Actor,
  target: GrantTarget,
): Promise<DisconnectedUserGrant> {
  const record = await resolveTarget(deps, target, ["oauth_user", "oauth_token_exchange"]);
  const key = keyOf(target);
  const dropped = services.tokenExchange.drop(key);
  const revocation: Revocation =
    record.type === "oauth_user"
      ? await services.oauthUser.disconnect({ profile: userProfileOf(record), tokenSetKey: key })
      : "not_supported";
  await audit(deps, target, "disconnect", actor, `revocation:${revocation}`);
  return { grant: viewOf(target, undefined), revocation, dropped_tokens: dropped };
}

/** The runtime's refresh failures (OAuthUserClient onEvent), in the audit log. */
export function auditUserGrantEvent(deps: UserGrantDeps, event: UserGrantEvent): void {
  const [partnerId, profileId, subjectId] = event.tokenSetKey.split("/");
  if (partnerId === undefined || profileId === undefined || subjectId === undefined) return;
  const outcome = [event.issue, event.oauthError].filter((part) => part !== undefined).join(":");
  void audit(deps, { partnerId, profileId, subjectId }, event.action, undefined, outcome).catch(
    (error: unknown) => {
      deps.logger?.error({ err: error }, "user grant event could not be audited");
    },
  );
}
