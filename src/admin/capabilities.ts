import { buildCatalogVersion, type CatalogDiff } from "../catalog/catalog-version.ts";
import type { DocumentFormat } from "../catalog/document-source.ts";
import { ImportOptionsError, OpenApiImportError } from "../catalog/errors.ts";
import { type ImportResult, importOperations, parseOpenApiDocument } from "../catalog/openapi-import.ts";
import { type Capability, catalogPermissionIds } from "../core/capability.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import { buildPermissionId, type PermissionId } from "../core/permission-id.ts";
import { AuthorityError, toAuthorityError } from "../errors.ts";
import { NO_AUTH_PROFILE_ID } from "../execute/auth-profiles.ts";
import { EGRESS_ALLOW_SETTING, type EgressPolicy, egressAllowHint, ruleText } from "../execute/egress.ts";
import {
  type AuthProfileRecord,
  type CapabilityRecord,
  type CatalogVersionRecord,
  collections,
  storeKeys,
} from "../store/model.ts";
import type { Store } from "../store/store.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { type PageOf, type PageRequest, pageUnder, scanAll } from "./store-scan.ts";

/** An OpenAPI 3.0/3.1 document: a JSON object, or JSON/YAML text with an optional format. */
export interface OpenApiSource {
  readonly document: unknown;
  readonly format?: DocumentFormat;
}

export interface OperationSummary {
  readonly permission_id: PermissionId;
  readonly operation_id: string;
  readonly method: string;
  readonly path: string;
  readonly summary?: string;
  readonly auth_profile_ref: string;
  readonly upstream_url_template: string;
}

export interface PreviewInput extends OpenApiSource {
  /** Used to spell the permission ids; default "preview". */
  readonly capability_id?: string;
  readonly upstream_base_url?: string;
  /** Default "default". */
  readonly auth_profile_ref?: string;
}

export interface PreviewResult {
  readonly openapi: string;
  readonly title: string;
  readonly api_version: string;
  readonly operation_count: number;
  readonly operations: OperationSummary[];
  readonly warnings: readonly string[];
}

interface Imported {
  readonly parsed: { readonly openapi: string; readonly title: string; readonly apiVersion: string };
  readonly result: ImportResult;
}

/** Where the reviewed templates send requests: each distinct origin once. */
function upstreamOrigins(operations: readonly OperationSnapshot[]): string[] {
  const origins = new Set<string>();
  for (const op of operations) {
    // Placeholders are only in the path (the importer guarantees it): the origin is fixed.
    const template = op.upstream_url_template.replace(/\{[^{}]*\}/g, "p");
    if (URL.canParse(template)) origins.add(new URL(template).origin);
  }
  return [...origins];
}

/**
 * The egress policy at import: every upstream origin — literal addresses, and names resolved
 * now — must be an allowed destination. The refusal names the origin as written and the rule,
 * never the addresses a name resolved to. Calls are checked again on the address connected to.
 */
export async function checkUpstreams(
  operations: readonly OperationSnapshot[],
  egress: EgressPolicy,
): Promise<string[]> {
  const problems: { pointer: string; message: string }[] = [];
  const warnings: string[] = [];
  let setting: string | undefined;
  for (const origin of upstreamOrigins(operations)) {
    const verdict = await egress.checkUrl(origin, { resolve: true });
    if (!verdict.ok) {
      const what = verdict.resolved ? "its host name resolves to" : "it is";
      const hint = egressAllowHint(verdict.rule);
      if (hint !== undefined) setting = EGRESS_ALLOW_SETTING;
      problems.push({
        pointer: "",
        message: `upstream ${origin} is refused by the platform's egress policy: ${what} ${ruleText(verdict.rule)}${hint === undefined ? "" : `; ${hint}`}`,
      });
    } else if (verdict.unresolved === true) {
      warnings.push(
        `upstream ${origin} does not resolve from the authority service now; every call is checked`,
      );
    }
  }
  if (problems.length > 0) {
    throw new AuthorityError(
      "invalid_request",
      "An upstream server is not allowed by the platform's egress policy.",
      {
        details: { reason: "egress_denied", problems, ...(setting === undefined ? {} : { setting }) },
      },
    );
  }
  return warnings;
}

