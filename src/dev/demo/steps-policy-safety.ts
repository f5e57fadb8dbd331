/**
 * Demo section on changing policy safely and trusting the record (issue 34): a shadow policy
 * that disagrees with the enforced one (its record and its metric), an explained denial (the
 * Deny body's rule and remedy, the admin explain trace), a what-if replay of a proposed change
 * (`dry_run`), and the decision chain exported, verified, and a tampered copy refused with the
 * record named. Its own subject, so no other section's policy changes.
 */
import { execFile } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { DEV_BOUNDARY_ID, DEV_CAPABILITY, DEV_PARTNER, DEV_SERVICE_IDENTITY } from "../names.ts";
import { type DemoContext, field, type HttpAnswer, isRecord } from "./context.ts";

const SUBJECT = "agent-shadow";
const capability = DEV_CAPABILITY.capabilityId;
const LIST = `${capability}:get:/customers`;
const READ_ONE = `${capability}:get:/customers/{customerId}`;

interface Admin {
  readonly auth: Record<string, string>;
  readonly base: string;
}

function expectStatus(answer: HttpAnswer, status: number, what: string): void {
  if (answer.status !== status) throw new Error(`${what} answered ${answer.status}`);
}

const recordOf = (body: unknown): Record<string, unknown> => (isRecord(body) ? body : {});

/** The subject, its enforced policy (list and read one) and a narrower shadow (list only). */
async function subjectWithShadow(ctx: DemoContext, admin: Admin): Promise<string> {
  const created = await ctx.json("POST", `${admin.base}/users`, {
    headers: admin.auth,
    body: {
      subject_id: SUBJECT,
      subject_type: "agent",
      display_name: "Agent with a shadow policy",
      boundary_id: DEV_BOUNDARY_ID,
    },
  });
  if (created.status !== 201 && created.status !== 409)
    throw new Error(`creating the subject answered ${created.status}`);
  const assignment = `${admin.base}/caab/subjects/${SUBJECT}/policies/${capability}`;
  const enforced = await ctx.json("PUT", assignment, {
    headers: admin.auth,
    body: { allowed_permission_ids: [LIST, READ_ONE], ttl_seconds: 3600 },
  });
  expectStatus(enforced, 200, "assigning the enforced policy");
  const shadow = await ctx.json("PUT", `${assignment}/shadow`, {
    headers: admin.auth,
    body: { allowed_permission_ids: [LIST], ttl_seconds: 3600 },
  });
  ctx.report.check({
    label: `PUT …/${SUBJECT}/policies/${capability}/shadow`,
    expected: "200, shadow allows only GET /customers",
    actual: `${shadow.status}${shadow.status === 200 ? ", shadow allows only GET /customers" : ""}`,
  });
  return (await ctx.env.idp.issueToken({ subject: SUBJECT })).accessToken;
}

async function authorize(ctx: DemoContext, token: string, method: string, path: string): Promise<HttpAnswer> {
  return ctx.json("POST", `${ctx.env.urls.authority}/v1/authorize-invocation`, {
    headers: { authorization: `Bearer ${token}` },
    body: { capability_id: capability, method, path },
  });
}

/** Stores the queued records and seals them (`POST /admin/audit/checkpoints`). */
async function seal(ctx: DemoContext, admin: Admin): Promise<void> {
  const sealed = await ctx.json("POST", `${ctx.env.urls.authority}/admin/audit/checkpoints`, {
    headers: admin.auth,
  });
  expectStatus(sealed, 200, "sealing the chains");
}

