/**
 * The path rule's cost (docs/decisions/0301): CPU time per call of decide() on a catalog of
 * 100 operations with literal siblings, of the rule alone (pathValuesAcceptable, which
 * decide() runs on every Check), and of the render + re-match step an upstream call adds.
 * Budget of the issue: all extra checks together ≤ 25 µs CPU per Check.
 */
import { performance } from "node:perf_hooks";
import type { Capability } from "../src/core/capability.ts";
import { catalogMatcher } from "../src/core/capability.ts";
import { decide } from "../src/core/decision.ts";
import type { OperationSnapshot } from "../src/core/operation-snapshot.ts";
import { pathValuesAcceptable } from "../src/core/path-values.ts";
import { buildPermissionId } from "../src/core/permission-id.ts";
import { POLICY_SCHEMA_V1, type PolicyDocumentV1 } from "../src/core/policy-document.ts";
import { buildUpstreamUrl, renderUpstreamRequest } from "../src/execute/url.ts";
import { decideStage } from "../src/pipeline/decision.ts";
import { shadowPathRows } from "./shadow-paths.ts";

export interface PathBenchRow {
  name: string;
  value: string;
  /** Mean CPU µs per call (user + system), however busy the machine is. */
  cpuUs: number;
  wallUs: number;
}

const CAPABILITY = "bench-api";

function op(method: "GET" | "DELETE", path: string, schema: Record<string, unknown> = {}): OperationSnapshot {
  return {
    operation_id: `${method}${path}`.replace(/[^A-Za-z0-9]/g, "_"),
    method,
    path,
    input_schema: {
      path: { type: "object", properties: schema },
      query: { type: "object" },
      headers: { type: "object" },
      body: null,
    },
    response_schema: null,
    upstream_url_template: `https://api.example.com/v1${path}`,
    auth_profile_ref: "bench-profile",
    response_rules: [],
    parameter_constraints: [],
  };
}

function catalog(): { capability: Capability; allowed: OperationSnapshot; policy: PolicyDocumentV1 } {
  const allowed = op("GET", "/resources/{id}", {
    id: { type: "string", pattern: "^[A-Za-z0-9_.%é ]+$", maxLength: 64 },
  });
  const operations = [allowed, op("GET", "/resources/me"), op("DELETE", "/resources/admin")];
  for (let i = 0; operations.length < 100; i++) {
    operations.push(op("GET", `/r${i}/{id}/items`), op("GET", `/r${i}/export/items`));
  }
  const capability: Capability = {
    capability_id: CAPABILITY,
    partner_id: "bench-partner",
    name: "Bench",
    catalog_version: "1",
    operations,
  };
  const permissionId = buildPermissionId(CAPABILITY, "GET", allowed.path);
  const policy: PolicyDocumentV1 = {
    schema_version: POLICY_SCHEMA_V1,
    policy_version: "2026-01-01T00:00:00Z",
    subject: { subject_id: "bench-agent", subject_type: "agent", display_name: "Bench" },
    expires_at: "2099-01-01T00:00:00Z",
    revoked_at: null,
    apis: [
      {
        capability_id: CAPABILITY,
        allowed_permission_ids: [permissionId],
        auth_profile_ref: "bench-profile",
        operations: [allowed],
        response_redactions: {},
      },
    ],
  };
  return { capability, allowed, policy };
}

function measure(name: string, value: string, iterations: number, fn: () => unknown): PathBenchRow {
  for (let i = 0; i < 2000; i++) fn();
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < iterations; i++) fn();
  const wall = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return {
    name,
    value,
    cpuUs: (used.user + used.system) / iterations,
    wallUs: (wall * 1000) / iterations,
  };
}

