import type { PolicyDocumentV1 } from "../../../src/core/policy-document.ts";
import { protectPolicy } from "../../../src/policy/artifact.ts";
import type { PolicyFetchResult, PolicyRecordFetcher } from "../../../src/policy/cache/index.ts";
import {
  type PolicyOpener,
  PolicyProtectionError,
  type PolicyProtector,
} from "../../../src/policy/protector.ts";
import type { PolicyRecord } from "../../../src/policy/record.ts";
import { createSignedPolicyVerifier } from "../../../src/policy/signed-policy.ts";
import { entry, policyV1 } from "../../core/fixtures.ts";

export const PARTNER = "partner-1";

/** A fetched signed policy as base64 (the sidecar's client hands the blob's bytes when it has them). */
export function signedPolicyText(signed: string | Uint8Array): string {
  return typeof signed === "string" ? signed : Buffer.from(signed).toString("base64");
}

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
 * The sidecar's opener: signed policies verified with the public keys `authority` (the
 * authority's protector) hands out — as the sidecar route does.
 */
export function sidecarOpener(authority: PolicyProtector, serviceIdentity = "t"): PolicyOpener {
  return createSignedPolicyVerifier({
    serviceIdentity,
    source: {
      fetchPolicyKeys: (owner) => {
        if (authority.signerKeys === undefined) throw new Error("no signer keys");
        return authority.signerKeys(owner);
      },
    },
  });
}

/**
 * The authority's side of the sidecar route, in process: records by subject (opened with
 * `authority` into the signed policy a sidecar gets), conditional answers by head, and a
 * count of what was asked (so tests can see which layer answered).
 */
export interface RecordSource extends PolicyRecordFetcher {
  readonly records: Map<string, PolicyRecord>;
  readonly calls: Array<{ subjectId: string; knownHead: number | undefined }>;
  down: boolean;
}

export function recordSource(authority: PolicyProtector): RecordSource {
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
      const { artifact, ...facts } = record;
      let signedPolicy: string | null;
      try {
        const opened = await authority.open(artifact, {
          cryptoVersion: record.crypto_version,
          subjectId: record.subject_id,
          partnerId: record.partner_id,
        });
        signedPolicy = opened.signedBlob ?? null;
      } catch (error) {
        if (!(error instanceof PolicyProtectionError) || error.code !== "policy_unverifiable") throw error;
        signedPolicy = null;
      }
      return {
        status: "found",
        record: facts,
        signedPolicy,
        partnerId: record.partner_id,
        identity: "platform_vouched",
      };
    },
  };
  return source;
}
