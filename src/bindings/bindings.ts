/**
 * Binding lifecycle: create, read, list and update partner connections. Routes check
 * who may call; these functions check what is being asked and keep the store consistent.
 */
import type { AdminDeps } from "../admin/deps.ts";
import { getPartner } from "../admin/partners.ts";
import { type PageOf, type PageRequest, pageUnder } from "../admin/store-scan.ts";
import { isValidId } from "../core/ids.ts";
import { AuthorityError } from "../errors.ts";
import { EGRESS_ALLOW_SETTING, egressAllowHint, ruleText } from "../execute/egress.ts";
import { defaultAlgorithms, supportedAlgorithms } from "../identity/jwt-verifier.ts";
import {
  type BindingIndexRecord,
  type BindingRecord,
  bindingCollections,
  bindingKeys,
  type InlineJwks,
} from "../store/binding-model.ts";
import { type AuthProfileRecord, collections, storeKeys } from "../store/model.ts";
import { randomId } from "./derive.ts";

export interface CreateBindingInput {
  /** Generated (`bnd_…`) when absent. */
  readonly binding_id?: string;
  readonly issuer: string;
  /** Exactly one of jwks_url and jwks. */
  readonly jwks_url?: string;
  readonly jwks?: InlineJwks;
  readonly audience: string;
  /** Default `tenant`. */
  readonly tenant_claim?: string;
  readonly tenant_value: string;
  readonly algorithms?: readonly string[];
  /** Default "1". */
  readonly mapping_version?: string;
  /** Default true. */
  readonly active?: boolean;
  readonly auth_profile_ref?: string | null;
}

export interface UpdateBindingInput {
  readonly jwks_url?: string;
  readonly jwks?: InlineJwks;
  readonly audience?: string;
  readonly tenant_claim?: string;
  readonly tenant_value?: string;
  readonly algorithms?: readonly string[];
  readonly mapping_version?: string;
  readonly active?: boolean;
}

const MAPPING_VERSION = /^[A-Za-z0-9._:-]{1,64}$/;
const CLAIM_NAME = /^[A-Za-z0-9_.:-]{1,64}$/;

function invalid(message: string, field: string): AuthorityError {
  return new AuthorityError("invalid_request", message, { details: { field } });
}

function isLoopback(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** https anywhere; plain http only on loopback (development and tests). */
function checkUrl(value: string, field: string): void {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw invalid(`${field} must be an absolute URL.`, field);
  }
  if (url.username !== "" || url.password !== "" || url.hash !== "") {
    throw invalid(`${field} must not carry credentials or a fragment.`, field);
  }
  if (url.protocol === "https:") return;
  if (url.protocol === "http:" && isLoopback(url.hostname)) return;
  throw invalid(`${field} must use https (http only on loopback).`, field);
}

function checkJwks(jwks: InlineJwks): InlineJwks {
  const keys = jwks.keys;
  if (!Array.isArray(keys) || keys.length === 0 || keys.length > 32) {
    throw invalid("jwks must hold 1-32 keys.", "jwks");
  }
  const publicOnly = keys.map((key) => {
    if (typeof key !== "object" || key === null || typeof key.kty !== "string") {
      throw invalid("jwks keys must be JSON Web Keys.", "jwks");
    }
    // Private or symmetric key material has no place in a verifier's key set.
    if ("d" in key || "k" in key || key.kty === "oct") {
      throw invalid("jwks must hold public asymmetric keys only.", "jwks");
    }
    return { ...key };
  });
  return { keys: publicOnly };
}

function checkAlgorithms(algorithms: readonly string[]): string[] {
  const allowed = supportedAlgorithms as readonly string[];
  if (algorithms.length === 0 || algorithms.some((alg) => !allowed.includes(alg))) {
    throw invalid(`algorithms must be a non-empty subset of ${allowed.join(", ")}.`, "algorithms");
  }
  return [...new Set(algorithms)];
}

