/**
 * The sidecar's shadow policies (decision 2761): fetched from the authority and verified like
 * the subject's policy (same signature check, same record facts), kept 30 s, and
 * read without waiting — a decision never waits for, nor fails because of, a shadow. A miss
 * or a stale entry starts one background fetch per subject; until it lands the decision is
 * recorded without a shadow. The shadow only ever reaches the record, never the outcome.
 */
import { LRUCache } from "lru-cache";
import type { ShadowLoad } from "../core/decision.ts";
import { positiveIntegerOption } from "../core/positive-integer.ts";
import { openPolicyDocument } from "../policy/artifact.ts";
import type { PolicyFetchResult } from "../policy/cache/verified-policy-cache.ts";
import type { PolicyOpener } from "../policy/protector.ts";

export interface ShadowPolicySource {
  fetchShadowPolicy(subjectId: string): Promise<PolicyFetchResult>;
}

export interface SidecarShadowPolicies {
  /** The subject's verified shadow as last seen (undefined: none, or not fetched yet). Never waits. */
  peek(subjectId: string, partnerId: string): ShadowLoad | undefined;
}

export interface SidecarShadowPolicyOptions {
  readonly source: ShadowPolicySource;
  readonly opener: PolicyOpener;
  /**
   * How long a fetched shadow (or its absence) is used before it is fetched again (default
   * 30000 ms): one authority request per deciding subject per period, and a new shadow seen
   * within it — a shadow only observes, so a period's delay costs nothing of enforcement.
   */
  readonly refreshMs?: number;
  readonly max?: number;
  readonly onError?: (error: unknown) => void;
}

interface Entry {
  readonly load: ShadowLoad | undefined;
  readonly partnerId: string;
  readonly at: number;
}

const INVALID: ShadowLoad = Object.freeze({ ok: false, reason: "policy_verification_failed" });

export function createSidecarShadowPolicies(options: SidecarShadowPolicyOptions): SidecarShadowPolicies {
  const refreshMs = positiveIntegerOption(options.refreshMs, 30_000, "refreshMs");
  const entries = new LRUCache<string, Entry>({ max: options.max ?? 10_000 });
  const fetching = new Set<string>();

  async function verify(
    result: PolicyFetchResult,
    subjectId: string,
    partnerId: string,
  ): Promise<ShadowLoad | undefined> {
    if (result.status !== "found") return undefined;
    const { record, signedPolicy } = result;
    if (record.subject_id !== subjectId || record.partner_id !== partnerId || result.partnerId !== partnerId)
      return INVALID;
    if (signedPolicy === null) return INVALID;
    try {
      const opened = await openPolicyDocument(signedPolicy, options.opener, {
        cryptoVersion: record.crypto_version,
        subjectId,
        partnerId,
      });
      return opened.documentHash === record.document_hash ? { ok: true, document: opened.document } : INVALID;
    } catch {
      return INVALID;
    }
  }

  function refresh(subjectId: string, partnerId: string): void {
    const key = `${partnerId}\u0000${subjectId}`;
    if (fetching.has(key)) return;
    fetching.add(key);
    options.source
      .fetchShadowPolicy(subjectId)
      .then((result) => verify(result, subjectId, partnerId))
      .then(
        (load) => entries.set(key, { load, partnerId, at: Date.now() }),
        (error: unknown) => options.onError?.(error),
      )
      .finally(() => fetching.delete(key));
  }

  return {
    peek(subjectId, partnerId) {
      const entry = entries.get(`${partnerId}\u0000${subjectId}`);
      if (entry === undefined || Date.now() - entry.at >= refreshMs) refresh(subjectId, partnerId);
      return entry?.load;
    },
  };
}
