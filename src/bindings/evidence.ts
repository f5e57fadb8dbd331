/**
 * Audit evidence of binding invokes: one record per call (allowed or denied) in the
 * binding's `binding_invocations` collection — listed by `GET …/invocations`, read by
 * `GET …/evidence/{id}` — plus one `evidence` log record through the shared audit
 * recorder. Records hold hashes, ids, statuses, timings and redaction locations; never
 * a body, a header value, a token or a credential.
 */

import type { PageOf, PageRequest } from "../admin/store-scan.ts";
import { pageUnder } from "../admin/store-scan.ts";
import type { EvidenceInput } from "../audit/mcp-records.ts";
import { AuthorityError, type ErrorCode, errorCodes } from "../errors.ts";
import { bindingCollections, bindingKeys, type InvocationEvidence } from "../store/binding-model.ts";
import type { Store, StoreWrite } from "../store/store.ts";

const EVIDENCE_ID = /^ev_[0-9a-z]{10}[0-9a-f]{16}$/;

/** The write that stores one evidence record (alone, or in a batch with the call's result). */
export function evidenceWrite(evidence: InvocationEvidence): StoreWrite {
  return {
    op: "put",
    collection: bindingCollections.invocations,
    id: bindingKeys.invocation(evidence.binding_id, evidence.evidence_id),
    value: evidence,
  };
}

export async function writeEvidence(store: Store, evidence: InvocationEvidence): Promise<void> {
  await store.writeAll([evidenceWrite(evidence)]);
}

/** The shared `evidence` log's view of the same call (digests only). */
export function evidenceLogInput(evidence: InvocationEvidence): EvidenceInput {
  return {
    binding_id: evidence.binding_id,
    actor: evidence.client_id,
    subject_id: evidence.subject_id,
    partner_id: evidence.partner_id,
    capability_id: evidence.capability_id,
    permission_id: evidence.permission_id,
    decision: evidence.decision,
    reason:
      evidence.reason !== null && Object.hasOwn(errorCodes, evidence.reason)
        ? (evidence.reason as ErrorCode)
        : null,
    policy:
      evidence.document_hash === null || evidence.policy_version === null
        ? null
        : { document_hash: evidence.document_hash, policy_version: evidence.policy_version },
    request: evidence.request_hash,
    response_status: evidence.upstream_status,
    response: evidence.response_hash,
    redaction_events: evidence.redaction_events.length,
    idempotency_key: evidence.idempotency_key_hash,
    requestId: evidence.requestId,
    time: evidence.time,
  };
}

export async function getEvidence(
  store: Store,
  bindingId: string,
  evidenceId: string,
): Promise<InvocationEvidence> {
  const record = EVIDENCE_ID.test(evidenceId)
    ? await store.get<InvocationEvidence>(
        bindingCollections.invocations,
        bindingKeys.invocation(bindingId, evidenceId),
      )
    : undefined;
  if (record === undefined) throw new AuthorityError("not_found", "No such evidence record in this binding.");
  return record;
}

/** Oldest first (evidence ids sort by time); page with `after`. */
export async function listEvidence(
  store: Store,
  bindingId: string,
  request: PageRequest,
): Promise<PageOf<InvocationEvidence>> {
  const page = await pageUnder<InvocationEvidence>(
    store,
    bindingCollections.invocations,
    `${bindingId}/`,
    request,
  );
  const items = page.items.map((item) => item.value);
  return page.next === undefined ? { items } : { items, next: page.next };
}
