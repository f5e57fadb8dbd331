/** A compiled policy document protected and stored as the policy writer stores it (head 1). */

import type { Sha256Ref } from "../../src/core/canonical-json.ts";
import { computePolicyHash } from "../../src/core/index.ts";
import type { PolicyDocument } from "../../src/core/policy-document.ts";
import { protectPolicy } from "../../src/policy/artifact.ts";
import type { PolicyProtector } from "../../src/policy/protector.ts";
import { type PolicyCollection, writePolicyRecord } from "../../src/policy/record-store.ts";
import type { Store } from "../../src/store/store.ts";

/** The record fields the policy writer derives from a subject_credentials_v1 document at head 1. */
export function policyRecordFields(document: PolicyDocument, partnerId: string, documentHash: Sha256Ref) {
  return {
    subject_id: document.subject.subject_id,
    partner_id: partnerId,
    schema_version: document.schema_version,
    crypto_version: "subject_credentials_v1" as const,
    policy_version: document.policy_version,
    policy_hash: computePolicyHash(document.apis),
    document_hash: documentHash,
    head: 1,
    expires_at: document.expires_at,
    revoked_at: document.revoked_at,
    capabilities: [],
  };
}

export async function storePolicyDocument(
  store: Store,
  protector: PolicyProtector,
  document: PolicyDocument,
  partnerId: string,
  collection?: PolicyCollection,
): Promise<void> {
  const { artifact, documentHash } = await protectPolicy(document, protector, partnerId);
  await writePolicyRecord(
    store,
    {
      ...policyRecordFields(document, partnerId, documentHash),
      artifact,
      updated_at: new Date().toISOString(),
    },
    collection,
  );
}
