import type { PolicyDocumentV1 } from "../../../src/core/policy-document.ts";
import { protectPolicy } from "../../../src/policy/artifact.ts";
import type { PolicyFetchResult, PolicyRecordFetcher } from "../../../src/policy/cache/index.ts";
import type { PolicyProtector } from "../../../src/policy/protector.ts";
import type { PolicyRecord } from "../../../src/policy/record.ts";
import { entry, policyV1 } from "../../core/fixtures.ts";

export const PARTNER = "partner-1";

/** A real, protected v1 policy record for `subjectId`. */
export async function protectedRecord(
  protector: PolicyProtector,
  subjectId: string,
  head: number,
  extra: Partial<PolicyDocumentV1> = {},
): Promise<PolicyRecord> {
  const document = policyV1([entry([["GET", "/users/{id}"]])], {
    subject: { subject_id: subjectId, subject_type: "agent", display_name: subjectId },
    expires_at: "2099-01-01T00:00:00Z",
    ...extra,
  });
  const { artifact, documentHash } = await protectPolicy(document, protector, PARTNER);
  return {
    subject_id: subjectId,
    partner_id: PARTNER,
    schema_version: document.schema_version,
    crypto_version: "subject_credentials_v1",
    policy_version: document.policy_version,
    policy_hash: `sha256:${"0".repeat(64)}`,
    document_hash: documentHash,
    head,
    expires_at: document.expires_at,
    revoked_at: document.revoked_at,
    capabilities: [],
    artifact,
    updated_at: new Date().toISOString(),
  };
}

/**
 * The authority's side of the sidecar route, in process: records by subject, conditional
 * answers by head, and a count of what was asked (so tests can see which layer answered).
 */
export interface RecordSource extends PolicyRecordFetcher {
  readonly records: Map<string, PolicyRecord>;
  readonly calls: Array<{ subjectId: string; knownHead: number | undefined }>;
  down: boolean;
}

export function recordSource(): RecordSource {
  const records = new Map<string, PolicyRecord>();
  const calls: Array<{ subjectId: string; knownHead: number | undefined }> = [];
  const source: RecordSource = {
    records,
    calls,
    down: false,
    async fetchPolicy(subjectId, { knownHead }): Promise<PolicyFetchResult> {
      calls.push({ subjectId, knownHead });
      if (source.down) throw new Error("authority unreachable");
      const record = records.get(subjectId);
      if (record === undefined) return { status: "not_found" };
      if (knownHead !== undefined && knownHead === record.head) return { status: "not_modified" };
      return { status: "found", record, partnerId: record.partner_id, identity: "platform_vouched" };
    },
  };
  return source;
}