/** Parse + import, with the catalog module's failures turned into 400s that list every problem. */
async function runImport(
  source: OpenApiSource,
  options: {
    capabilityId: string;
    upstreamBaseUrl: string | undefined;
    authProfileRef: string;
    egress: EgressPolicy;
  },
): Promise<Imported> {
  try {
    const document = source.document;
    if (typeof document !== "string" && (typeof document !== "object" || document === null)) {
      throw new AuthorityError(
        "invalid_request",
        "document must be an OpenAPI object or its JSON/YAML text.",
      );
    }
    const parsed = await parseOpenApiDocument(
      document,
      source.format === undefined ? {} : { format: source.format },
    );
    const result = importOperations(parsed, {
      capabilityId: options.capabilityId,
      authProfileRef: options.authProfileRef,
      ...(options.upstreamBaseUrl === undefined ? {} : { upstreamBaseUrl: options.upstreamBaseUrl }),
    });
    const egressWarnings = await checkUpstreams(result.operations, options.egress);
    return {
      parsed,
      result:
        egressWarnings.length === 0
          ? result
          : { ...result, warnings: [...result.warnings, ...egressWarnings] },
    };
  } catch (error) {
    if (error instanceof OpenApiImportError) throw toAuthorityError(error);
    if (error instanceof ImportOptionsError) {
      // Messages name the option and the rule, never document content.
      throw new AuthorityError("invalid_request", "The import options are invalid.", {
        details: { problems: [{ pointer: "", message: error.message }] },
      });
    }
    throw error;
  }
}

export function summarize(
  capabilityId: string,
  operations: readonly OperationSnapshot[],
): OperationSummary[] {
  return operations.map((op) => ({
    permission_id: buildPermissionId(capabilityId, op.method, op.path),
    operation_id: op.operation_id,
    method: op.method,
    path: op.path,
    ...(op.summary === undefined ? {} : { summary: op.summary }),
    auth_profile_ref: op.auth_profile_ref,
    upstream_url_template: op.upstream_url_template,
  }));
}

/** What an import would produce; writes nothing. */
export async function previewOpenApi(input: PreviewInput, egress: EgressPolicy): Promise<PreviewResult> {
  const capabilityId = input.capability_id ?? "preview";
  const { parsed, result } = await runImport(input, {
    capabilityId,
    upstreamBaseUrl: input.upstream_base_url,
    authProfileRef: input.auth_profile_ref ?? "default",
    egress,
  });
  return {
    openapi: parsed.openapi,
    title: parsed.title,
    api_version: parsed.apiVersion,
    operation_count: result.operations.length,
    operations: summarize(capabilityId, result.operations),
    warnings: result.warnings,
  };
}

export interface ImportInput extends OpenApiSource {
  readonly capability_id: string;
  readonly name: string;
  readonly upstream_base_url?: string;
  readonly auth_profile_ref: string;
}

export interface ImportOutcome {
  readonly capability: CapabilityRecord;
  readonly catalog_version: string;
  readonly previous_version: string | null;
  /** False when the document produced exactly the current catalog: nothing new was stored. */
  readonly is_new_version: boolean;
  readonly created: boolean;
  readonly catalog_hash: string;
  readonly diff: CatalogDiff;
  readonly operation_count: number;
  readonly operations: OperationSummary[];
  readonly warnings: readonly string[];
}

/** Auth profile refs the operations name that the partner has not defined (yet). */
async function missingProfileWarnings(
  store: Store,
  partnerId: string,
  refs: Iterable<string>,
): Promise<string[]> {
  const warnings: string[] = [];
  for (const ref of new Set(refs)) {
    if (ref === NO_AUTH_PROFILE_ID) continue;
    const profile = await store.get<AuthProfileRecord>(
      collections.authProfiles,
      storeKeys.authProfile(partnerId, ref),
    );
    if (profile === undefined)
      warnings.push(`auth profile ${JSON.stringify(ref)} is not defined for this partner yet`);
  }
  return warnings;
}

/**
 * Imports a document as the capability's next catalog version. Stored versions are never
 * rewritten, and policies keep the snapshots they copied: a re-import changes nothing
 * already assigned.
 */
