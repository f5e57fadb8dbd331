/**
 * Demo section on the headless partner flow: the partner backend's workload token (binding
 * scoped), the portal user's access token as the user assertion, `POST
 * /v1/bindings/{id}/invoke` against the sample API — which itself asks
 * `/v1/authority/verify` about the envelope it received — with the response redacted; then
 * a denied operation and a rejected assertion, neither of which reaches the upstream; and
 * the binding's end-user experience (create, narrow, disable, remove).
 */
import { randomUUID } from "node:crypto";
import { requestToken } from "../../identity/token-client.ts";
import { DEV_CAPABILITY, DEV_IDP } from "../names.ts";
import { type DemoContext, field, isRecord } from "./context.ts";

function basic(id: string, secret: string): string {
  const encode = (value: string) => encodeURIComponent(value).replace(/%20/g, "+");
  return `Basic ${Buffer.from(`${encode(id)}:${encode(secret)}`).toString("base64")}`;
}

/** Values at a path like ["result", "body", "items", 0, "card_number"], as text. */
function dig(value: unknown, path: readonly (string | number)[]): string {
  let current: unknown = value;
  for (const key of path) {
    if (typeof key === "number") current = Array.isArray(current) ? current[key] : undefined;
    else current = isRecord(current) ? current[key] : undefined;
  }
  return current === undefined ? "(absent)" : String(current);
}

export async function bindingSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  const binding = env.binding;
  report.section(
    "Headless binding invoke (POST /v1/bindings/{id}/invoke)",
    "The partner backend calls with its binding-scoped workload token and the portal user's access\n" +
      "token (X-Authority-User-Assertion); the authority derives the subject from issuer + sub, checks its\n" +
      "v2 policy, injects the API key, attaches an envelope and redacts. The sample API verifies the\n" +
      "envelope with POST /v1/authority/verify before it answers.",
  );
  if (binding === undefined) {
    report.error(
      "binding seeded",
      new Error(env.warnings.find((w) => w.includes("binding")) ?? "no binding"),
    );
    return;
  }
  const base = `${env.urls.authority}/v1/bindings/${binding.bindingId}`;
  const workloadToken = await fetch(`${base}/token`, {
    method: "POST",
    headers: {
      authorization: basic(binding.workloadClientId, binding.workloadClientSecret),
      "content-type": "application/x-www-form-urlencoded",
    },
    body: "grant_type=client_credentials&scope=authority%2Fbindings.invoke",
  });
  const issued = (await workloadToken.json()) as { access_token?: string; scope?: string };
  report.check({
    label: `workload token for ${binding.bindingId}`,
    expected: "200 scope authority/bindings.invoke",
    actual: `${workloadToken.status} scope ${issued.scope ?? "-"}`,
  });
  const user = await requestToken({
    tokenUrl: env.urls.tokenEndpoint,
    grant: {
      type: "client_credentials",
      clientId: DEV_IDP.endUserClientId,
      clientSecret: env.secrets.endUserClientSecret,
    },
  });
  report.note(
    `user assertion: the identity provider's access token for "${binding.externalSubject}" (aud ${binding.audience})`,
  );

  const invoke = (body: unknown, assertion: string) =>
    ctx.json("POST", `${base}/invoke`, {
      headers: {
        authorization: `Bearer ${issued.access_token ?? ""}`,
        "x-authority-user-assertion": assertion,
        "idempotency-key": randomUUID(),
      },
      body,
    });
  const before = env.sampleApi.received.length;
  const allowed = await invoke(
    {
      capability_id: DEV_CAPABILITY.capabilityId,
      method: "GET",
      path: "/customers/cus_00000002/payment-methods",
    },
    user.accessToken,
  );
  const upstream = env.sampleApi.received.slice(before);
  const seen = upstream[upstream.length - 1];
  report.check({
    label: "alice  GET /customers/cus_00000002/payment-methods",
    expected: "allowed, upstream 200",
    actual: `${field(allowed.body, "status")}, upstream ${dig(allowed.body, ["result", "status"])}`,
    ok:
      allowed.status === 200 &&
      field(allowed.body, "status") === "allowed" &&
      dig(allowed.body, ["result", "status"]) === "200",
    detail:
      `card_number ${dig(allowed.body, ["result", "body", "items", 0, "card_number"])}, ` +
      `cvc ${dig(allowed.body, ["result", "body", "items", 0, "cvc"])} (redacted by the policy's rules)\n` +
      `evidence ${field(allowed.body, "evidenceId")}`,
  });
  report.check({
    label: "sample API asked POST /v1/authority/verify",
    expected: "envelope verified (200)",
    actual:
      seen === undefined
        ? "the upstream was not called"
        : seen.hadEnvelope
          ? `envelope ${seen.verifyStatus === 200 ? "verified" : `refused: ${seen.verifyError ?? "?"}`} (${seen.verifyStatus ?? "-"})`
          : "no envelope",
  });
  const countBefore = env.sampleApi.received.length;
  const denied = await invoke(
    { capability_id: DEV_CAPABILITY.capabilityId, method: "DELETE", path: "/customers/cus_00000002" },
    user.accessToken,
  );
  report.check({
    label: "alice  DELETE /customers/cus_00000002",
    expected: "denied operation_not_allowed (403), upstream not called",
    actual: `${field(denied.body, "status")} ${field(denied.body, "reason")} (${denied.status}), upstream ${
      env.sampleApi.received.length === countBefore ? "not called" : "CALLED"
    }`,
  });
  // GET /customers/me is in the catalog but not allowed: a value the upstream would route there.
  const sneakyBefore = env.sampleApi.received.length;
  const sneaky = await invoke(
    {
      capability_id: DEV_CAPABILITY.capabilityId,
      permission_id: `${DEV_CAPABILITY.capabilityId}:get:/customers/{customerId}`,
      arguments: { path: { customerId: "Me" } },
    },
    user.accessToken,
  );
  report.check({
    label: "alice  GET /customers/{customerId} with customerId Me",
    expected: "denied ambiguous_path (403), upstream not called",
    actual: `${field(sneaky.body, "status")} ${field(sneaky.body, "reason")} (${sneaky.status}), upstream ${
      env.sampleApi.received.length === sneakyBefore ? "not called" : "CALLED"
    }`,
  });
  const noCapability = await invoke({ method: "GET", path: "/customers" }, user.accessToken);
  report.check({
    label: "alice  GET /customers, no capability_id",
    expected: "denied missing_capability (400)",
    actual: `${field(noCapability.body, "status")} ${field(noCapability.body, "reason")} (${noCapability.status})`,
  });
  await experienceSteps(ctx, base, (body) => invoke(body, user.accessToken));
  const agentToken = await ctx.subjectToken("agent");
  const rejected = await invoke(
    { capability_id: DEV_CAPABILITY.capabilityId, method: "GET", path: "/customers" },
    agentToken,
  );
  report.check({
    label: "an agent's token as the user assertion",
    expected: "invalid_user_assertion (401)",
    actual: `${field(rejected.body, "error")} (${rejected.status})`,
  });
}

