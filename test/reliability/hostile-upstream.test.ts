/**
 * A hostile upstream against every path that returns upstream responses: binding invoke,
 * broker execute, hosted MCP `tools/call` and the sidecar's forward proxy. The upstream
 * (test/helpers/echo-upstream.ts) echoes the credentials it was given — a Basic
 * `Authorization` header (whose password is a canary) and a query API key (a canary) — in
 * response headers, a redirect, text, JSON under innocuous names, \u-escaped JSON, base64,
 * URL-encoded HTML, UTF-16, binary and gzip, and in every encoding a client may decode (MIME
 * base64 in CRLF lines, base64url with spaces, HTML decimal, hex and named references,
 * percent-encoding of every byte, JavaScript escapes in a script, hex, quoted-printable, and
 * these nested or compressed); and it serves card numbers and passwords as BOM-prefixed JSON,
 * NDJSON, JSON with trailing bytes, NaN, UTF-16, JSONP (quoted and unquoted), HTML (raw and
 * escaped), JSON inside a JSON string or a base64 one, JSON under a text type, gzip and under
 * an unknown content coding. On every path the caller never sees a credential or an
 * unmasked value in anything a client could decode (`clientReadings`), and every body that
 * cannot be scrubbed or redacted is refused (502 `scrub_failed` / `redaction_failed`) — the
 * same answer on every path. The suite's leak watch scans every answer and log line for
 * canaries as well.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { canary } from "../helpers/canary.ts";
import {
  BODY_KINDS,
  type BodyKind,
  CARD_NUMBER,
  clientReadings,
  ECHO_KINDS,
  type EchoUpstream,
  hostileOpenApi,
  startEchoUpstream,
} from "../helpers/echo-upstream.ts";
import { assertNoLeaks, newCounts, report } from "../helpers/suite-report.ts";
import { AGENT, BINDING, PARTNER, type System, startSystem } from "../helpers/system.ts";

const counts = newCounts();
const PATHS = ["invoke", "broker", "mcp", "proxy"] as const;
type PathName = (typeof PATHS)[number];

interface Outcome {
  /** The upstream's answer reached the caller (after scrubbing and redaction). */
  readonly ok: boolean;
  /** The error code when refused. */
  readonly code: string | undefined;
  /** Everything the caller received: status, headers and body. */
  readonly seen: string;
}

interface Capability {
  readonly id: string;
  readonly prefix: string;
  readonly profile: string;
}

const BASIC: Capability = { id: "hostile", prefix: "hostileBasic", profile: "hostile-basic" };
const QUERY: Capability = { id: "hostileq", prefix: "hostileQuery", profile: "hostile-query" };

