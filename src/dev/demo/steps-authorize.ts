/**
 * Demo sections on the authority service itself: what the admin API shows, then
 * `POST /v1/authorize-invocation` allowed, and denied once for each deny reason a caller
 * can reach from outside.
 */

import { readStoredPolicyRecord } from "../../policy/record-store.ts";
import { collections } from "../../store/model.ts";
import {
  DEV_BOUNDARY_ID,
  DEV_CAPABILITY,
  DEV_IDP,
  DEV_NOT_ALLOWED_PERMISSION,
  DEV_PARTNER,
  DEV_SUBJECTS,
  type DevSubjectRole,
} from "../names.ts";
import { type DemoContext, field, isRecord } from "./context.ts";

const TAMPERED_SUBJECT = "agent-tampered";

export async function adminSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  report.section(
    "Admin API (seeded data)",
    "An admin token from the identity provider (password grant of the dev admin account).",
  );
  const auth = { authorization: `Bearer ${await ctx.adminToken()}` };
  const partners = await ctx.json("GET", `${env.urls.authority}/partners`, { headers: auth });
  const ids =
    isRecord(partners.body) && Array.isArray(partners.body.items)
      ? partners.body.items.map((p) => field(p, "partner_id"))
      : [];
  report.check({
    label: "GET /partners",
    expected: `200, includes ${DEV_PARTNER.partnerId}`,
    actual: `${partners.status}, ${ids.join(", ") || "no partners"}`,
    ok: partners.status === 200 && ids.includes(DEV_PARTNER.partnerId),
  });
  const agent = DEV_SUBJECTS.agent.subjectId;
  const policy = await ctx.json(
    "GET",
    `${env.urls.authority}/partners/${DEV_PARTNER.partnerId}/caab/subjects/${agent}/policy`,
    { headers: auth },
  );
  const body = isRecord(policy.body) ? policy.body : {};
  const allowed = Array.isArray(body.capabilities)
    ? body.capabilities.flatMap((c) =>
        isRecord(c) && Array.isArray(c.allowed_permission_ids) ? c.allowed_permission_ids : [],
      )
    : [];
  report.check({
    label: `GET policy of ${agent}`,
    expected: "active, encrypted, artifact never shown",
    actual: `${field(body, "state")}${body.encrypted_present === true ? ", encrypted" : ""}${"artifact" in body ? ", ARTIFACT SHOWN" : ", artifact never shown"}`,
    ok:
      policy.status === 200 &&
      body.state === "active" &&
      body.encrypted_present === true &&
      !("artifact" in body),
    detail: `allows: ${allowed.join(", ")}\nnot allowed (in the catalog): ${DEV_NOT_ALLOWED_PERMISSION}`,
  });
  await egressSection(ctx, auth);
}

/**
 * The egress policy at import: a document whose server is the authority service itself, or
 * the cloud metadata address, is refused with 400 and the rule — the sample API's one
 * address:port is the only internal destination this environment allows.
 */
async function egressSection(ctx: DemoContext, auth: Record<string, string>): Promise<void> {
  const targets = [
    {
      label: "the authority's own port",
      url: ctx.env.urls.authority,
      rule: "a service of the platform itself",
    },
    {
      label: "the cloud metadata address",
      url: "http://169.254.169.254/latest",
      rule: "a cloud metadata address",
    },
  ];
  for (const target of targets) {
    const answer = await ctx.json(
      "POST",
      `${ctx.env.urls.authority}/partners/${DEV_PARTNER.partnerId}/api-specs/import-openapi`,
      {
        headers: auth,
        body: {
          capability_id: "egress-probe",
          name: "Egress probe",
          auth_profile_ref: "none",
          document: {
            openapi: "3.1.0",
            info: { title: "probe", version: "1" },
            servers: [{ url: target.url }],
            paths: {
              "/partners": { get: { operationId: "probe", responses: { "200": { description: "ok" } } } },
            },
          },
        },
      },
    );
    const details = isRecord(answer.body) && isRecord(answer.body.details) ? answer.body.details : {};
    const problems = Array.isArray(details.problems) ? details.problems : [];
    const message = problems.map((p) => field(p, "message")).join("; ");
    ctx.report.check({
      label: `import with the server at ${target.label}`,
      expected: "400, refused by the egress policy",
      actual: `${answer.status}, ${field(details, "reason")}`,
      ok: answer.status === 400 && details.reason === "egress_denied" && message.includes(target.rule),
      detail: message,
    });
  }
}

