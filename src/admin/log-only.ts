/**
 * The platform-wide log-only mode of a capability (decision 2761): its decisions are made
 * and recorded, and a request the policy's allow list does not cover is allowed all the same
 * (loud: `*_log_only_allows_total` and a warning per allow). Only a platform admin changes
 * it (the routes check the role); each change is one audit record in the same transaction.
 */
import { AuthorityError } from "../errors.ts";
import type { LogOnlyRecord } from "../policy/log-only.ts";
import { collections, type LogOnlyChangeAuditRecord, partnerKey } from "../store/model.ts";
import { appendChange } from "./audit.ts";
import { loadCatalog } from "./capabilities.ts";
import type { Actor, AdminDeps } from "./deps.ts";
import { getPartner } from "./partners.ts";
import { scanAll } from "./store-scan.ts";

export type { LogOnlyRecord };

function changeRecord(
  actor: Actor,
  action: LogOnlyChangeAuditRecord["action"],
  partnerId: string,
  capabilityId: string,
  reason: string | null,
  now: Date,
): LogOnlyChangeAuditRecord {
  return {
    kind: "log_only_change",
    action,
    actor: actor.subject,
    partner_id: partnerId,
    capability_id: capabilityId,
    reason,
    time: now.toISOString(),
    requestId: actor.requestId,
  };
}

/** Turns the mode on for one capability of one partner (the capability must exist). */
export async function enableLogOnly(
  deps: Pick<AdminDeps, "store" | "adminChain" | "now" | "logger">,
  actor: Actor,
  partnerId: string,
  capabilityId: string,
  reason: string,
): Promise<LogOnlyRecord> {
  await getPartner(deps, partnerId);
  if ((await loadCatalog(deps.store, partnerId, capabilityId)) === undefined)
    throw new AuthorityError("not_found", "No such capability.");
  const now = deps.now();
  const record: LogOnlyRecord = {
    partner_id: partnerId,
    capability_id: capabilityId,
    reason,
    set_by: actor.subject,
    set_at: now.toISOString(),
  };
  await appendChange(deps, changeRecord(actor, "enable", partnerId, capabilityId, reason, now), [
    {
      op: "put",
      collection: collections.logOnlyCapabilities,
      id: partnerKey(partnerId, capabilityId),
      value: record,
    },
  ]);
  deps.logger?.warn(
    { partner_id: partnerId, capability_id: capabilityId, actor: actor.subject },
    "LOG-ONLY MODE ENABLED: requests this capability's policies deny at the allow list are allowed and recorded",
  );
  return record;
}

/** Turns the mode off; false when it was not on. */
export async function disableLogOnly(
  deps: Pick<AdminDeps, "store" | "adminChain" | "now" | "logger">,
  actor: Actor,
  partnerId: string,
  capabilityId: string,
): Promise<boolean> {
  const id = partnerKey(partnerId, capabilityId);
  if ((await deps.store.get(collections.logOnlyCapabilities, id)) === undefined) return false;
  await appendChange(deps, changeRecord(actor, "disable", partnerId, capabilityId, null, deps.now()), [
    { op: "delete", collection: collections.logOnlyCapabilities, id },
  ]);
  deps.logger?.warn(
    { partner_id: partnerId, capability_id: capabilityId, actor: actor.subject },
    "log-only mode disabled",
  );
  return true;
}

/** Every capability in the mode, platform-wide. */
export async function listLogOnly(deps: Pick<AdminDeps, "store">): Promise<LogOnlyRecord[]> {
  const items = await scanAll<LogOnlyRecord>(deps.store, collections.logOnlyCapabilities, "");
  return items.map((item) => item.value);
}