describe("a hostile upstream on invoke, broker, MCP and the proxy", () => {
  let system: System;
  let echo: EchoUpstream;
  let agent: string;
  let toolNames: Map<string, string>;
  const basicUser = "svc-echo";
  const basicPassword = canary("bpw-");
  const basicValue = `Basic ${Buffer.from(`${basicUser}:${basicPassword}`).toString("base64")}`;
  const queryKey = canary("qk-");
  const sensitivePassword = canary("pw-");

  /** Every spelling of every credential the caller must never see. */
  const forbidden = (): string[] => {
    const values = [
      basicValue,
      basicValue.slice(6),
      `${basicUser}:${basicPassword}`,
      basicPassword,
      queryKey,
      system.secrets.upstreamApiKey,
    ];
    return values.flatMap((v) => [v, encodeURIComponent(v), Buffer.from(v).toString("base64").slice(0, -4)]);
  };

  before(async () => {
    echo = await startEchoUpstream();
    // Exactly the hostile upstream is added to the egress allowance, as a platform admin would.
    system = await startSystem({ sidecar: {}, egressAllowAlso: [echo.url] });
    echo.password = sensitivePassword;
    const admin = async (method: string, path: string, body: unknown, status: number) => {
      const reply = await system.call(method, `${system.url}${path}`, {
        token: await system.adminToken(),
        json: body,
        expectsSecrets: true,
      });
      assert.equal(reply.status, status, `${method} ${path}: ${reply.text}`);
      return reply;
    };
    await admin(
      "PUT",
      `/partners/${PARTNER}/caab/auth-profiles/${BASIC.profile}`,
      { type: "static", kind: "api_key", in: "header", name: "authorization", secret: basicValue },
      201,
    );
    await admin(
      "PUT",
      `/partners/${PARTNER}/caab/auth-profiles/${QUERY.profile}`,
      { type: "static", kind: "api_key", in: "query", name: "api_key", secret: queryKey },
      201,
    );
    const binding = system.binding;
    assert.ok(binding);
    for (const capability of [BASIC, QUERY]) {
      await admin(
        "POST",
        `/partners/${PARTNER}/api-specs/import-openapi`,
        {
          capability_id: capability.id,
          name: capability.id,
          document: hostileOpenApi(capability.prefix),
          upstream_base_url: echo.url,
          auth_profile_ref: capability.profile,
        },
        201,
      );
      const allowed = ["echo", "plain", "ruled"].map((group) => `${capability.id}:get:/${group}/{kind}`);
      await admin(
        "PUT",
        `/partners/${PARTNER}/caab/subjects/${AGENT}/policies/${capability.id}`,
        { allowed_permission_ids: allowed, ttl_seconds: 3600 },
        200,
      );
      await admin(
        "POST",
        `/v1/bindings/${BINDING}/apis`,
        {
          subject_id: binding.subjectId,
          capability_id: capability.id,
          allowed_permission_ids: allowed,
          ttl_seconds: 3600,
        },
        200,
      );
    }
    agent = await system.agentToken();
    const listed = await system.mcp("tools/list", {}, agent);
    assert.equal(listed.status, 200, listed.text);
    toolNames = new Map(
      (listed.json.result.tools as Array<{ name: string }>).map((tool) => [
        tool.name.replace(/_[^_]+$/, ""),
        tool.name,
      ]),
    );
  });
  after(async () => {
    await echo?.close();
    await system?.close();
  });

  function toolFor(capability: Capability, group: string): string {
    const operation = `${capability.prefix}${group[0]?.toUpperCase()}${group.slice(1)}`;
    const name = [...toolNames.entries()].find(
      ([base]) => base === operation || base.startsWith(operation),
    )?.[1];
    assert.ok(name, `no MCP tool for ${operation} among ${[...toolNames.keys()].join(", ")}`);
    return name;
  }

  async function through(
    path: PathName,
    capability: Capability,
    group: string,
    kind: string,
  ): Promise<Outcome> {
    const upstreamPath = `/${group}/${kind}`;
    const operation = { capability_id: capability.id, method: "GET", path: upstreamPath };
    counts.attacksTried++;
    switch (path) {
      case "invoke":
      case "broker": {
        const reply =
          path === "invoke"
            ? await system.invoke(operation)
            : await system.call("POST", `${system.url}/v1/broker/execute`, {
                token: await system.workloadToken(undefined, "authority/authority.broker.execute"),
                json: operation,
                headers: { "x-authority-user-assertion": await system.userAssertion() },
              });
        const seen = `${reply.status} ${JSON.stringify(reply.headers)} ${reply.text}`;
        if (reply.status === 200) return { ok: true, code: undefined, seen };
        return { ok: false, code: reply.json?.error, seen };
      }
      case "mcp": {
        const reply = await system.mcp(
          "tools/call",
          { name: toolFor(capability, group), arguments: { path: { kind } } },
          agent,
        );
        assert.equal(reply.status, 200, reply.text);
        const result = reply.json.result;
        const seen = `${reply.status} ${JSON.stringify(reply.headers)} ${reply.text}`;
        if (result.structuredContent !== undefined) return { ok: true, code: undefined, seen };
        return { ok: false, code: JSON.parse(result.content[0].text).error, seen };
      }
      case "proxy": {
        const proxyPort = system.sidecar?.proxyPort;
        assert.ok(proxyPort);
        const reply = await system.call("GET", `http://127.0.0.1:${proxyPort}${upstreamPath}`, {
          headers: {
            host: "hostile.internal",
            "proxy-authorization": `Bearer ${agent}`,
            "x-authority-capability": capability.id,
          },
        });
        const seen = `${reply.status} ${JSON.stringify(reply.headers)} ${reply.text}`;
        if (reply.status < 500 && reply.json?.status !== "error") return { ok: true, code: undefined, seen };
        return { ok: false, code: reply.json?.reason, seen };
      }
    }
  }

  function assertNoCredential(outcome: Outcome, what: string): void {
    // UTF-16 and UTF-32 echoes read as text keep their NULs between the characters.
    const flat = outcome.seen.replaceAll("\u0000", "").replaceAll("\\u0000", "");
    for (const value of forbidden()) {
      assert.equal(flat.includes(value), false, `${what}: a credential reached the caller`);
    }
    // Whatever a client could decode out of the answer (one or two decodings deep).
    const secrets = [basicPassword, queryKey, system.secrets.upstreamApiKey];
    for (const reading of clientReadings(flat)) {
      for (const value of secrets) {
        assert.equal(reading.includes(value), false, `${what}: an encoded credential reached the caller`);
      }
    }
  }

  for (const path of PATHS) {
    test(`${path}: echoed credentials never reach the caller, in any spelling`, async () => {
      for (const capability of [BASIC, QUERY]) {
        for (const kind of ECHO_KINDS) {
          const outcome = await through(path, capability, "echo", kind);
          const what = `${path} ${capability.id} echo/${kind}`;
          // Base64 of JSON: a client decoding it reads members redaction never saw, so one with
          // a sensitive name (the echoed `authorization` or `x-api-key`) refuses the answer.
          const refusable = kind === "base64" && outcome.code === "redaction_failed";
          assert.ok(outcome.ok || refusable, `${what}: ${outcome.seen.slice(0, 400)}`);
          assertNoCredential(outcome, what);
        }
      }
    });

    test(`${path}: sensitive bodies are redacted whatever their encoding, or refused`, async () => {
      const expected: Record<
        BodyKind,
        "masked" | "masked_without_rules" | "redaction_failed" | "scrub_failed" | "passes_without_rules"
      > = {
        json: "masked",
        bom: "masked",
        ndjson: "masked",
        trailing: "redaction_failed",
        nan: "redaction_failed",
        utf16: "masked",
        // JSON under a text type: masked by default; an operation's rules need a JSON type.
        "utf16-charset": "masked_without_rules",
        gzip: "masked",
        "unknown-encoding": "scrub_failed",
        // JSON inside what is not plain JSON: a client would read the card number out of it.
        jsonp: "redaction_failed",
        html: "redaction_failed",
        "html-escaped": "redaction_failed",
        "jsonp-unquoted": "redaction_failed",
        "json-in-string": "redaction_failed",
        "json-base64-string": "redaction_failed",
        "json-text-plain": "masked_without_rules",
        "html-clean": "passes_without_rules",
      };
      for (const group of ["plain", "ruled"] as const) {
        for (const kind of BODY_KINDS) {
          const what = `${path} ${group}/${kind}`;
          let want = expected[kind];
          if (want === "masked_without_rules") want = group === "ruled" ? "redaction_failed" : "masked";
          if (want === "passes_without_rules") {
            if (group === "ruled") want = "redaction_failed";
            else {
              // A non-JSON answer with nothing a client could read as a sensitive member passes.
              const outcome = await through(path, BASIC, group, kind);
              assert.equal(outcome.ok, true, `${what}: ${outcome.seen.slice(0, 300)}`);
              assert.ok(outcome.seen.includes("order-1 has shipped"), what);
              assertNoCredential(outcome, what);
              continue;
            }
          }
          const outcome = await through(path, BASIC, group, kind);
          assertNoCredential(outcome, what);
          const flat = outcome.seen.replaceAll("\u0000", "");
          for (const reading of clientReadings(flat)) {
            assert.equal(reading.includes(CARD_NUMBER), false, `${what}: the card number came back in full`);
            assert.equal(reading.includes(sensitivePassword), false, `${what}: the password came back`);
          }
          if (want === "masked") {
            assert.equal(outcome.ok, true, `${what}: ${outcome.seen.slice(0, 300)}`);
            assert.ok(flat.includes(group === "ruled" ? "************1111" : "****************"), what);
          } else {
            assert.equal(outcome.ok, false, `${what} must be refused: ${outcome.seen.slice(0, 300)}`);
            assert.equal(outcome.code, want, what);
            assert.ok(
              outcome.seen.startsWith(path === "mcp" ? "200 " : "502 "),
              `${what}: ${outcome.seen.slice(0, 80)}`,
            );
          }
        }
      }
    });
  }

  test("auth profiles whose secret is too short to scrub are refused when configured", async () => {
    const put = async (body: unknown) =>
      system.call("PUT", `${system.url}/partners/${PARTNER}/caab/auth-profiles/too-short`, {
        token: await system.adminToken(),
        json: body,
      });
    const shortOnes: unknown[] = [
      { type: "static", kind: "api_key", in: "header", name: "x-api-key", secret: "k-12345" },
      { type: "static", kind: "bearer", secret: "tok-123" },
      {
        type: "static",
        kind: "api_key",
        in: "header",
        name: "authorization",
        secret: `Basic ${Buffer.from("a-long-service-user:pw-1").toString("base64")}`,
      },
    ];
    for (const body of shortOnes) {
      const reply = await put(body);
      assert.equal(reply.status, 400, reply.text);
      assert.equal(reply.json.error, "invalid_request");
      assert.equal(reply.json.details.field, "secret");
      counts.attacksTried++;
    }
    assert.equal((await put({ type: "static", kind: "bearer", secret: canary("long-enough-") })).status, 201);
  });

  test("the upstream did receive the credentials it echoed (the attack was real)", () => {
    // Invoke and broker inject the binding's auth profile (an x-api-key canary); MCP and the
    // proxy the capability's (Basic, or the query key).
    const apiKey = system.secrets.upstreamApiKey;
    const echoes = echo.hits.filter((hit) => hit.path.startsWith("/echo/"));
    assert.equal(echoes.length, PATHS.length * 2 * ECHO_KINDS.length);
    for (const hit of echoes) {
      const carried =
        hit.headers.authorization === basicValue ||
        hit.query.includes(`api_key=${encodeURIComponent(queryKey)}`) ||
        hit.headers["x-api-key"] === apiKey;
      assert.ok(carried, `${hit.path} carried no credential`);
    }
    assert.ok(echoes.some((hit) => hit.headers.authorization === basicValue));
    assert.ok(echoes.some((hit) => hit.query.includes(queryKey)));
    assert.ok(echoes.some((hit) => hit.headers["x-api-key"] === apiKey));
  });

  test("no canary, secret or token in any log line or response; summary", (t) => {
    const scanned = assertNoLeaks(system);
    report(t, "hostile-upstream", counts, `responses scanned: ${scanned.responses}`);
  });
});
