/**
 * Demo section on acting for the user (docs/admin-api.md, "User grants"): a user OAuth profile
 * (authorization code + PKCE, public client) at the sample API's own OAuth provider (a second
 * dev IdP); the admin starts the demo agent's grant, the provider signs it in and redirects
 * back, the admin completes it; one MCP call then carries that user's own token (the sample
 * API answers who signed in); after a disconnect the call is refused: connect first. Last
 * section: it moves the agent's policy onto the user's profile.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { buildPermissionId } from "../../core/permission-id.ts";
import { toolNameFor } from "../../core/tool-name.ts";
import { DEV_ALLOWED_PERMISSIONS, DEV_CAPABILITY, DEV_PARTNER, DEV_SUBJECTS } from "../names.ts";
import { type DemoContext, field, isRecord } from "./context.ts";

const PROFILE = "customers-user";
/** Never contacted: the demo stops at the provider's redirect and reads code and state. */
const REDIRECT_URI = "http://127.0.0.1:9/demo/oauth/callback";
const ME = buildPermissionId(DEV_CAPABILITY.capabilityId, "GET", "/customers/me");

/** The user agent's part: the provider signs the dev user in and redirects back. */
async function followToCallback(authorizationUrl: string): Promise<URL | undefined> {
  const answer = await fetch(authorizationUrl, { redirect: "manual", signal: AbortSignal.timeout(10_000) });
  await answer.body?.cancel();
  const location = answer.headers.get("location");
  return location === null ? undefined : new URL(location, authorizationUrl);
}

export async function userGrantSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  report.section(
    "Acting for the user (oauth_user: authorization code + PKCE)",
    "The sample API's own OAuth provider signs the demo agent's user in. The user's token set is\nsealed at rest and never shown; calls made for the user carry the user's own token.",
  );
  const admin = { authorization: `Bearer ${await ctx.adminToken()}` };
  const idp = env.userOAuthProvider;
  const partner = DEV_PARTNER.partnerId;
  const subject = DEV_SUBJECTS.agent.subjectId;
  const registered = await ctx.json("POST", `${idp}/oauth2/register`, {
    body: { redirect_uris: [REDIRECT_URI], client_name: "authority demo (user grants)" },
  });
  const put = await ctx.json(
    "PUT",
    `${env.urls.authority}/partners/${partner}/caab/auth-profiles/${PROFILE}`,
    {
      headers: admin,
      body: {
        type: "oauth_user",
        authorization_url: `${idp}/oauth2/authorize`,
        token_url: `${idp}/oauth2/token`,
        client_id: field(registered.body, "client_id"),
        scopes: [],
        redirect_uri: REDIRECT_URI,
      },
    },
  );
  report.check({
    label: `PUT …/auth-profiles/${PROFILE} (public client)`,
    expected: "201",
    actual: String(put.status),
  });

  const grant = `${env.urls.authority}/partners/${partner}/caab/auth-profiles/${PROFILE}/grants/${subject}`;
  const started = await ctx.json("POST", `${grant}/start`, { headers: admin, body: {} });
  const authorizationUrl = field(started.body, "authorization_url");
  const challenge =
    authorizationUrl === "-" ? null : new URL(authorizationUrl).searchParams.get("code_challenge_method");
  report.check({
    label: `POST …/grants/${subject}/start`,
    expected: "201, authorization URL with S256",
    actual: `${started.status}${challenge === "S256" ? ", authorization URL with S256" : ", no S256 challenge"}`,
  });
  const callback = authorizationUrl === "-" ? undefined : await followToCallback(authorizationUrl);
  const done = await ctx.json("POST", `${grant}/complete`, {
    headers: admin,
    body: {
      state: callback?.searchParams.get("state") ?? "-",
      code: callback?.searchParams.get("code") ?? "-",
    },
  });
  const shown = JSON.stringify(done.body);
  report.check({
    label: "POST …/complete (the callback's code)",
    expected: "connected, no token shown",
    actual:
      done.status === 200 && isRecord(done.body) && done.body.connected === true
        ? `connected${/eyJ/.test(shown) ? ", TOKEN SHOWN" : ", no token shown"}`
        : `${done.status} ${field(done.body, "error")}`,
  });

  // The agent's policy names the user's profile (this section runs last: nothing after it
  // relies on the API key profile).
  const assigned = await ctx.json(
    "PUT",
    `${env.urls.authority}/partners/${partner}/caab/subjects/${subject}/policies/${DEV_CAPABILITY.capabilityId}`,
    {
      headers: admin,
      body: {
        allowed_permission_ids: [...DEV_ALLOWED_PERMISSIONS, ME],
        ttl_seconds: 3600,
        auth_profile_ref: PROFILE,
      },
    },
  );
  if (assigned.status !== 200 && assigned.status !== 201) {
    report.check({
      label: "assign GET /customers/me with the user's profile",
      expected: "200",
      actual: String(assigned.status),
    });
    return;
  }
  const client = new Client({ name: "authority-demo-user", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${env.urls.authority}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${await ctx.subjectToken("agent")}` } },
    }),
  );
  try {
    const tool = toolNameFor(ME, "getCurrentCustomer");
    const result = await client.callTool({ name: tool, arguments: {} });
    const structured = isRecord(result.structuredContent) ? result.structuredContent : {};
    const body = isRecord(structured.body) ? structured.body : {};
    report.check({
      label: `tools/call ${tool}`,
      expected: `upstream 200, signed in as ${subject}`,
      actual: `upstream ${String(structured.status ?? "-")}, signed in as ${String(body.signed_in_as ?? "nobody")}`,
    });
    const gone = await ctx.json("DELETE", grant, { headers: admin });
    report.check({ label: "DELETE …/grants (disconnect)", expected: "200", actual: String(gone.status) });
    const after = await client.callTool({ name: tool, arguments: {} });
    const text = JSON.stringify(after.content);
    report.check({
      label: `tools/call ${tool} after the disconnect`,
      expected: "refused user_grant_required (connect first)",
      actual:
        after.isError === true && text.includes("user_grant_required")
          ? "refused user_grant_required (connect first)"
          : "RAN",
    });
  } finally {
    await client.close();
  }
}
