import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AGENT,
  CAPABILITY,
  deniedBody,
  headerMap,
  NO_POLICY_AGENT,
  type SidecarHandle,
  startWorld,
  UPSTREAM_SECRET,
  type World,
} from "./world.ts";

describe("sidecar ext_authz (grpc-js client from proto/, real authority, no Redis)", () => {
  let world: World;
  let sidecar: SidecarHandle;

  before(async () => {
    world = await startWorld();
    sidecar = await world.startSidecar();
    // As in a pod, traffic comes once the sidecar is ready (its warm-up is done).
    assert.equal(await sidecar.sidecar.whenReady(30_000), true);
  });
  after(() => world.close());

  test("allow: OkHttpResponse overwrites request id and permission id, injects the profile's key, removes the caller's Authorization", async () => {
    const response = await sidecar.check({ path: "/orders/42?expand=lines" });
    assert.equal(response.status.code, 0);
    assert.equal(response.http_response, "ok_response");
    const headers = headerMap(response);
    assert.equal(headers["x-authority-permission-id"], `${CAPABILITY}:get:/orders/{orderId}`);
    assert.match(headers["x-authority-request-id"] ?? "", /^req-[0-9a-f]{12}$/);
    assert.equal(headers["x-api-key"], UPSTREAM_SECRET);
    for (const option of response.ok_response.headers)
      assert.equal(option.append_action, "OVERWRITE_IF_EXISTS_OR_ADD");
    // The profile sends an API key, not a bearer: the caller's token must still not go upstream.
    assert.deepEqual(response.ok_response.headers_to_remove, ["authorization"]);
    const facts = response.dynamic_metadata.fields;
    assert.equal(facts.subject_id.stringValue, AGENT);
    assert.equal(facts.capability_id.stringValue, CAPABILITY);
    assert.equal(facts.permission_id.stringValue, `${CAPABILITY}:get:/orders/{orderId}`);
    assert.equal(facts.partner_id.stringValue, "acme");
    assert.equal(typeof facts.policy_head.numberValue, "number");
  });

  test("a second identical request is served from the caches (token, policy, catalog, credentials)", async () => {
    await sidecar.check({});
    const before = await sidecar.metricsText();
    const response = await sidecar.check({});
    assert.equal(response.http_response, "ok_response");
    const after = await sidecar.metricsText();
    const count = (text: string, series: string) =>
      Number(text.match(new RegExp(`^${series} (\\d+)`, "m"))?.[1] ?? 0);
    const cachedTokens = 'authority_sidecar_token_checks_total{result="cached"}';
    assert.equal(count(after, cachedTokens), count(before, cachedTokens) + 1);
    const localPolicy = 'authority_sidecar_cache_hits_total{kind="policy",layer="local"}';
    assert.equal(count(after, localPolicy), count(before, localPolicy) + 1);
  });

  test("a profile that sends its key in the query sets query_parameters_to_set", async () => {
    const { putAuthProfile } = await import("../../../src/admin/auth-profiles.ts");
    const { createSubject } = await import("../../../src/admin/subjects.ts");
    await putAuthProfile(world.context, "acme", "orders-query-key", {
      type: "static",
      kind: "api_key",
      in: "query",
      name: "api_key",
      secret: "query-secret-value",
    });
    await createSubject(world.context, "acme", {
      subject_id: "agent-query",
      subject_type: "agent",
      display_name: "q",
    });
    await world.assign("agent-query", { auth_profile_ref: "orders-query-key" });
    const response = await sidecar.check({ token: await world.token("agent-query") });
    assert.equal(response.http_response, "ok_response");
    assert.deepEqual(response.ok_response.query_parameters_to_set, [
      { key: "api_key", value: "query-secret-value" },
    ]);
    assert.deepEqual(response.ok_response.headers_to_remove, ["authorization"]);
    assert.equal(headerMap(response)["x-api-key"], undefined);
  });

  test("deny 403 with the reason when the operation exists but is not in the allowlist", async () => {
    const response = await sidecar.check({ method: "POST", path: "/orders" });
    assert.equal(response.http_response, "denied_response");
    assert.equal(response.denied_response.status.code, "Forbidden");
    assert.equal(response.status.code, 7);
    const body = deniedBody(response);
    assert.equal(body.status, "denied");
    assert.equal(body.reason, "operation_not_allowed");
    assert.match(body.requestId, /^req-/);
  });

  test("deny 403 unknown_operation for a path outside the catalog", async () => {
    const response = await sidecar.check({ path: "/admin/users" });
    assert.equal(deniedBody(response).reason, "unknown_operation");
    assert.equal(response.denied_response.status.code, "Forbidden");
  });

  test("401 missing_subject without a token, with a Bearer challenge", async () => {
    const response = await sidecar.check({ token: null });
    assert.equal(response.denied_response.status.code, "Unauthorized");
    assert.equal(response.status.code, 16);
    assert.equal(deniedBody(response).reason, "missing_subject");
    const challenge = response.denied_response.headers.find(
      (h: { header: { key: string } }) => h.header.key === "www-authenticate",
    );
    assert.equal(challenge?.header.value, 'Bearer realm="authority"');
  });

  test("401 invalid_token for a forged, a malformed or a wrong-audience token", async () => {
    const parts = world.tokens.agent.split(".");
    const forged = `${parts[0]}.${parts[1]}.${"A".repeat(86)}`;
    const wrongAudience = (await world.idp.issueToken({ subject: AGENT, audience: "someone-else" }))
      .accessToken;
    for (const authorization of [
      `Bearer ${forged}`,
      "Bearer not-a-jwt",
      "Basic dXNlcjpwYXNz",
      `Bearer ${wrongAudience}`,
    ]) {
      const response = await sidecar.check({ authorization });
      assert.equal(response.denied_response.status.code, "Unauthorized", authorization.slice(0, 12));
      assert.equal(deniedBody(response).reason, "invalid_token");
    }
  });

  test("missing capability: 400 missing_capability when neither context_extensions nor the map name one", async () => {
    const response = await sidecar.check({ capability: null, host: "unmapped.example" });
    assert.equal(response.denied_response.status.code, "BadRequest");
    assert.equal(deniedBody(response).reason, "missing_capability");
  });

  test("the capability map picks the capability by host when Envoy sends none", async () => {
    const response = await sidecar.check({ capability: null });
    assert.equal(response.http_response, "ok_response");
  });

  test("an unknown capability is 403 unknown_capability", async () => {
    const response = await sidecar.check({ capability: "no-such-api" });
    assert.equal(deniedBody(response).reason, "unknown_capability");
  });

  test("a subject without a policy is 403 missing_policy", async () => {
    const response = await sidecar.check({ token: world.tokens.noPolicyAgent });
    assert.equal(deniedBody(response).reason, "missing_policy");
    assert.equal(NO_POLICY_AGENT.length > 0, true);
  });

  test("expired policy: 403 policy_expired once expires_at has passed", async () => {
    const subject = "agent-expiring";
    const { createSubject } = await import("../../../src/admin/subjects.ts");
    await createSubject(world.context, "acme", {
      subject_id: subject,
      subject_type: "agent",
      display_name: subject,
    });
    await world.assign(subject, { ttl_seconds: 1 });
    const token = await world.token(subject);
    assert.equal((await sidecar.check({ token })).http_response, "ok_response");
    await new Promise((resolve) => setTimeout(resolve, 1200));
    const response = await sidecar.check({ token });
    assert.equal(deniedBody(response).reason, "policy_expired");
    assert.equal(response.denied_response.status.code, "Forbidden");
  });

  test("revoked policy: without Redis the deny arrives once the policy TTL (1 s) has passed", async () => {
    const subject = "agent-revoked-no-redis";
    const { createSubject } = await import("../../../src/admin/subjects.ts");
    await createSubject(world.context, "acme", {
      subject_id: subject,
      subject_type: "agent",
      display_name: subject,
    });
    await world.assign(subject, {});
    const token = await world.token(subject);
    assert.equal((await sidecar.check({ token })).http_response, "ok_response");
    assert.equal(await world.revoke(subject), 200);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const response = await sidecar.check({ token });
    assert.equal(deniedBody(response).reason, "policy_revoked");
  });

  test("an engine failure is never an allow: an unreachable authority is 503 upstream_unavailable", async () => {
    const { createAuthorityClient } = await import("../../../src/servers/sidecar/authority-client.ts");
    const { staticTokenSource } = await import("../../../src/servers/sidecar/service-token.ts");
    const broken = await world.startSidecar({
      authority: createAuthorityClient({
        baseUrl: "http://127.0.0.1:9",
        token: staticTokenSource(world.tokens.sidecar),
        timeoutMs: 500,
      }),
    });
    const response = await broken.check({});
    assert.equal(response.http_response, "denied_response");
    assert.equal(response.denied_response.status.code, "ServiceUnavailable");
    assert.equal(deniedBody(response).reason, "upstream_unavailable");
    await broken.close();
  });
});
