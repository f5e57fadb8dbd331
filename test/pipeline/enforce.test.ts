/**
 * The enforcement pipeline's stage order and failure mapping, on real parts: a real SQLite
 * store and audit recorder, the real executor (egress, injection, deadline, scrub, redaction)
 * against a real HTTP upstream on an ephemeral port, and `decide()` over a real catalog and
 * policy document. The subject, catalog and verified-policy sources are the fixtures below
 * (the loader's verification has its own tests in test/policy). For every refusal the test
 * checks the three things the pipeline promises: the error table's reason and status, no
 * upstream request when the refusal comes before the send, and one decision record saying
 * denied with that reason.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";
import { type AuditRecorder, createAuditRecorder } from "../../src/audit/recorder.ts";
import type { DecisionAuditRecord } from "../../src/audit/records.ts";
import type { Capability } from "../../src/core/capability.ts";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";
import { constraintsRolloutGate } from "../../src/core/parameter-constraints.ts";
import { buildPermissionId } from "../../src/core/permission-id.ts";
import type { PolicyDocumentV1 } from "../../src/core/policy-document.ts";
import { AuthorityError, errorCodes } from "../../src/errors.ts";
import type { AuthProfile } from "../../src/execute/auth-profiles.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import type { Executor } from "../../src/execute/executor.ts";
import type { InvocationRequest } from "../../src/pipeline/authorize.ts";
import { denyForError } from "../../src/pipeline/check.ts";
import {
  createEnforcementPipeline,
  type EnforcementPipeline,
  type PipelineOutcome,
  type UpstreamCall,
} from "../../src/pipeline/enforce.ts";
import { pipelineFailure } from "../../src/pipeline/failure.ts";
import type { DecisionRuntime } from "../../src/policy/runtime.ts";
import { SqliteStore } from "../../src/store/index.ts";
import { logs, type SubjectRecord } from "../../src/store/model.ts";
import {
  itemSnapshot,
  openTokenStore,
  secretTable,
  sendJson,
  startServer,
  type TestServer,
  type TokenStoreFixture,
} from "../execute/helpers.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { testExecutor } from "../helpers/execute-once.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";

const PARTNER = "partner-1";
const CAPABILITY = "items-api";
const SUBJECT = "agent-7";
const API_KEY = "key-0123456789abcdef";
const profile: AuthProfile = {
  type: "static",
  id: "profile-1",
  kind: "api_key",
  in: "header",
  name: "X-Api-Key",
  secretRef: "ref:api-key",
};

let upstream: TestServer;
let tokens: TokenStoreFixture;
let dir: TempDir;
let store: SqliteStore;
let recorder: AuditRecorder;

/** The catalog: `GET /items/{id}` (allowed), its literal sibling `GET /items/me`, `GET /ruled/{id}` with a rule. */
function operations(origin: string, constraints: unknown[] = []): OperationSnapshot[] {
  const item = itemSnapshot(origin, {
    parameter_constraints: constraints as OperationSnapshot["parameter_constraints"],
  });
  return [
    item,
    itemSnapshot(origin, {
      operation_id: "getMe",
      path: "/items/me",
      upstream_url_template: `${origin}/v1/items/me`,
      input_schema: { ...item.input_schema, path: { type: "object", properties: {} } },
    }),
    itemSnapshot(origin, {
      operation_id: "getRuled",
      path: "/ruled/{id}",
      upstream_url_template: `${origin}/v1/ruled/{id}`,
      response_rules: [{ path: "/card_number", mode: "mask", keep_last: 4 }],
    }),
  ];
}

