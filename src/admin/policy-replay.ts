/**
 * The dry run of an assignment (docs/decisions/2771-replay-gate-receipts-everywhere-sealed-tails.md):
 * the policy the assignment would compile to, replayed over the subject's recorded decisions on
 * that capability in a window (src/pipeline/replay.ts), before anything is signed or stored.
 */

import { setImmediate as nextTurn } from "node:timers/promises";
import type { DecisionAuditRecord } from "../audit/records.ts";
import type { Capability } from "../core/capability.ts";
import { AuthorityError } from "../errors.ts";
import { createReplayer, type Replayer, type ReplayReport } from "../pipeline/replay.ts";
import { compilePolicyDocument } from "../policy/compile.ts";
import type { LogPosition } from "../store/index.ts";
import type { AssignmentRecord, SubjectRecord } from "../store/model.ts";
import type { AdminDeps } from "./deps.ts";
import { listAssignments, policyExpiry } from "./policy-writer.ts";

/** Most decision records one dry run reads: a longer window is reported as truncated. */
export const MAX_REPLAYED_RECORDS = 20_000;
/** The window when none is given: the last seven days. */
export const DEFAULT_REPLAY_WINDOW_MS = 7 * 24 * 3_600_000;
const PAGE = 1000;

export interface ReplayWindowInput {
  /** ISO 8601 times; default: seven days before `until`, and now. */
  readonly since?: string;
  readonly until?: string;
  /** Most examples per direction (default 5). */
  readonly examples?: number;
}

export interface AssignmentReplay {
  readonly dry_run: true;
  readonly subject_id: string;
  readonly capability_id: string;
  readonly window: { readonly since: string; readonly until: string };
  /** Decision records read; `truncated` when the window held more than MAX_REPLAYED_RECORDS. */
  readonly records: number;
  readonly truncated: boolean;
  readonly replay: ReplayReport;
}

/** What the dry run needs besides the store: the capability as decisions resolve it, and the rollout gate. */
export interface ReplayDeps extends Pick<AdminDeps, "store" | "now"> {
  readonly resolveCapability: (partnerId: string, capabilityId: string) => Promise<Capability | undefined>;
  readonly constraintsEnforced: (partnerId: string) => boolean;
}

function timeOf(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const time = Date.parse(value);
  if (!Number.isFinite(time)) {
    throw new AuthorityError("invalid_request", `${name} is not an ISO 8601 time.`, {
      details: { [name]: value },
    });
  }
  return time;
}

/** The window, checked: since before until. */
export function replayWindow(input: ReplayWindowInput, now: Date): { since: number; until: number } {
  const until = timeOf(input.until, now.getTime(), "until");
  const since = timeOf(input.since, until - DEFAULT_REPLAY_WINDOW_MS, "since");
  if (since > until) {
    throw new AuthorityError("invalid_request", "since is after until.", {
      details: { since: new Date(since).toISOString(), until: new Date(until).toISOString() },
    });
  }
  return { since, until };
}

/**
 * Replays the subject's decision records on the capability in the window, oldest first, at most
 * MAX_REPLAYED_RECORDS, a page at a time: the event loop turns between pages, so decisions
 * answered by this replica are not stalled behind a long replay (decision 2861).
 */
async function replayRecordedDecisions(
  deps: Pick<AdminDeps, "store">,
  subject: SubjectRecord,
  capabilityId: string,
  window: { since: number; until: number },
  replayer: Replayer,
): Promise<{ records: number; truncated: boolean }> {
  let records = 0;
  let after: LogPosition | undefined;
  for (;;) {
    const page = await deps.store.queryLog<DecisionAuditRecord>("audit", {
      // The log also holds the admin API's policy changes of the subject: decisions only.
      where: {
        kind: "decision",
        subject_id: subject.subject_id,
        capability_id: capabilityId,
        partner_id: subject.partner_id,
      },
      ...window,
      limit: PAGE,
      ...(after === undefined ? {} : { after }),
    });
    for (const entry of page.entries) {
      if (records === MAX_REPLAYED_RECORDS) return { records, truncated: true };
      replayer.add(entry.value);
      records++;
    }
    if (page.next === undefined) return { records, truncated: false };
    after = page.next;
    await nextTurn();
  }
}

/**
 * Replays the subject's recorded decisions on the capability against the policy that
 * `assignment` (checked, not stored) would compile to with the subject's other assignments.
 * Nothing is written.
 */
export async function replayAssignment(
  deps: ReplayDeps,
  subject: SubjectRecord,
  assignment: AssignmentRecord,
  windowInput: ReplayWindowInput,
): Promise<AssignmentReplay> {
  const { partner_id: partnerId, subject_id: subjectId } = subject;
  const capabilityId = assignment.capability_id;
  const capability = await deps.resolveCapability(partnerId, capabilityId);
  if (capability === undefined) throw new AuthorityError("not_found", "No such capability.");
  const now = deps.now();
  const window = replayWindow(windowInput, now);
  const others = (await listAssignments(deps, partnerId, subjectId)).filter(
    (other) => other.capability_id !== capabilityId,
  );
  const assignments = [...others, assignment];
  const proposed = compilePolicyDocument({
    subject: {
      subject_id: subjectId,
      subject_type: subject.subject_type,
      display_name: subject.display_name,
    },
    cryptoVersion: subject.crypto_version,
    assignments,
    expiresAt: policyExpiry(assignments, now),
    revokedAt: null,
    now,
  });
  const replayer = createReplayer({
    subjectId,
    capability,
    proposed,
    constraintsEnforced: deps.constraintsEnforced(partnerId),
    ...(windowInput.examples === undefined ? {} : { examples: windowInput.examples }),
  });
  const { records, truncated } = await replayRecordedDecisions(deps, subject, capabilityId, window, replayer);
  return {
    dry_run: true,
    subject_id: subjectId,
    capability_id: capabilityId,
    window: { since: new Date(window.since).toISOString(), until: new Date(window.until).toISOString() },
    records,
    truncated,
    replay: replayer.report(),
  };
}