function checkKeys(input: { jwks_url?: string | undefined; jwks?: InlineJwks | undefined }): {
  jwks_url: string | null;
  jwks: InlineJwks | null;
} {
  if ((input.jwks_url === undefined) === (input.jwks === undefined)) {
    throw invalid("Give exactly one of jwks_url and jwks.", "jwks_url");
  }
  if (input.jwks_url !== undefined) {
    checkUrl(input.jwks_url, "jwks_url");
    return { jwks_url: input.jwks_url, jwks: null };
  }
  return { jwks_url: null, jwks: checkJwks(input.jwks as InlineJwks) };
}

/**
 * A JWKS URL is the partner's choice of where the authority connects: refused when saved if
 * the egress gate refuses it now (names resolved), and checked again on every connection.
 * The refusal names the rule, never the addresses a name resolved to.
 */
async function checkJwksDestination(deps: Pick<AdminDeps, "egress">, jwksUrl: string | null): Promise<void> {
  if (jwksUrl === null) return;
  const verdict = await deps.egress.checkUrl(jwksUrl, { resolve: true });
  if (verdict.ok) return;
  const what = verdict.resolved ? "its host name resolves to" : "it is";
  const hint = egressAllowHint(verdict.rule);
  throw new AuthorityError(
    "invalid_request",
    `jwks_url is refused by the platform's egress policy: ${what} ${ruleText(verdict.rule)}${hint === undefined ? "" : `; ${hint}`}.`,
    {
      details: {
        field: "jwks_url",
        reason: "egress_denied",
        rule: verdict.rule,
        ...(hint === undefined ? {} : { setting: EGRESS_ALLOW_SETTING }),
      },
    },
  );
}

function checkText(value: string, field: string, max = 1024): string {
  if (value.length === 0 || value.length > max) throw invalid(`${field} must be 1-${max} characters.`, field);
  return value;
}

function checkMappingVersion(value: string): string {
  if (!MAPPING_VERSION.test(value))
    throw invalid("mapping_version must be 1-64 characters of [A-Za-z0-9._:-].", "mapping_version");
  return value;
}

function checkClaim(value: string): string {
  if (!CLAIM_NAME.test(value)) throw invalid("tenant_claim must be a plain claim name.", "tenant_claim");
  return value;
}

/** The partner auth profile must exist before a binding may name it. */
export async function assertAuthProfileExists(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  profileId: string,
): Promise<void> {
  const found = await deps.store.get<AuthProfileRecord>(
    collections.authProfiles,
    storeKeys.authProfile(partnerId, profileId),
  );
  if (found === undefined) {
    throw new AuthorityError("invalid_request", "The auth profile does not exist in this partner.", {
      details: { auth_profile_ref: profileId },
    });
  }
}

export async function createBinding(
  deps: AdminDeps,
  partnerId: string,
  input: CreateBindingInput,
): Promise<BindingRecord> {
  await getPartner(deps, partnerId);
  const bindingId = input.binding_id ?? randomId("bnd");
  if (!isValidId("local", bindingId)) {
    throw invalid("binding_id must be 1-128 characters of [A-Za-z0-9._-].", "binding_id");
  }
  checkUrl(input.issuer, "issuer");
  const keys = checkKeys(input);
  await checkJwksDestination(deps, keys.jwks_url);
  const authProfileRef = input.auth_profile_ref ?? null;
  if (authProfileRef !== null) await assertAuthProfileExists(deps, partnerId, authProfileRef);
  const now = deps.now().toISOString();
  const record: BindingRecord = {
    binding_id: bindingId,
    partner_id: partnerId,
    issuer: input.issuer,
    ...keys,
    audience: checkText(input.audience, "audience"),
    tenant_claim: checkClaim(input.tenant_claim ?? "tenant"),
    tenant_value: checkText(input.tenant_value, "tenant_value"),
    algorithms: checkAlgorithms(input.algorithms ?? defaultAlgorithms),
    mapping_version: checkMappingVersion(input.mapping_version ?? "1"),
    active: input.active ?? true,
    auth_profile_ref: authProfileRef,
    created_at: now,
    updated_at: now,
  };
  // Binding ids are global (routes name them alone): the create is the uniqueness check.
  if (!(await deps.store.create(bindingCollections.bindings, bindingKeys.binding(bindingId), record))) {
    throw new AuthorityError("conflict", "A binding with this id already exists.", {
      details: { binding_id: bindingId },
    });
  }
  const index: BindingIndexRecord = { partner_id: partnerId, binding_id: bindingId };
  await deps.store.put(
    bindingCollections.partnerBindings,
    bindingKeys.partnerBinding(partnerId, bindingId),
    index,
  );
  return record;
}