export async function benchPathValues(iterations = 100_000): Promise<PathBenchRow[]> {
  const { capability, allowed, policy } = catalog();
  const permissionId = buildPermissionId(CAPABILITY, "GET", allowed.path);
  const now = new Date("2026-06-01T00:00:00Z");
  const rows: PathBenchRow[] = [];
  const values = [
    ["plain", "cus_00000001"],
    ["dotted", "john.doe"],
    ["utf-8", "Jos%C3%A9"],
    ["hostile (denied)", "Me.json"],
  ] as const;
  for (const [kind, raw] of values) {
    const path = `/resources/${raw}`;
    const input = {
      subjectId: "bench-agent",
      capabilityId: CAPABILITY,
      capability,
      policy: { ok: true as const, document: policy },
      method: "GET",
      path,
      now,
    };
    const decision = decide(input);
    const match = catalogMatcher(capability).match("GET", path);
    if (match === undefined) throw new Error(`bench: ${path} does not match`);
    rows.push(measure(`decide() (${kind})`, path, iterations, () => decide(input)));
    rows.push(
      measure(`  of which the path rule (${kind})`, path, iterations, () =>
        pathValuesAcceptable({
          capability,
          index: match.index,
          segments: match.segments,
          params: match.params,
          operation: allowed,
        }),
      ),
    );
    if (decision.status === "allowed") {
      const route = { capability, permissionId, operation: allowed };
      rows.push(
        measure(`render only, as before (${kind})`, path, iterations, () =>
          buildUpstreamUrl(allowed, { path: decision.params }),
        ),
      );
      rows.push(
        measure(`render + re-match (${kind})`, path, iterations, () =>
          renderUpstreamRequest(route, { path: decision.params }),
        ),
      );
    }
  }
  rows.push(...shadowRows(capability, policy, now, iterations));
  rows.push(...(await shadowPathRows(capability, policy, "/resources/cus_00000001", now, iterations)));
  return rows;
}

/**
 * A shadow policy's cost on the decision every Check and authorize-invocation runs
 * (decideStage → decide(), decision 2761): the same decision with the subject's shadow beside
 * it, one denying at the allow list (cheap) and one allowed through every step (the worst
 * case). Target: the shadow evaluation ≤ 1.2× one decision.
 */
function shadowRows(
  capability: Capability,
  policy: PolicyDocumentV1,
  now: Date,
  iterations: number,
): PathBenchRow[] {
  const alone = {
    subjectId: "bench-agent",
    capabilityId: CAPABILITY,
    capability,
    method: "GET",
    path: "/resources/cus_00000001",
    now,
    constraintsEnforced: true,
    policy: { ok: true as const, document: policy },
  };
  const beside = (document: PolicyDocumentV1) => ({
    ...alone,
    policy: { ...alone.policy, shadow: { ok: true as const, document } },
  });
  const disagreeing = beside({
    ...policy,
    apis: policy.apis.map((entry) => ({ ...entry, allowed_permission_ids: [], operations: [] })),
  });
  const agreeing = beside({ ...policy, policy_version: "2026-02-01T00:00:00Z" });
  if (decideStage(disagreeing).shadow?.agrees !== false || decideStage(agreeing).shadow?.agrees !== true)
    throw new Error("bench: the shadows must disagree and agree");
  const one = measure("decideStage() without a shadow (plain)", alone.path, iterations, () =>
    decideStage(alone),
  );
  const denying = measure("decideStage() + a shadow denying at the allow list", alone.path, iterations, () =>
    decideStage(disagreeing),
  );
  const allowing = measure("decideStage() + a shadow allowing (every step)", alone.path, iterations, () =>
    decideStage(agreeing),
  );
  const worst = allowing.cpuUs >= denying.cpuUs ? allowing : denying;
  const ratio = (worst.cpuUs - one.cpuUs) / one.cpuUs;
  return [
    one,
    denying,
    allowing,
    {
      name: "  the shadow evaluation alone, worst case, in decisions (target ≤ 1.2)",
      value: `${ratio.toFixed(2)}×`,
      cpuUs: worst.cpuUs - one.cpuUs,
      wallUs: worst.wallUs - one.wallUs,
    },
  ];
}

if (import.meta.main) {
  console.table(await benchPathValues());
}