/**
 * The binding experience lifecycle: the partner shows its users only the saved-cards tool;
 * a tool the policy allows but the experience hides is denied, a disabled experience denies
 * everything, and removing it gives the policy alone the say again.
 */
async function experienceSteps(
  ctx: DemoContext,
  base: string,
  invoke: (body: unknown) => Promise<{ status: number; body: unknown }>,
): Promise<void> {
  const { report } = ctx;
  const admin = { authorization: `Bearer ${await ctx.adminToken()}` };
  const capability = DEV_CAPABILITY.capabilityId;
  const cards = { capability_id: capability, method: "GET", path: "/customers/cus_00000002/payment-methods" };
  const outcome = (answer: { status: number; body: unknown }) =>
    `${field(answer.body, "status")}${field(answer.body, "reason") === "-" ? "" : ` ${field(answer.body, "reason")}`} (${answer.status})`;
  report.note(
    "Experience: what the partner's users see of the binding. It can only narrow the policy: a hidden\n" +
      "tool or a disabled experience is denied operation_not_allowed; removing it restores the policy alone.",
  );
  const put = await ctx.json("PUT", `${base}/experience`, {
    headers: admin,
    body: {
      display_name: "Acme portal assistant",
      capabilities: [
        {
          capability_id: capability,
          tools: [
            {
              permission_id: `${capability}:get:/customers/{customerId}/payment-methods`,
              display_name: "Saved cards",
              description: "The payment methods on file for a customer",
            },
          ],
        },
      ],
      consent: { text: "The assistant may read your saved payment methods.", version: "1" },
    },
  });
  report.check({
    label: "PUT …/experience (only Saved cards)",
    expected: "201 or 200, enabled",
    actual: `${put.status}, ${field(put.body, "enabled") === "true" ? "enabled" : "not enabled"}`,
    ok: (put.status === 201 || put.status === 200) && field(put.body, "enabled") === "true",
    detail: `revision ${field(put.body, "revision")}`,
  });
  report.check({
    label: "alice  Saved cards",
    expected: "allowed (200)",
    actual: outcome(await invoke(cards)),
  });
  report.check({
    label: "alice  GET /customers/cus_00000002 (policy allows, experience hides)",
    expected: "denied operation_not_allowed (403)",
    actual: outcome(
      await invoke({ capability_id: capability, method: "GET", path: "/customers/cus_00000002" }),
    ),
  });
  const disabled = await ctx.json("PATCH", `${base}/experience`, {
    headers: admin,
    body: { enabled: false },
  });
  report.check({
    label: "PATCH …/experience enabled=false",
    expected: "200",
    actual: String(disabled.status),
  });
  report.check({
    label: "alice  Saved cards, experience disabled",
    expected: "denied operation_not_allowed (403)",
    actual: outcome(await invoke(cards)),
  });
  const removed = await ctx.json("DELETE", `${base}/experience`, { headers: admin });
  report.check({ label: "DELETE …/experience", expected: "200", actual: String(removed.status) });
  report.check({
    label: "alice  GET /customers/cus_00000002, no experience",
    expected: "allowed (200)",
    actual: outcome(
      await invoke({ capability_id: capability, method: "GET", path: "/customers/cus_00000002" }),
    ),
  });
}