function world(
  options: {
    constraints?: unknown[];
    rollout?: boolean;
    allowed?: string[];
    origin?: string;
    egressAllows?: string[];
  } = {},
) {
  const origin = options.origin ?? upstream.origin;
  const ops = operations(origin, options.constraints);
  const capability: Capability = {
    capability_id: CAPABILITY,
    partner_id: PARTNER,
    name: "Items",
    catalog_version: "2026-01-01",
    operations: ops,
  };
  const pid = (op: OperationSnapshot) => buildPermissionId(CAPABILITY, op.method, op.path);
  const allowed = options.allowed ?? ["/items/{id}", "/ruled/{id}"];
  const document: PolicyDocumentV1 = {
    schema_version: "authority-user-policy-v1",
    policy_version: "2026-05-01T00:00:00Z",
    subject: { subject_id: SUBJECT, subject_type: "agent", display_name: "bot" },
    expires_at: "2999-01-01T00:00:00Z",
    revoked_at: null,
    apis: [
      {
        capability_id: CAPABILITY,
        allowed_permission_ids: ops.filter((op) => allowed.includes(op.path)).map(pid),
        auth_profile_ref: "profile-1",
        operations: ops,
        response_redactions: {},
      },
    ],
  };
  const decisions: DecisionRuntime = {
    subjects: {
      get: async (id) =>
        id === SUBJECT
          ? ({
              subject_id: SUBJECT,
              partner_id: PARTNER,
              subject_type: "agent",
              identity: "partner_token",
            } as unknown as SubjectRecord)
          : undefined,
    },
    capabilities: {
      resolve: async (partnerId, id) => (partnerId === PARTNER && id === CAPABILITY ? capability : undefined),
    },
    policies: {
      load: async () => ({ policy: { ok: true, document } }),
      stats: () => ({ hits: 0, misses: 0, opens: 0, verificationFailures: 0 }),
      clear: () => undefined,
    },
    recorder,
    logOnly: { covers: async () => false },
    constraintsRollout: constraintsRolloutGate({
      enabled: options.rollout ?? true,
      partnerAllowlist: [PARTNER],
    }),
  } as DecisionRuntime;
  const executor = testExecutor({
    secretResolver: secretTable({ "ref:api-key": API_KEY }).resolve,
    tokenSetStore: tokens.tokenSetStore,
    constraintsRollout: decisions.constraintsRollout,
    egress: egressAllowing(options.egressAllows ?? [origin]),
    timeoutMs: 2000,
  });
  return { decisions, executor };
}

/** The stages as they run, seen through the pipeline's own dependencies. */
function traced(executor: Executor, stages: string[]): Pick<Executor, "send" | "rolloutFor"> {
  return {
    rolloutFor: (snapshot, partnerId) => {
      stages.push("constraints-rollout");
      return executor.rolloutFor(snapshot, partnerId);
    },
    send: (request) => {
      stages.push(`send ${request.prepared.url.pathname}`);
      return executor.send(request);
    },
  };
}

const request = (path = "/items/{id}"): Omit<InvocationRequest, "settleAllowLater"> => ({
  transport: "mcp",
  requestId: `req-${Math.random().toString(36).slice(2)}`,
  now: new Date(),
  actor: SUBJECT,
  subjectId: SUBJECT,
  authenticatedAs: { via: "bearer", partnerId: PARTNER, vouchable: false },
  capabilityId: CAPABILITY,
  method: "GET",
  path,
  pathIsTemplate: true,
});

function call(args: unknown, stages: string[], overrides: Partial<UpstreamCall> = {}): UpstreamCall {
  return {
    args: () => {
      stages.push("args");
      return args;
    },
    headers: (_decision, validated) => {
      stages.push(`headers ${JSON.stringify(validated.path)}`);
      return { "x-request-id": "r-1" };
    },
    authProfile: async () => {
      stages.push("auth-profile");
      return profile;
    },
    ...overrides,
  };
}

async function recordOf(requestId: string): Promise<DecisionAuditRecord[]> {
  assert.equal(await recorder.flush(5000), true);
  const entries = await store.readLog<DecisionAuditRecord>(logs.audit, { limit: 10_000 });
  return entries.map((entry) => entry.value).filter((value) => value.requestId === requestId);
}

/** A refusal after the decision: the table's reason and status, and one record saying denied. */
async function assertRefused(
  outcome: PipelineOutcome,
  requestId: string,
  code: keyof typeof errorCodes,
): Promise<void> {
  assert.equal(outcome.kind, "refused", JSON.stringify(outcome));
  if (outcome.kind !== "refused") return;
  assert.equal(outcome.error.code, code);
  assert.equal(outcome.error.status, errorCodes[code].status);
  assert.equal(outcome.recorded, true);
  const records = await recordOf(requestId);
  assert.equal(records.length, 1, "exactly one decision record");
  assert.equal(records[0]?.decision, "denied");
  assert.equal(records[0]?.reason, code);
  assert.equal(records[0]?.permission_id, outcome.decision.permissionId);
}

before(async () => {
  upstream = await startServer();
  tokens = await openTokenStore();
  dir = await makeTempDir("pipeline-");
  store = new SqliteStore({ path: join(dir.path, "authority.db"), sweepIntervalMs: 0 });
  recorder = createAuditRecorder({ store });
});
after(async () => {
  await recorder.close(5000);
  await store.close();
  await dir.cleanup();
  await tokens.close();
  await upstream.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  upstream.setHandler((req, res) => sendJson(res, 200, { ok: true, target: req.target }));
});

