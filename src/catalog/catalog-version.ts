import { compareCodePoints, hashCanonical, type Sha256Ref } from "../core/canonical-json.ts";
import type { OperationSnapshot } from "../core/operation-snapshot.ts";
import { buildPermissionId, type PermissionId } from "../core/permission-id.ts";

/**
 * Catalog versions are positive integers written as decimal strings ("1", "2", ...):
 * strictly increasing per capability, short in admin views, and independent of clocks.
 * Store keys that must sort by version should zero-pad them (see catalogVersionKey).
 */
const VERSION = /^[1-9][0-9]{0,14}$/;

export class CatalogVersionError extends Error {
  readonly code = "invalid_catalog_version";

  constructor(message: string) {
    super(message);
    this.name = "CatalogVersionError";
  }
}

export interface CatalogVersionInput {
  readonly catalog_version: string;
  readonly operations: readonly OperationSnapshot[];
}

export interface ImportedCatalog {
  readonly capability_id: string;
  readonly operations: readonly OperationSnapshot[];
}

export interface CatalogDiff {
  /** Permission IDs new in this version, sorted. */
  readonly added: readonly PermissionId[];
  /** Permission IDs gone from this version, sorted. */
  readonly removed: readonly PermissionId[];
  /** Permission IDs in both whose snapshot differs in any field, sorted. */
  readonly changed: readonly PermissionId[];
  readonly unchanged: number;
}

export interface CatalogVersionResult {
  /** The version to store; equal to the previous one when nothing changed. */
  readonly catalog_version: string;
  readonly previous_version: string | null;
  /** False when the import equals the previous version: store nothing new. */
  readonly is_new_version: boolean;
  /** hashCanonical of the operations ordered by permission ID: equal catalogs, equal hash. */
  readonly catalog_hash: Sha256Ref;
  readonly diff: CatalogDiff;
}

export function isCatalogVersion(value: unknown): value is string {
  return typeof value === "string" && VERSION.test(value);
}

/** A fixed-width form of a version for store keys ("7" → "000000000000007"), so ids sort by version. */
export function catalogVersionKey(version: string): string {
  if (!isCatalogVersion(version))
    throw new CatalogVersionError("catalog version must be a positive integer string");
  return version.padStart(15, "0");
}

function byPermissionId(
  capabilityId: string,
  operations: readonly OperationSnapshot[],
): Map<PermissionId, Sha256Ref> {
  const out = new Map<PermissionId, Sha256Ref>();
  for (const operation of operations) {
    const id = buildPermissionId(capabilityId, operation.method, operation.path);
    if (out.has(id)) throw new CatalogVersionError(`two operations share the permission ID ${id}`);
    out.set(id, hashCanonical(operation));
  }
  return out;
}

function sorted(ids: Iterable<PermissionId>): PermissionId[] {
  return [...ids].sort(compareCodePoints);
}

/** The canonical hash of a catalog: its snapshots in permission-ID order. */
export function catalogHash(capabilityId: string, operations: readonly OperationSnapshot[]): Sha256Ref {
  const entries = operations.map((operation) => ({
    id: buildPermissionId(capabilityId, operation.method, operation.path),
    operation,
  }));
  entries.sort((a, b) => compareCodePoints(a.id, b.id));
  return hashCanonical(entries.map((e) => e.operation));
}

/**
 * Decides the version of a fresh import. A changed catalog gets the next integer; an
 * identical one (same snapshots, in any order) keeps the previous version. Neither input
 * is modified: a stored version, and the policies that copied its snapshots, stay as
 * they were reviewed.
 */
export function buildCatalogVersion(
  previous: CatalogVersionInput | undefined,
  imported: ImportedCatalog,
): CatalogVersionResult {
  const next = byPermissionId(imported.capability_id, imported.operations);
  const hash = catalogHash(imported.capability_id, imported.operations);
  if (previous === undefined) {
    return {
      catalog_version: "1",
      previous_version: null,
      is_new_version: true,
      catalog_hash: hash,
      diff: { added: sorted(next.keys()), removed: [], changed: [], unchanged: 0 },
    };
  }
  if (!isCatalogVersion(previous.catalog_version)) {
    throw new CatalogVersionError("previous catalog version must be a positive integer string");
  }
  const before = byPermissionId(imported.capability_id, previous.operations);
  const added: PermissionId[] = [];
  const changed: PermissionId[] = [];
  let unchanged = 0;
  for (const [id, digest] of next) {
    const old = before.get(id);
    if (old === undefined) added.push(id);
    else if (old !== digest) changed.push(id);
    else unchanged++;
  }
  const removed = [...before.keys()].filter((id) => !next.has(id));
  const same = added.length === 0 && removed.length === 0 && changed.length === 0;
  const version = same ? previous.catalog_version : String(Number(previous.catalog_version) + 1);
  if (!isCatalogVersion(version)) throw new CatalogVersionError("catalog version overflow");
  return {
    catalog_version: version,
    previous_version: previous.catalog_version,
    is_new_version: !same,
    catalog_hash: hash,
    diff: { added: sorted(added), removed: sorted(removed), changed: sorted(changed), unchanged },
  };
}
