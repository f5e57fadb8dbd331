/**
 * How policy records sit in the store. `policies/<subject_id>` holds the record's facts
 * and the artifact's content address (`artifact_sha256`); the artifact itself (tens of KB)
 * sits in `policy_artifacts/<sha256 hex>`. Every decision reads the small record to see
 * the current head; only a cache miss reads the artifact, and an artifact is used only
 * when it hashes to the address its record names.
 *
 * Records written by earlier versions carry the artifact inline; they are read as they are.
 */
import { createHash } from "node:crypto";
import { collections, storeKeys } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import type { PolicyRecord, StoredPolicyRecord } from "./record.ts";

export const artifactAddress = (artifact: string): string =>
  createHash("sha256").update(artifact).digest("hex");

/** The stored record (facts + artifact address, or a legacy inline artifact). */
export function readStoredPolicyRecord(
  store: Store,
  subjectId: string,
  collection: PolicyCollection = collections.policies,
): Promise<StoredPolicyRecord | undefined> {
  return store.get<StoredPolicyRecord>(collection, storeKeys.policy(subjectId));
}

/** Where a subject's records live: the enforced policy, or its shadow (decision 2761). */
export type PolicyCollection = typeof collections.policies | typeof collections.shadowPolicies;

/**
 * The artifact a stored record names: inline, or fetched by address and checked against it.
 * Undefined when it is missing or does not hash to the address (nothing to verify).
 */
export async function readPolicyArtifact(
  store: Store,
  record: StoredPolicyRecord,
): Promise<string | undefined> {
  if (typeof record.artifact === "string") return record.artifact;
  const address = record.artifact_sha256;
  if (typeof address !== "string" || !/^[0-9a-f]{64}$/.test(address)) return undefined;
  const artifact = await store.get<unknown>(collections.policyArtifacts, address);
  return typeof artifact === "string" && artifactAddress(artifact) === address ? artifact : undefined;
}

/** The whole record; its artifact is "" when the stored one is missing or altered (never verifies). */
export async function readPolicyRecord(
  store: Store,
  subjectId: string,
  collection: PolicyCollection = collections.policies,
): Promise<PolicyRecord | undefined> {
  const stored = await readStoredPolicyRecord(store, subjectId, collection);
  if (stored === undefined) return undefined;
  const { artifact_sha256: _address, ...facts } = stored;
  return { ...facts, artifact: (await readPolicyArtifact(store, stored)) ?? "" };
}

function addressOf(record: StoredPolicyRecord | undefined): string | undefined {
  return record === undefined || typeof record.artifact === "string" ? undefined : record.artifact_sha256;
}

/**
 * Stores a record: the artifact first, then the record pointing at it, so a reader never
 * finds a record whose artifact is not there yet; then the previous artifact is removed.
 * Callers serialize writers of one subject (withKeyLock).
 */
export async function writePolicyRecord(
  store: Store,
  record: PolicyRecord,
  collection: PolicyCollection = collections.policies,
): Promise<void> {
  const previous = addressOf(await readStoredPolicyRecord(store, record.subject_id, collection));
  const { artifact, ...facts } = record;
  const address = artifactAddress(artifact);
  await store.put(collections.policyArtifacts, address, artifact);
  const stored: StoredPolicyRecord = { ...facts, artifact_sha256: address };
  await store.put(collection, storeKeys.policy(record.subject_id), stored);
  if (previous !== undefined && previous !== address) await removeArtifact(store, previous);
}

/** Deletes a subject's record and its artifact; true when there was a record. */
export async function deletePolicyRecord(
  store: Store,
  subjectId: string,
  collection: PolicyCollection = collections.policies,
): Promise<boolean> {
  const previous = addressOf(await readStoredPolicyRecord(store, subjectId, collection));
  const deleted = await store.delete(collection, storeKeys.policy(subjectId));
  if (previous !== undefined) await removeArtifact(store, previous);
  return deleted;
}

async function removeArtifact(store: Store, address: string): Promise<void> {
  try {
    await store.delete(collections.policyArtifacts, address);
  } catch {
    // An artifact left behind names no record and is never used; the record write counted.
  }
}