export async function importOpenApi(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  input: ImportInput,
): Promise<ImportOutcome> {
  await getPartner(deps, partnerId);
  const { parsed, result } = await runImport(input, {
    capabilityId: input.capability_id,
    upstreamBaseUrl: input.upstream_base_url,
    authProfileRef: input.auth_profile_ref,
    egress: deps.egress,
  });
  return storeCatalogImport(deps, actor, partnerId, {
    capability_id: input.capability_id,
    name: input.name,
    auth_profile_ref: input.auth_profile_ref,
    upstream_base_url: input.upstream_base_url ?? null,
    source: { openapi: parsed.openapi, title: parsed.title, api_version: parsed.apiVersion },
    operations: result.operations,
    warnings: result.warnings,
  });
}

/** The current catalog version of a capability, or undefined when it has none yet. */
export async function currentCatalogVersion(
  store: Store,
  partnerId: string,
  capabilityId: string,
): Promise<{ capability?: CapabilityRecord; version?: CatalogVersionRecord }> {
  const capability = await store.get<CapabilityRecord>(
    collections.capabilities,
    storeKeys.capability(partnerId, capabilityId),
  );
  if (capability === undefined) return {};
  const version = await store.get<CatalogVersionRecord>(
    collections.catalogVersions,
    storeKeys.catalogVersion(partnerId, capabilityId, capability.current_version),
  );
  return version === undefined ? { capability } : { capability, version };
}

export interface CatalogImport {
  readonly capability_id: string;
  readonly name: string;
  readonly auth_profile_ref: string;
  readonly upstream_base_url: string | null;
  readonly source: CatalogVersionRecord["source"];
  readonly operations: readonly OperationSnapshot[];
  readonly warnings: readonly string[];
}

/**
 * Stores imported snapshots as the capability's next catalog version (or keeps the current
 * one when nothing changed) and moves the capability to it. Stored versions are never
 * rewritten, and policies keep the snapshots they copied: nothing already assigned changes.
 */
export async function storeCatalogImport(
  deps: AdminDeps,
  actor: Actor,
  partnerId: string,
  input: CatalogImport,
): Promise<ImportOutcome> {
  const store = deps.store;
  const { capability: existing, version: previous } = await currentCatalogVersion(
    store,
    partnerId,
    input.capability_id,
  );
  const version = buildCatalogVersion(previous, {
    capability_id: input.capability_id,
    operations: input.operations,
  });
  const now = deps.now().toISOString();
  if (version.is_new_version) {
    const record: CatalogVersionRecord = {
      partner_id: partnerId,
      capability_id: input.capability_id,
      catalog_version: version.catalog_version,
      previous_version: version.previous_version,
      catalog_hash: version.catalog_hash,
      source: input.source,
      operations: input.operations,
      imported_by: actor.subject,
      imported_at: now,
    };
    const key = storeKeys.catalogVersion(partnerId, input.capability_id, version.catalog_version);
    if (!(await store.create(collections.catalogVersions, key, record))) {
      throw new AuthorityError("conflict", "Another import of this capability finished first; retry.", {
        details: { capability_id: input.capability_id, catalog_version: version.catalog_version },
      });
    }
  }
  const capability: CapabilityRecord = {
    partner_id: partnerId,
    capability_id: input.capability_id,
    name: input.name,
    current_version: version.catalog_version,
    auth_profile_ref: input.auth_profile_ref,
    upstream_base_url: input.upstream_base_url,
    created_at: existing?.created_at ?? now,
    updated_at: now,
  };
  await store.put(collections.capabilities, storeKeys.capability(partnerId, input.capability_id), capability);
  const warnings = [
    ...input.warnings,
    ...(await missingProfileWarnings(store, partnerId, [
      input.auth_profile_ref,
      ...input.operations.map((op) => op.auth_profile_ref),
    ])),
  ];
  return {
    capability,
    catalog_version: version.catalog_version,
    previous_version: version.previous_version,
    is_new_version: version.is_new_version,
    created: existing === undefined,
    catalog_hash: version.catalog_hash,
    diff: version.diff,
    operation_count: input.operations.length,
    operations: summarize(input.capability_id, input.operations),
    warnings,
  };
}

export interface LoadedCatalog {
  readonly capability: CapabilityRecord;
  readonly version: CatalogVersionRecord;
  /** The core form the decision engine takes (`decide({ capability })`). */
  readonly catalog: Capability;
}