/** The binding, or `not_found`. */
export async function getBinding(deps: Pick<AdminDeps, "store">, bindingId: string): Promise<BindingRecord> {
  const record = isValidId("local", bindingId)
    ? await deps.store.get<BindingRecord>(bindingCollections.bindings, bindingKeys.binding(bindingId))
    : undefined;
  if (record === undefined) throw new AuthorityError("not_found", "No such binding.");
  return record;
}

export async function listBindings(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  request: PageRequest,
): Promise<PageOf<BindingRecord>> {
  await getPartner(deps, partnerId);
  const page = await pageUnder<BindingIndexRecord>(
    deps.store,
    bindingCollections.partnerBindings,
    `${partnerId}/`,
    request,
  );
  const items: BindingRecord[] = [];
  for (const item of page.items) {
    const binding = await deps.store.get<BindingRecord>(bindingCollections.bindings, item.value.binding_id);
    if (binding !== undefined && binding.partner_id === partnerId) items.push(binding);
  }
  return page.next === undefined ? { items } : { items, next: page.next };
}

/**
 * Changes a binding's settings. The issuer cannot change (every mapping is derived from
 * it); a new mapping_version invalidates every policy compiled under the old one.
 */
export async function updateBinding(
  deps: AdminDeps,
  binding: BindingRecord,
  input: UpdateBindingInput,
): Promise<BindingRecord> {
  const keys =
    input.jwks_url !== undefined || input.jwks !== undefined
      ? checkKeys(input)
      : { jwks_url: binding.jwks_url, jwks: binding.jwks };
  if (input.jwks_url !== undefined) await checkJwksDestination(deps, keys.jwks_url);
  const record: BindingRecord = {
    ...binding,
    ...keys,
    ...(input.audience === undefined ? {} : { audience: checkText(input.audience, "audience") }),
    ...(input.tenant_claim === undefined ? {} : { tenant_claim: checkClaim(input.tenant_claim) }),
    ...(input.tenant_value === undefined
      ? {}
      : { tenant_value: checkText(input.tenant_value, "tenant_value") }),
    ...(input.algorithms === undefined ? {} : { algorithms: checkAlgorithms(input.algorithms) }),
    ...(input.mapping_version === undefined
      ? {}
      : { mapping_version: checkMappingVersion(input.mapping_version) }),
    ...(input.active === undefined ? {} : { active: input.active }),
    updated_at: deps.now().toISOString(),
  };
  await deps.store.put(bindingCollections.bindings, bindingKeys.binding(binding.binding_id), record);
  return record;
}

/** Sets (or clears with null) the partner auth profile new assignments of the binding use. */
export async function setBindingAuthProfile(
  deps: AdminDeps,
  binding: BindingRecord,
  profileId: string | null,
): Promise<BindingRecord> {
  if (profileId !== null) await assertAuthProfileExists(deps, binding.partner_id, profileId);
  const record: BindingRecord = {
    ...binding,
    auth_profile_ref: profileId,
    updated_at: deps.now().toISOString(),
  };
  await deps.store.put(bindingCollections.bindings, bindingKeys.binding(binding.binding_id), record);
  return record;
}