interface AuthorizeCase {
  readonly label: string;
  readonly token: string | undefined;
  readonly body: Record<string, unknown>;
  readonly expected: string;
  readonly status: number;
}

async function authorize(ctx: DemoContext, c: AuthorizeCase): Promise<void> {
  const answer = await ctx.json("POST", `${ctx.env.urls.authority}/v1/authorize-invocation`, {
    headers: c.token === undefined ? {} : { authorization: `Bearer ${c.token}` },
    body: c.body,
  });
  const outcome =
    field(answer.body, "status") === "allowed"
      ? `allowed ${field(answer.body, "permissionId")}`
      : `denied ${field(answer.body, "reason")}`;
  ctx.report.check({
    label: c.label,
    expected: `${c.expected} (${c.status})`,
    actual: `${outcome} (${answer.status})`,
  });
}

/**
 * A subject of its own whose stored artifact the demo corrupts by one byte — in the demo's
 * temporary store, never in a real one — so decrypt-and-verify must fail.
 */
async function tamperedSubjectToken(ctx: DemoContext): Promise<string> {
  const { env } = ctx;
  const auth = { authorization: `Bearer ${await ctx.adminToken()}` };
  const base = `${env.urls.authority}/partners/${DEV_PARTNER.partnerId}`;
  const created = await ctx.json("POST", `${base}/users`, {
    headers: auth,
    body: {
      subject_id: TAMPERED_SUBJECT,
      subject_type: "agent",
      display_name: "Agent whose artifact gets tampered with",
      boundary_id: DEV_BOUNDARY_ID,
    },
  });
  if (created.status !== 201 && created.status !== 409)
    throw new Error(`creating the subject answered ${created.status}`);
  const assigned = await ctx.json(
    "PUT",
    `${base}/caab/subjects/${TAMPERED_SUBJECT}/policies/${DEV_CAPABILITY.capabilityId}`,
    {
      headers: auth,
      body: { allowed_permission_ids: [`${DEV_CAPABILITY.capabilityId}:get:/customers`], ttl_seconds: 3600 },
    },
  );
  if (assigned.status !== 200) throw new Error(`assigning the policy answered ${assigned.status}`);
  // Someone with write access to the store flips one bit of the stored artifact.
  const record = await readStoredPolicyRecord(env.store, TAMPERED_SUBJECT);
  if (record === undefined || record.artifact_sha256 === undefined)
    throw new Error("the policy record is missing");
  const artifact = await env.store.get<string>(collections.policyArtifacts, record.artifact_sha256);
  if (artifact === undefined) throw new Error("the policy artifact is missing");
  const bytes = Buffer.from(artifact, "base64");
  const at = Math.floor(bytes.length / 2);
  bytes[at] = (bytes[at] ?? 0) ^ 0x01;
  await env.store.put(collections.policyArtifacts, record.artifact_sha256, bytes.toString("base64"));
  return (await env.idp.issueToken({ subject: TAMPERED_SUBJECT })).accessToken;
}

/**
 * Subject squatting: acme's partner admin names a subject after the platform admin's `sub`
 * and gives it a policy. The platform admin's own token must still have no subject
 * (docs/decisions/0701-subject-ownership.md); returns that token.
 */
async function squattedPlatformAdminToken(ctx: DemoContext): Promise<string> {
  const { env } = ctx;
  const partnerAdmin = await env.idp.issueToken({
    subject: DEV_IDP.serviceAccountUsername,
    roles: ["partner_admin"],
    claims: { partner_id: DEV_PARTNER.partnerId },
  });
  const auth = { authorization: `Bearer ${partnerAdmin.accessToken}` };
  const base = `${env.urls.authority}/partners/${DEV_PARTNER.partnerId}`;
  const squat = DEV_IDP.adminUsername;
  const created = await ctx.json("POST", `${base}/users`, {
    headers: auth,
    body: { subject_id: squat, subject_type: "agent", display_name: "Named after the platform admin" },
  });
  if (created.status !== 201 && created.status !== 409)
    throw new Error(`creating the squatting subject answered ${created.status}`);
  const assigned = await ctx.json(
    "PUT",
    `${base}/caab/subjects/${squat}/policies/${DEV_CAPABILITY.capabilityId}`,
    {
      headers: auth,
      body: { allowed_permission_ids: [`${DEV_CAPABILITY.capabilityId}:get:/customers`], ttl_seconds: 3600 },
    },
  );
  if (assigned.status !== 200) throw new Error(`assigning the squatting policy answered ${assigned.status}`);
  return ctx.adminToken();
}