describe("the enforcement pipeline", () => {
  let pipeline: EnforcementPipeline;
  let stages: string[];
  const build = (options: Parameters<typeof world>[0] = {}) => {
    const { decisions, executor } = world(options);
    stages = [];
    pipeline = createEnforcementPipeline({ decisions, upstream: traced(executor, stages) });
  };

  test("runs its stages in order: decide → rollout gate → args → input, constraints, render, re-match → headers and profile → send → record the allow", async () => {
    build();
    const req = request();
    const outcome = await pipeline.run(req, call({ path: { id: "42" }, query: { limit: 5 } }, stages));
    assert.equal(outcome.kind, "completed", JSON.stringify(outcome));
    assert.deepEqual(stages, [
      "constraints-rollout",
      "args",
      'headers {"id":"42"}',
      "auth-profile",
      "send /v1/items/42",
    ]);
    assert.equal(upstream.requests.length, 1);
    assert.equal(upstream.requests[0]?.target, "/v1/items/42?limit=5");
    assert.equal(upstream.requests[0]?.headers["x-api-key"], API_KEY);
    const records = await recordOf(req.requestId);
    assert.equal(records.length, 1);
    assert.equal(records[0]?.decision, "allowed");
    assert.equal(records[0]?.permission_id, "items-api:get:/items/{id}");
  });

  test("a decision deny stops before any later stage and is recorded once as denied", async () => {
    build({ allowed: ["/ruled/{id}"] });
    const req = request();
    const outcome = await pipeline.run(req, call({ path: { id: "42" } }, stages));
    assert.equal(outcome.kind, "denied");
    assert.equal(outcome.authorization.outcome.status, "denied");
    assert.deepEqual(outcome.authorization.outcome, {
      status: "denied",
      reason: "operation_not_allowed",
      explanation: {
        rule: "decide/allowlist",
        remedy: { action: "request_permission", permission_id: "items-api:get:/items/{id}" },
      },
    });
    assert.equal(outcome.authorization.httpStatus, 403);
    assert.deepEqual(stages, []);
    assert.equal(upstream.requests.length, 0);
    const records = await recordOf(req.requestId);
    assert.deepEqual(
      records.map((r) => [r.decision, r.reason]),
      [["denied", "operation_not_allowed"]],
    );
  });

  test("a path value that re-matches a sibling literal is ambiguous_path before input, credentials or network", async () => {
    build();
    for (const id of ["me", "ME", "me;x=1", "me.json", "../me"]) {
      stages.length = 0;
      const req = request();
      const outcome = await pipeline.run(req, call({ path: { id } }, stages));
      await assertRefused(outcome, req.requestId, "ambiguous_path");
      assert.deepEqual(stages, ["constraints-rollout", "args"], id);
    }
    assert.equal(upstream.requests.length, 0);
  });

  test("input outside the snapshot's schema is invalid_input (400), nothing loaded or sent", async () => {
    build();
    const req = request();
    const outcome = await pipeline.run(req, call({ path: { id: "42" }, query: { limit: 1000 } }, stages));
    await assertRefused(outcome, req.requestId, "invalid_input");
    assert.deepEqual(stages, ["constraints-rollout", "args"]);
    assert.equal(upstream.requests.length, 0);
  });

  test("a routing override is invalid_input, never forwarded", async () => {
    build();
    const req = request();
    const args = { path: { id: "42" }, headers: { "x-http-method-override": "DELETE" } };
    const outcome = await pipeline.run(req, call(args, stages));
    await assertRefused(outcome, req.requestId, "invalid_input");
    assert.equal(upstream.requests.length, 0);
  });

  test("a signed constraint violated is constraint_violation (403)", async () => {
    const constraints = [{ in: "query", name: "region", required: true, allowed_values: ["eu"] }];
    build({ constraints });
    const req = request();
    await assertRefused(
      await pipeline.run(req, call({ path: { id: "42" }, query: { region: "us" } }, stages)),
      req.requestId,
      "constraint_violation",
    );
    assert.equal(upstream.requests.length, 0);
  });

  test("outside the rollout a constrained operation is the decision's operation_not_allowed: on authorize-invocation too, and before any argument is read", async () => {
    const constraints = [{ in: "query", name: "region", required: true, allowed_values: ["eu"] }];
    build({ constraints, rollout: false });
    // authorize-invocation never sees the arguments: it must refuse what every other path refuses.
    const asked = await pipeline.authorize({ ...request(), settleAllowLater: false });
    assert.deepEqual(asked.outcome, {
      status: "denied",
      reason: "operation_not_allowed",
      explanation: { rule: "decide/constraints-rollout" },
    });
    for (const query of [{ region: "eu" }, { region: 7 }]) {
      const req = request();
      const outcome = await pipeline.run(req, call({ path: { id: "42" }, query }, stages));
      assert.equal(outcome.kind, "denied", JSON.stringify(outcome));
      assert.deepEqual(outcome.authorization.outcome, {
        status: "denied",
        reason: "operation_not_allowed",
        explanation: { rule: "decide/constraints-rollout" },
      });
      const records = await recordOf(req.requestId);
      assert.deepEqual(
        records.map((r) => [r.decision, r.reason]),
        [["denied", "operation_not_allowed"]],
      );
    }
    assert.deepEqual(stages, []);
    assert.equal(upstream.requests.length, 0);
  });

  test("an auth profile that cannot be loaded, and an outage in the transport's headers, are upstream_unavailable (503)", async () => {
    build();
    let req = request();
    const noProfile = call({ path: { id: "42" } }, stages, {
      authProfile: async () => {
        throw new ExecutionError("auth_profile_unavailable");
      },
    });
    await assertRefused(await pipeline.run(req, noProfile), req.requestId, "upstream_unavailable");
    req = request();
    const envelopeDown = call({ path: { id: "42" } }, stages, {
      headers: () => {
        throw Object.assign(new Error("signer down"), { authorityCode: "upstream_unavailable" });
      },
    });
    await assertRefused(await pipeline.run(req, envelopeDown), req.requestId, "upstream_unavailable");
    assert.equal(upstream.requests.length, 0);
  });

  test("an unexpected fault in any stage is internal (500), recorded as denied, never an allow", async () => {
    build();
    const req = request();
    const faulty = call({ path: { id: "42" } }, stages, {
      headers: () => {
        throw new TypeError("boom");
      },
    });
    const outcome = await pipeline.run(req, faulty);
    await assertRefused(outcome, req.requestId, "internal");
    assert.equal(upstream.requests.length, 0);
  });

  test("failures after the send: unreachable upstream 503, redaction that cannot be done 502 — recorded denied, contacted", async () => {
    build();
    let req = request("/ruled/{id}");
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("card_number=4111111111111111");
    });
    let outcome = await pipeline.run(req, call({ path: { id: "7" } }, stages));
    await assertRefused(outcome, req.requestId, "redaction_failed");
    assert.equal(outcome.kind === "refused" && outcome.contacted, true);

    const closed = await startServer();
    await closed.close();
    const down = world({ origin: closed.origin });
    const unreachable = createEnforcementPipeline({ decisions: down.decisions, upstream: down.executor });
    req = request();
    outcome = await unreachable.run(req, call({ path: { id: "42" } }, []));
    await assertRefused(outcome, req.requestId, "upstream_unavailable");
    assert.equal(outcome.kind === "refused" && outcome.contacted, true);
  });

  test("a destination the egress policy refuses is egress_denied (403) before any secret or connection", async () => {
    for (const origin of ["http://169.254.169.254", "http://127.0.0.1:9"]) {
      const { decisions, executor } = world({ origin, egressAllows: [upstream.origin] });
      const secrets: string[] = [];
      const req = request();
      const outcome = await createEnforcementPipeline({ decisions, upstream: executor }).run(
        req,
        call({ path: { id: "42" } }, secrets),
      );
      await assertRefused(outcome, req.requestId, "egress_denied");
      assert.equal(outcome.kind === "refused" && outcome.contacted, false, origin);
    }
    assert.equal(upstream.requests.length, 0);
  });

  test("an audit that cannot take the record refuses before anything runs (503 upstream_unavailable)", async () => {
    const { decisions, executor } = world();
    const full: DecisionRuntime = { ...decisions, recorder: { ...recorder, accepting: () => false } };
    const local: string[] = [];
    const outcome = await createEnforcementPipeline({
      decisions: full,
      upstream: traced(executor, local),
    }).run(request(), call({ path: { id: "42" } }, local));
    assert.equal(outcome.kind, "denied");
    assert.deepEqual(outcome.authorization.outcome, { status: "denied", reason: "upstream_unavailable" });
    assert.equal(outcome.authorization.httpStatus, 503);
    assert.deepEqual(local, []);
  });
});

describe("one failure mapping for every path", () => {
  const samples: Array<[string, unknown, keyof typeof errorCodes]> = [
    ["a refusal keeps its code", new ExecutionError("constraint_violation"), "constraint_violation"],
    [
      "invalid constraint metadata",
      new ExecutionError("constraint_metadata_invalid"),
      "policy_verification_failed",
    ],
    ["an unreachable upstream", new ExecutionError("upstream_unreachable"), "upstream_unavailable"],
    [
      "an outage named by its module",
      Object.assign(new Error("x"), { authorityCode: "upstream_unavailable" }),
      "upstream_unavailable",
    ],
    ["a table error", new AuthorityError("egress_denied"), "egress_denied"],
    ["an unexpected fault", new TypeError("boom"), "internal"],
    ["a thrown non-error", "boom", "internal"],
  ];
  for (const [what, error, code] of samples) {
    test(`${what}: ${code} with the table's status, the same on the authority and the sidecar`, () => {
      const failure = pipelineFailure(error);
      assert.equal(failure.code, code);
      assert.equal(failure.status, errorCodes[code].status);
      const sidecar = denyForError(error, "r");
      assert.equal(sidecar.reason, code);
      assert.equal(sidecar.httpStatus, errorCodes[code].status);
    });
  }
});
