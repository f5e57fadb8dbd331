import { generateId, isValidId } from "../core/ids.ts";
import { AuthorityError } from "../errors.ts";
import { collections, type PartnerRecord, storeKeys } from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";
import type { PageOf, PageRequest } from "./store-scan.ts";

export interface CreatePartnerInput {
  /** Generated (`prt_…`) when absent. */
  readonly partner_id?: string;
  readonly name: string;
}

export async function createPartner(deps: AdminDeps, input: CreatePartnerInput): Promise<PartnerRecord> {
  const partnerId = input.partner_id ?? generateId("prt");
  if (!isValidId("partner", partnerId)) {
    throw new AuthorityError("invalid_request", "partner_id must be 1-64 characters of [A-Za-z0-9._-].");
  }
  const record: PartnerRecord = {
    partner_id: partnerId,
    name: input.name,
    status: "active",
    created_at: deps.now().toISOString(),
  };
  const created = await deps.store.create(collections.partners, storeKeys.partner(partnerId), record);
  if (!created) {
    throw new AuthorityError("conflict", "A partner with this id already exists.", {
      details: { partner_id: partnerId },
    });
  }
  return record;
}

/** The partner, or `not_found`. */
export async function getPartner(deps: Pick<AdminDeps, "store">, partnerId: string): Promise<PartnerRecord> {
  const record = await deps.store.get<PartnerRecord>(collections.partners, storeKeys.partner(partnerId));
  if (record === undefined) throw new AuthorityError("not_found", "No such partner.");
  return record;
}

export async function listPartners(
  deps: Pick<AdminDeps, "store">,
  request: PageRequest,
): Promise<PageOf<PartnerRecord>> {
  const page = await deps.store.list<PartnerRecord>(collections.partners, {
    limit: request.limit ?? 100,
    ...(request.after === undefined ? {} : { after: request.after }),
  });
  const items = page.items.map((item) => item.value);
  return page.next === undefined ? { items } : { items, next: page.next };
}