/** The disagreement, its record and its metric; returns the record's id. */
async function shadowDisagreement(ctx: DemoContext, admin: Admin, token: string): Promise<string> {
  const { report } = ctx;
  const answer = await authorize(ctx, token, "GET", "/customers/cus_00000001");
  const receipt = answer.headers.get("x-authority-receipt") ?? "";
  report.check({
    label: `${SUBJECT}    GET /customers/cus_00000001 (enforced)`,
    expected: `allowed ${READ_ONE}`,
    actual: `${field(answer.body, "status")} ${field(answer.body, "permissionId")}`,
  });
  await seal(ctx, admin);
  const found = await ctx.json(
    "GET",
    `${ctx.env.urls.authority}/admin/audit/receipts/${encodeURIComponent(receipt)}`,
    { headers: admin.auth },
  );
  const shadow = recordOf(recordOf(found.body).shadow);
  report.check({
    label: "its record (GET /admin/audit/receipts/{receipt}): shadow",
    expected: "shadow denied operation_not_allowed, agrees=false",
    actual: `shadow ${field(shadow, "decision")} ${field(shadow, "reason")}, agrees=${field(shadow, "agrees")}`,
    detail: `receipt ${receipt}; the enforced outcome acted, the shadow was only recorded`,
  });
  const metrics = await ctx.json("GET", `${ctx.env.urls.authority}/metrics`, { headers: admin.auth });
  const text = typeof metrics.body === "string" ? metrics.body : "";
  const disagreements = text
    .split("\n")
    .filter((line) => line.startsWith("authority_shadow_decisions_total{") && /disagree/.test(line));
  report.check({
    label: "GET /metrics: authority_shadow_decisions_total",
    expected: "a disagreement counted",
    actual:
      disagreements.length > 0 ? "a disagreement counted" : `no disagreement series (${metrics.status})`,
    ...(disagreements.length > 0 ? { detail: disagreements.join("\n") } : {}),
  });
  return field(found.body, "id");
}

async function explainedDenial(ctx: DemoContext, admin: Admin, token: string): Promise<void> {
  const { report } = ctx;
  const answer = await authorize(ctx, token, "DELETE", "/customers/cus_00000001");
  const remedy = recordOf(recordOf(answer.body).remedy);
  report.check({
    label: `${SUBJECT}    DELETE /customers/cus_00000001`,
    expected: "denied operation_not_allowed, with a rule and a remedy",
    actual: `denied ${field(answer.body, "reason")}, rule ${field(answer.body, "rule")}, remedy ${field(remedy, "action")}`,
    ok:
      field(answer.body, "reason") === "operation_not_allowed" &&
      field(answer.body, "rule") !== "-" &&
      field(remedy, "action") !== "-",
    detail: `the Deny body: rule ${field(answer.body, "rule")}, remedy ${JSON.stringify(remedy)}`,
  });
  const trace = await ctx.json("POST", `${admin.base}/explain`, {
    headers: admin.auth,
    body: {
      subject_id: SUBJECT,
      capability_id: capability,
      method: "DELETE",
      path: "/customers/cus_00000001",
    },
  });
  const steps: unknown[] = Array.isArray(recordOf(trace.body).steps)
    ? (recordOf(trace.body).steps as unknown[])
    : [];
  const result = recordOf(recordOf(trace.body).result);
  const deniedAt = field(
    steps.find((s) => field(s, "outcome") === "denied"),
    "step",
  );
  report.check({
    label: "POST /partners/acme/explain (same request, nothing executed)",
    expected: "explain trace: denied at decision, operation_not_allowed",
    actual: `explain trace: ${field(result, "status")} at ${deniedAt}, ${field(result, "reason")}`,
    detail: steps
      .map(
        (s) =>
          `${field(s, "step").padEnd(13)} ${field(s, "outcome")}${field(s, "reason") === "-" ? "" : ` (${field(s, "reason")})`}`,
      )
      .join("\n"),
  });
}

async function whatIfReplay(ctx: DemoContext, admin: Admin): Promise<void> {
  const answer = await ctx.json(
    "PUT",
    `${admin.base}/caab/subjects/${SUBJECT}/policies/${capability}?dry_run=true`,
    { headers: admin.auth, body: { allowed_permission_ids: [LIST], ttl_seconds: 3600 } },
  );
  const replay = recordOf(recordOf(answer.body).replay);
  const toDeny = recordOf(replay.allow_to_deny);
  const toAllow = recordOf(replay.deny_to_allow);
  const examples = Array.isArray(toDeny.examples) ? toDeny.examples : [];
  ctx.report.check({
    label: "PUT …/policies/customers?dry_run=true (only GET /customers)",
    expected: "replay report: allow_to_deny 1, deny_to_allow 0",
    actual: `replay report: allow_to_deny ${field(toDeny, "count")}, deny_to_allow ${field(toAllow, "count")}`,
    detail: [
      `records ${field(answer.body, "records")}, replayed ${field(replay, "replayed")}, unchanged ${field(replay, "unchanged")}, skipped ${JSON.stringify(replay.skipped ?? {})}; nothing applied`,
      ...examples.map(
        (e) =>
          `flip: ${field(e, "method")} ${field(e, "path")} allowed → denied ${field(recordOf(recordOf(e).replayed), "reason")}`,
      ),
    ].join("\n"),
  });
}