/** Refuses (400, naming them) permission ids an assignment asks for that the catalog does not have. */
export function assertPermissionsInCatalog(loaded: LoadedCatalog, permissionIds: readonly string[]): void {
  const known = new Set<string>(catalogPermissionIds(loaded.catalog));
  const unknown = permissionIds.filter((id) => !known.has(id));
  if (unknown.length > 0) {
    throw new AuthorityError(
      "invalid_request",
      "Some permission ids are not in the capability's current catalog.",
      {
        details: { unknown_permission_ids: unknown, catalog_version: loaded.version.catalog_version },
      },
    );
  }
}

/**
 * The capability with one catalog version (default: the current one), or undefined when
 * either is missing. The runtime path resolves capabilities through this too.
 */
export async function loadCatalog(
  store: Store,
  partnerId: string,
  capabilityId: string,
  catalogVersion?: string,
): Promise<LoadedCatalog | undefined> {
  const capability = await store.get<CapabilityRecord>(
    collections.capabilities,
    storeKeys.capability(partnerId, capabilityId),
  );
  if (capability === undefined) return undefined;
  const wanted = catalogVersion ?? capability.current_version;
  const version = await store.get<CatalogVersionRecord>(
    collections.catalogVersions,
    storeKeys.catalogVersion(partnerId, capabilityId, wanted),
  );
  if (version === undefined) return undefined;
  return {
    capability,
    version,
    catalog: {
      capability_id: capabilityId,
      partner_id: partnerId,
      name: capability.name,
      catalog_version: version.catalog_version,
      operations: version.operations,
    },
  };
}

export interface CapabilityView extends CapabilityRecord {
  readonly catalog_version: string;
  readonly catalog_hash: string;
  readonly source: CatalogVersionRecord["source"];
  readonly imported_at: string;
  readonly imported_by: string;
  readonly operation_count: number;
}

function viewOf(loaded: LoadedCatalog): CapabilityView {
  return {
    ...loaded.capability,
    catalog_version: loaded.version.catalog_version,
    catalog_hash: loaded.version.catalog_hash,
    source: loaded.version.source,
    imported_at: loaded.version.imported_at,
    imported_by: loaded.version.imported_by,
    operation_count: loaded.version.operations.length,
  };
}

export async function listCapabilities(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  request: PageRequest,
): Promise<PageOf<CapabilityView>> {
  await getPartner(deps, partnerId);
  const page = await pageUnder<CapabilityRecord>(
    deps.store,
    collections.capabilities,
    `${partnerId}/`,
    request,
  );
  const items: CapabilityView[] = [];
  for (const item of page.items) {
    const loaded = await loadCatalog(deps.store, partnerId, item.value.capability_id);
    if (loaded !== undefined) items.push(viewOf(loaded));
  }
  return page.next === undefined ? { items } : { items, next: page.next };
}

export interface CapabilityDetail extends CapabilityView {
  /** Every catalog version stored for this capability, oldest first. */
  readonly versions: readonly string[];
  /** The snapshots of the shown version, each with its permission id. */
  readonly operations: ReadonlyArray<OperationSnapshot & { readonly permission_id: PermissionId }>;
}

/** One capability with a catalog version (default current) and its operations. */
export async function getCapability(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
  capabilityId: string,
  catalogVersion?: string,
): Promise<CapabilityDetail> {
  await getPartner(deps, partnerId);
  const loaded = await loadCatalog(deps.store, partnerId, capabilityId, catalogVersion);
  if (loaded === undefined) {
    throw new AuthorityError(
      "not_found",
      catalogVersion === undefined ? "No such capability." : "No such capability or catalog version.",
    );
  }
  const stored = await scanAll<CatalogVersionRecord>(
    deps.store,
    collections.catalogVersions,
    `${partnerId}/${capabilityId}/`,
  );
  const versions = stored.map((item) => item.value.catalog_version).sort((a, b) => Number(a) - Number(b));
  return {
    ...viewOf(loaded),
    versions,
    operations: loaded.version.operations.map((op) => ({
      ...op,
      permission_id: buildPermissionId(capabilityId, op.method, op.path),
    })),
  };
}
