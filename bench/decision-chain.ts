/**
 * The decision chain's cost per record (docs/decisions/2681): CPU per `link()` — the canonical
 * JSON and SHA-256 of the record with its link — for a decision record (authorize-invocation),
 * a Check's record as the authority links it when its sidecar ships it, an MCP audit row with
 * 4 KB representations and an evidence record; the receipt a response carries; and one checkpoint signature (ML-DSA-65,
 * embedded key ring), paid once per interval, not per decision. Target: ≤ 10 µs CPU per decision.
 */
import { CHAINED_LOGS, createChainLinker, EMPTY_HEAD } from "../src/audit/chain.ts";
import { evidenceRecord, mcpAuditRecord } from "../src/audit/mcp-records.ts";
import { receiptOf } from "../src/audit/receipts.ts";
import { decisionRecord } from "../src/audit/records.ts";
import { KeyRing } from "../src/crypto/index.ts";
import { keyRingCheckpointSigner } from "../src/servers/authority/checkpoint-signers.ts";
import { logs } from "../src/store/model.ts";
import { cpuPerCall } from "./lib/cpu-per-call.ts";

export interface ChainBenchRow {
  name: string;
  /** Mean CPU µs per operation (user + system). */
  cpuUs: number;
  wallUs: number;
}

async function measure(name: string, iterations: number, fn: () => unknown): Promise<ChainBenchRow> {
  return { name, ...(await cpuPerCall(iterations, fn)) };
}

export async function benchDecisionChain(iterations = 100_000): Promise<ChainBenchRow[]> {
  const heads = Object.fromEntries(CHAINED_LOGS.map((log) => [log, EMPTY_HEAD])) as Parameters<
    typeof createChainLinker
  >[0]["heads"];
  const linker = createChainLinker({ stream: "bench-replica", heads });
  const time = new Date("2026-06-01T00:00:00Z");
  /** One allowed call, as either path records it. */
  const allowed = {
    actor: "agent-7",
    subject_id: "agent-7",
    partner_id: "partner-1",
    capability_id: "billing-api",
    method: "GET",
    path: "/invoices/inv_000123",
    permission_id: "billing-api:GET:/invoices/{id}",
    decision: "allowed",
  } as const;
  const decision = decisionRecord({
    ...allowed,
    transport: "http",
    requestId: "req-bench-000000000001",
    time,
  });
  const big = { items: Array.from({ length: 80 }, (_, i) => ({ id: `item_${i}`, note: "x".repeat(32) })) };
  const mcp = mcpAuditRecord({
    actor: "agent-7",
    subject_id: "agent-7",
    partner_id: "partner-1",
    capability_id: "billing-api",
    tool: "list_invoices",
    permission_id: "billing-api:GET:/invoices",
    method: "GET",
    url: "https://api.example.com/v1/invoices",
    status: 200,
    duration_ms: 12.5,
    request: big,
    response: big,
    requestId: "req-bench-000000000002",
    time,
  });
  const evidence = evidenceRecord({
    binding_id: "binding-1",
    actor: "agent-7",
    subject_id: "agent-7",
    partner_id: "partner-1",
    capability_id: "billing-api",
    permission_id: "billing-api:GET:/invoices/{id}",
    decision: "allowed",
    request: { id: "inv_000123" },
    response: big,
    requestId: "req-bench-000000000003",
    time,
  });
  // A Check's record as the authority links it at ingest: shipped by a sidecar (its id and
  // time), transport grpc, with the subject's shadow noted beside it.
  const check = decisionRecord(
    {
      ...allowed,
      reason: null,
      transport: "grpc",
      requestId: "5f0c2b8e-8a53-4c4c-9d3a-1f6b2f0e9a11",
      time,
      shadow: { decision: "denied", reason: "operation_not_allowed", agrees: false },
    },
    "dec_5f0c2b8e-8a53-4c4c-9d3a-1f6b2f0e9a12",
  );
  const ring = KeyRing.generate({ owner: "service:authority" });
  const signing = keyRingCheckpointSigner(async () => ring);
  const authorizeLink = await measure("link a decision record (audit)", iterations, () =>
    linker.link(logs.audit, decision),
  );
  const checkLink = await measure(
    "link a Check's record (shipped by a sidecar, grpc, shadow noted)",
    iterations,
    () => linker.link(logs.audit, check),
  );
  const receipt = await measure(
    "a response's receipt (authorize header; the sidecar per answered Check)",
    iterations,
    () => receiptOf(logs.audit, decision),
  );
  const perDecision = (path: string, link: ChainBenchRow): ChainBenchRow => ({
    name: `  per ${path} decision: chain + receipt (target ≤ 10)`,
    cpuUs: Number((link.cpuUs + receipt.cpuUs).toFixed(3)),
    wallUs: Number((link.wallUs + receipt.wallUs).toFixed(3)),
  });
  return [
    authorizeLink,
    checkLink,
    receipt,
    perDecision("authorize", authorizeLink),
    perDecision("Check", checkLink),
    await measure("link an MCP audit row (4 KB request and response)", iterations / 10, () =>
      linker.link(logs.mcpAudit, mcp),
    ),
    await measure("link an evidence record", iterations, () => linker.link(logs.evidence, evidence)),
    await measure("sign one checkpoint (ML-DSA-65, once per interval)", Math.max(20, iterations / 1000), () =>
      signing.sign('{"heads":{}}'),
    ),
  ];
}