export async function authorizeSection(ctx: DemoContext): Promise<void> {
  const { report } = ctx;
  report.section(
    "POST /v1/authorize-invocation",
    "Each agent authenticates with its own client credentials; the subject is the token's `sub`.\n" +
      "The verdict comes from its signed, encrypted policy (decrypt-and-verify through the crypto service).",
  );
  const token = (role: DevSubjectRole) => ctx.subjectToken(role);
  const agent = await token("agent");
  const capability = DEV_CAPABILITY.capabilityId;
  const call = (method: string, path: string, extra: Record<string, unknown> = {}) => ({
    capability_id: capability,
    method,
    path,
    ...extra,
  });
  await authorize(ctx, {
    label: "agent-demo      GET /customers/cus_00000001",
    token: agent,
    body: call("GET", "/customers/cus_00000001"),
    expected: `allowed ${capability}:get:/customers/{customerId}`,
    status: 200,
  });
  report.note("Denied, once for every reason a caller can reach:");
  const cases: AuthorizeCase[] = [
    {
      label: "no token        GET /customers",
      token: undefined,
      body: call("GET", "/customers"),
      expected: "denied missing_subject",
      status: 401,
    },
    {
      label: "agent-demo      GET /customers, no capability_id",
      token: agent,
      body: { method: "GET", path: "/customers" },
      expected: "denied missing_capability",
      status: 400,
    },
    {
      label: "agent-demo      capability payroll",
      token: agent,
      body: { capability_id: "payroll", method: "GET", path: "/customers" },
      expected: "denied unknown_capability",
      status: 403,
    },
    {
      label: "agent-unassigned GET /customers (no policy)",
      token: await token("unassigned"),
      body: call("GET", "/customers"),
      expected: "denied missing_policy",
      status: 403,
    },
    {
      label: "dev-admin       GET /customers (acme named a subject after it)",
      token: await squattedPlatformAdminToken(ctx),
      body: call("GET", "/customers"),
      expected: "denied missing_policy",
      status: 403,
    },
    {
      label: "agent-tampered  GET /customers (artifact altered)",
      token: await tamperedSubjectToken(ctx),
      body: call("GET", "/customers"),
      expected: "denied policy_verification_failed",
      status: 403,
    },
    {
      label: "agent-demo      asks as subject agent-revoked",
      token: agent,
      body: call("GET", "/customers", { subject: { subject_id: DEV_SUBJECTS.revoked.subjectId } }),
      expected: "denied subject_mismatch",
      status: 403,
    },
    {
      label: "agent-revoked   GET /customers",
      token: await token("revoked"),
      body: call("GET", "/customers"),
      expected: "denied policy_revoked",
      status: 403,
    },
    {
      label: "agent-expired   GET /customers",
      token: await token("expired"),
      body: call("GET", "/customers"),
      expected: "denied policy_expired",
      status: 403,
    },
    {
      label: "agent-demo      GET /orders (not in the catalog)",
      token: agent,
      body: call("GET", "/orders"),
      expected: "denied unknown_operation",
      status: 403,
    },
    {
      label: "agent-demo      DELETE /customers/cus_00000001",
      token: agent,
      body: call("DELETE", "/customers/cus_00000001"),
      expected: "denied operation_not_allowed",
      status: 403,
    },
    {
      label: "agent-demo      GET /customers/Me (routes to GET /customers/me upstream)",
      token: agent,
      body: call("GET", "/customers/Me"),
      expected: "denied ambiguous_path",
      status: 403,
    },
  ];
  for (const c of cases) await authorize(ctx, c);
}
