/**
 * Start-up migration of subject records written before subjects said which principals
 * stand for them (docs/decisions/0701-subject-ownership.md). Idempotent: only records
 * without a valid `identity` are rewritten, so every start (and every replica) may run it.
 *
 * A legacy record gets the strictest kind that keeps it meaningful: an external subject
 * `binding`, any other `partner_token` (its tokens must carry the partner's `partner_id`
 * claim). Nothing records who created a legacy subject, so none is assumed vouched for by
 * the platform: a platform admin vouches with PATCH /partners/{id}/users/{subject}.
 */
import { identityOf, isSubjectIdentity } from "../core/subject-identity.ts";
import { collections, type SubjectRecord } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { scan } from "./store-scan.ts";

export interface SubjectIdentityMigration {
  /** Records rewritten by this run. */
  readonly migrated: number;
  readonly scanned: number;
}

export async function migrateSubjectIdentities(store: Store): Promise<SubjectIdentityMigration> {
  let migrated = 0;
  let scanned = 0;
  for await (const item of scan<SubjectRecord>(store, collections.subjects)) {
    scanned++;
    if (isSubjectIdentity(item.value.identity)) continue;
    await store.put(collections.subjects, item.id, { ...item.value, identity: identityOf(item.value) });
    migrated++;
  }
  return { migrated, scanned };
}
