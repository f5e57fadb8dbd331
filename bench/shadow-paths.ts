/**
 * A shadow policy's cost where each hot path pays it (decision 2761), beside the decideStage()
 * rows of bench/path-values.ts: what a Check and an authorize-invocation do more for a subject
 * with a shadow than for one without, in CPU, and as a multiple of the path's own decision.
 *
 * - Check (sidecar): the shadow is read from the sidecar's cache without waiting
 *   (`SidecarShadowPolicies.peek`, a warm entry), put beside the verified policy (`withShadow`)
 *   and decided with it. One decision: decideStage() alone (the sidecar's policy is in memory).
 * - authorize-invocation (authority): the policy stage as `authority serve` builds it
 *   (src/policy/runtime.ts) over a SQLite store — the enforced record read on every call, the
 *   shadow's record reused for `record-cache-ms` (1 s), both documents from the verified cache —
 *   then decideStage(). One decision: the same without a shadow record.
 *
 * The shadow allows through every step (the worst case: every step is decided twice).
 * Target (issue 34): the shadow ≤ 1.2× the CPU of one decision.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Capability } from "../src/core/capability.ts";
import type { ShadowLoad } from "../src/core/decision.ts";
import type { PolicyDocumentV1 } from "../src/core/policy-document.ts";
import { decideStage, withShadow } from "../src/pipeline/decision.ts";
import { createSidecarShadowPolicies } from "../src/pipeline/shadow-policies.ts";
import {
  createPolicyLoader,
  type PolicyLoader,
  reusedRecordSource,
  storePolicyRecordSource,
  withShadowPolicies,
} from "../src/policy/loader.ts";
import { createLocalPolicyProtector } from "../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../src/policy/process-key-rings.ts";
import type { PolicyProtector } from "../src/policy/protector.ts";
import { openStore } from "../src/store/index.ts";
import { collections } from "../src/store/model.ts";
import type { Store } from "../src/store/store.ts";
import { cpuPerCall } from "./lib/cpu-per-call.ts";
import { storePolicyDocument } from "./lib/policy-records.ts";

export interface ShadowPathRow {
  name: string;
  value: string;
  cpuUs: number;
  wallUs: number;
}

const RECORD_CACHE_MS = 1000;

async function measure(
  name: string,
  value: string,
  iterations: number,
  fn: () => unknown,
): Promise<ShadowPathRow> {
  return { name, value, ...(await cpuPerCall(iterations, fn)) };
}

function ratioRow(label: string, one: ShadowPathRow, withShadowRow: ShadowPathRow): ShadowPathRow {
  const extra = withShadowRow.cpuUs - one.cpuUs;
  return {
    name: `  ${label}: the shadow, in decisions (target ≤ 1.2)`,
    value: `${(extra / one.cpuUs).toFixed(2)}×`,
    cpuUs: extra,
    wallUs: withShadowRow.wallUs - one.wallUs,
  };
}

/** The authority's policy stage, as src/policy/runtime.ts builds it. */
function authorityPolicies(store: Store, protector: PolicyProtector): PolicyLoader {
  return withShadowPolicies(
    createPolicyLoader({ source: storePolicyRecordSource(store), protector }),
    createPolicyLoader({
      source: reusedRecordSource(storePolicyRecordSource(store, collections.shadowPolicies), RECORD_CACHE_MS),
      protector,
    }),
  );
}

export async function shadowPathRows(
  capability: Capability,
  policy: PolicyDocumentV1,
  path: string,
  now: Date,
  iterations: number,
): Promise<ShadowPathRow[]> {
  const subjectId = policy.subject.subject_id;
  const partnerId = capability.partner_id;
  // Allowed through every step, by a document of its own: the worst case.
  const shadowDocument: PolicyDocumentV1 = { ...policy, policy_version: "2026-02-01T00:00:00Z" };
  const input = {
    subjectId,
    capabilityId: capability.capability_id,
    capability,
    method: "GET",
    path,
    now,
    constraintsEnforced: true,
  };
  const enforced = { ok: true as const, document: policy };
  const shadowLoad: ShadowLoad = { ok: true, document: shadowDocument };
  if (decideStage({ ...input, policy: withShadow(enforced, shadowLoad) }).shadow?.decision !== "allowed")
    throw new Error("bench: the shadow must allow");

  const dir = await mkdtemp(join(tmpdir(), "bench-shadow-"));
  const protector = createLocalPolicyProtector({
    keyRings: createProcessKeyRings(),
    serviceIdentity: "bench",
  });
  // The sidecar's cache holds an entry for the subject (warm): peek is a map read, the same
  // whether the entry is a shadow or its absence.
  const shadows = createSidecarShadowPolicies({
    source: { fetchShadowPolicy: async () => ({ status: "not_found" }) },
    opener: protector,
  });
  shadows.peek(subjectId, partnerId);
  await new Promise((resolve) => setTimeout(resolve, 10));
  const checkOne = await measure("Check: decideStage() without a shadow", path, iterations, () =>
    decideStage({ ...input, policy: enforced }),
  );
  const checkShadow = await measure(
    "Check: the sidecar's shadow lookup (warm) + decideStage() with it",
    path,
    iterations,
    () => {
      shadows.peek(subjectId, partnerId);
      return decideStage({ ...input, policy: withShadow(enforced, shadowLoad) });
    },
  );

  const plainStore = await openStore(`sqlite:${join(dir, "plain.db")}`);
  const shadowStore = await openStore(`sqlite:${join(dir, "shadow.db")}`);
  try {
    for (const store of [plainStore, shadowStore])
      await storePolicyDocument(store, protector, policy, partnerId, collections.policies);
    await storePolicyDocument(shadowStore, protector, shadowDocument, partnerId, collections.shadowPolicies);
    const plain = authorityPolicies(plainStore, protector);
    const shadowed = authorityPolicies(shadowStore, protector);
    const expect = { partnerId };
    const decideWith = async (loader: PolicyLoader) =>
      decideStage({ ...input, policy: (await loader.load(subjectId, expect)).policy });
    const first = await decideWith(shadowed);
    if (first.shadow?.decision !== "allowed") throw new Error("bench: the stored shadow must be loaded");
    const rounds = Math.max(1000, Math.floor(iterations / 10));
    // Alternated, so both see the same machine load.
    const plainRuns: ShadowPathRow[] = [];
    const shadowRuns: ShadowPathRow[] = [];
    for (let round = 0; round < 3; round++) {
      plainRuns.push(
        await measure("authorize: policy stage + decideStage(), no shadow record", path, rounds, () =>
          decideWith(plain),
        ),
      );
      shadowRuns.push(
        await measure(
          "authorize: policy stage with the shadow's load + decideStage() with it",
          path,
          rounds,
          () => decideWith(shadowed),
        ),
      );
    }
    const median = (runs: ShadowPathRow[]) =>
      [...runs].sort((a, b) => a.cpuUs - b.cpuUs)[Math.floor(runs.length / 2)] as ShadowPathRow;
    const authorizeOne = median(plainRuns);
    const authorizeShadow = median(shadowRuns);
    return [
      checkOne,
      checkShadow,
      ratioRow("Check", checkOne, checkShadow),
      authorizeOne,
      authorizeShadow,
      ratioRow("authorize", authorizeOne, authorizeShadow),
    ];
  } finally {
    await plainStore.close();
    await shadowStore.close();
    await rm(dir, { recursive: true, force: true });
  }
}