/** A copy of the export with the record `id` says "denied" where it said "allowed"; its line (1-based). */
function tampered(lines: readonly string[], id: string): { lines: string[]; line: number } {
  const index = lines.findIndex((line) => {
    const entry = JSON.parse(line) as unknown;
    return isRecord(entry) && entry.type === "record" && field(entry.value, "id") === id;
  });
  const original = lines[index];
  if (original === undefined || !original.includes('"decision":"allowed"'))
    throw new Error(`the export holds no allowed record ${id}`);
  const copy = [...lines];
  copy[index] = original.replace('"decision":"allowed"', '"decision":"denied"');
  return { lines: copy, line: index + 1 };
}

const CLI = fileURLToPath(new URL("../../../bin/authority.ts", import.meta.url));

/** Runs `authority <args>` as a user would: its exit code and standard output. */
async function authorityCli(args: readonly string[]): Promise<{ code: number; stdout: string }> {
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [CLI, ...args], { timeout: 30_000 });
    return { code: 0, stdout };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: unknown };
    if (typeof failed.code !== "number") throw error;
    return { code: failed.code, stdout: String(failed.stdout ?? "") };
  }
}

/** The command's first line of output, and its exit code. */
const outcomeOf = (run: { code: number; stdout: string }): string =>
  `${run.stdout.split("\n")[0] ?? ""} (exit ${run.code})`;

async function verifiedChain(ctx: DemoContext, admin: Admin, recordId: string): Promise<void> {
  const { env, report } = ctx;
  await seal(ctx, admin);
  const file = (name: string) => join(env.stateDir, name);
  const exported = await authorityCli([
    "audit",
    "export",
    "--store",
    `sqlite:${file("authority.db")}`,
    "--out",
    file("audit-export.jsonl"),
  ]);
  if (exported.code !== 0) throw new Error(`authority audit export exited ${exported.code}`);
  const published = await ctx.json(
    "GET",
    `${env.urls.crypto}/v1/owners/${encodeURIComponent(`service:${DEV_SERVICE_IDENTITY}`)}/public-keys`,
    { headers: admin.auth },
  );
  expectStatus(published, 200, "reading the service identity's public keys");
  await writeFile(file("service-keys.json"), JSON.stringify(published.body));
  const verify = (name: string) =>
    authorityCli(["audit", "verify", file(name), "--keys", file("service-keys.json"), "--require-sealed"]);
  const verified = await verify("audit-export.jsonl");
  report.check({
    label: "authority audit export, then audit verify --require-sealed",
    expected: "verified (exit 0)",
    actual: verified.code === 0 ? "verified (exit 0)" : outcomeOf(verified),
    detail: `${outcomeOf(verified)}\nkeys: the service identity's public keys, as the crypto service publishes them`,
  });
  const lines = (await readFile(file("audit-export.jsonl"), "utf8")).trimEnd().split("\n");
  const copy = tampered(lines, recordId);
  await writeFile(file("audit-export-tampered.jsonl"), `${copy.lines.join("\n")}\n`);
  const broken = await verify("audit-export-tampered.jsonl");
  const named = broken.stdout
    .split("\n")
    .some((line) => line.startsWith(`FAILED (modified) at line ${copy.line}:`));
  report.check({
    label: "audit verify of a copy with that allow turned into a deny",
    expected: `FAILED (modified) at line ${copy.line}, exit 1`,
    actual: named && broken.code === 1 ? `FAILED (modified) at line ${copy.line}, exit 1` : outcomeOf(broken),
    detail: `${recordId} is line ${copy.line}; ${outcomeOf(broken)}`,
  });
}

export async function policySafetySection(ctx: DemoContext): Promise<void> {
  ctx.report.section(
    "Changing policy safely, trusting the record",
    "A shadow policy decided beside the enforced one, an explained denial, a what-if replay of a\n" +
      "change before it is applied, and the decision chain verified offline with the public key.",
  );
  const admin: Admin = {
    auth: { authorization: `Bearer ${await ctx.adminToken()}` },
    base: `${ctx.env.urls.authority}/partners/${DEV_PARTNER.partnerId}`,
  };
  const token = await subjectWithShadow(ctx, admin);
  const recordId = await shadowDisagreement(ctx, admin, token);
  await explainedDenial(ctx, admin, token);
  await whatIfReplay(ctx, admin);
  await verifiedChain(ctx, admin, recordId);
}
