/**
 * A governed downstream's progress and log notifications reach the caller of an allowed
 * tools/call (2026-07-28 through the SDK 2.x client, 2025-11-25 through the SDK 1.x client),
 * and only in the form the result would: the attacks are a downstream that writes the
 * credential the gateway injected into a progress message or a log line (scrubbed), that
 * floods (bounded per call, the rest counted), that addresses the caller's own progress token
 * (never relayed: it only ever sees the gateway's), a log line showing a member the tool's
 * redaction rules name (dropped and counted), and a call the policy denies (nothing).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  type CallToolResult,
  Client,
  LOG_LEVEL_META_KEY,
  type LoggingMessageNotification,
  type Progress,
  StreamableHTTPClientTransport,
} from "@modelcontextprotocol/client";
import { Client as LegacyClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as LegacyTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { putAuthProfile } from "../../../../src/admin/auth-profiles.ts";
import { importMcpServer, previewMcpServer } from "../../../../src/admin/mcp-servers.ts";
import { assignCapability } from "../../../../src/admin/policies.ts";
import { createSubject } from "../../../../src/admin/subjects.ts";
import {
  DROPPED_NOTIFICATIONS_META,
  MAX_RELAYED_NOTIFICATIONS,
} from "../../../../src/mcp/notification-relay.ts";
import { type DownstreamMcp, startDownstreamMcp } from "../../../helpers/downstream-mcp.ts";
import { ALLOWED_ORIGIN, type Harness, PARTNER, startHarness } from "./harness.ts";

const CAP = "chatty";
const SECRET = "relay-key-5d81c0e2b7";
const FLOOD = 1000;
const noArgs = { type: "object" as const, properties: {} };
const done = (text: string): CallToolResult => ({ content: [{ type: "text", text }] });

let h: Harness;
let d: DownstreamMcp;

before(async () => {
  d = await startDownstreamMcp(
    [
      { name: "leaky", description: "Reports progress and logs, badly.", inputSchema: noArgs },
      { name: "flood", description: "Never stops talking.", inputSchema: noArgs },
      { name: "impostor", description: "Reports on the caller's token.", inputSchema: noArgs },
      { name: "unassigned", description: "Not in anyone's policy.", inputSchema: noArgs },
    ],
    {
      async leaky(_args, context) {
        await context.notify("notifications/progress", {
          progressToken: context.progressToken,
          progress: 1,
          total: 2,
          message: `using ${SECRET}`,
        });
        await context.notify("notifications/message", { level: "debug", data: "debug line" });
        await context.notify("notifications/message", {
          level: "error",
          logger: "leaky",
          data: { note: `key is ${SECRET}`, api_token: "tok-123456789" },
        });
        await context.notify("notifications/message", { level: "warning", data: `x-api-key: ${SECRET}` });
        // A member the tool's redaction rule names (in the result): such a line is not sent at all.
        await context.notify("notifications/message", {
          level: "error",
          data: { customer_ssn: "123-45-6789" },
        });
        return done("leaked nothing");
      },
      async flood(_args, context) {
        for (let i = 0; i < FLOOD; i++) {
          await context.notify("notifications/progress", {
            progressToken: context.progressToken,
            progress: i,
          });
          await context.notify("notifications/message", { level: "error", data: `line ${i}` });
        }
        return done("flooded");
      },
      async impostor(_args, context) {
        await context.notify("notifications/progress", { progressToken: "caller-token-1", progress: 1 });
        await context.notify("notifications/progress", { progressToken: 0, progress: 2 });
        await context.notify("notifications/progress", { progressToken: context.progressToken, progress: 3 });
        return done("impostor");
      },
      unassigned: () => done("should never run"),
    },
  );
  h = await startHarness({
    mcp: { allowedOrigins: [ALLOWED_ORIGIN], upstreamTimeoutMs: 20_000 },
    egressAllow: [d.url],
  });
  await putAuthProfile(h.context, PARTNER, "chatty-key", {
    type: "static",
    kind: "api_key",
    in: "header",
    name: "x-api-key",
    secret: SECRET,
  });
  const lister = h.context.mcp.downstreamTools;
  const source = {
    url: d.url,
    auth_profile_ref: "chatty-key",
    capability_id: CAP,
    tool_rules: {
      leaky: { "x-authority-redactions": [{ path: "/structuredContent/customer_ssn", mode: "mask" }] },
    },
  };
  const preview = await previewMcpServer(h.context, PARTNER, source, lister);
  await importMcpServer(
    h.context,
    h.actor,
    PARTNER,
    { ...source, name: "Chatty", catalog_hash: preview.catalog_hash },
    lister,
  );
  await createSubject(h.context, PARTNER, {
    subject_id: "agent-n",
    subject_type: "agent",
    display_name: "n",
  });
  await assignCapability(h.context, h.actor, PARTNER, "agent-n", CAP, {
    allowed_permission_ids: ["leaky", "flood", "impostor"].map((tool) => `${CAP}:post:/tools/${tool}`),
    ttl_seconds: 3600,
  });
});

after(async () => {
  await h.close();
  await d.close();
});

/** The SDK 2.x client pinned to 2026-07-28, recording every notification it receives. */
async function modernAgent(): Promise<{ client: Client; logs: LoggingMessageNotification["params"][] }> {
  const client = new Client(
    { name: "agent", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  const logs: LoggingMessageNotification["params"][] = [];
  client.setNotificationHandler("notifications/message", (notification) => {
    logs.push(notification.params);
  });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${await h.token("agent-n")}` } },
    }),
  );
  return { client, logs };
}

async function callWith(client: Client, name: string, logLevel?: string) {
  const progress: Progress[] = [];
  const result = (await client.callTool(
    { name, arguments: {}, ...(logLevel === undefined ? {} : { _meta: { [LOG_LEVEL_META_KEY]: logLevel } }) },
    { onprogress: (update) => progress.push(update), timeout: 30_000 },
  )) as CallToolResult;
  return { result, progress };
}

test("2026-07-28: the injected credential in a progress message or a log line is scrubbed; log lines at or above the request's level", async () => {
  const { client, logs } = await modernAgent();
  try {
    const { result, progress } = await callWith(client, "leaky", "info");
    assert.equal(result.isError, undefined, JSON.stringify(result));
    assert.equal(progress.length, 1);
    assert.equal(progress[0]?.progress, 1);
    assert.equal(progress[0]?.total, 2);
    assert.ok(typeof progress[0]?.message === "string" && progress[0].message.startsWith("using "));
    assert.deepEqual(
      logs.map((line) => line.level),
      ["error", "warning"],
      "the debug line is below the level the request asked for",
    );
    const relayed = JSON.stringify({ progress, logs });
    assert.ok(!relayed.includes(SECRET), `the injected credential was relayed: ${relayed}`);
    const masked = logs[0]?.data as { api_token?: string } | undefined;
    assert.notEqual(masked?.api_token, "tok-123456789", "default sensitive-field masking");
    assert.equal(typeof masked?.api_token, "string");
    assert.equal(logs[0]?.logger, "leaky");
    assert.ok(!relayed.includes("123-45-6789"));
    assert.deepEqual(
      result._meta?.[DROPPED_NOTIFICATIONS_META],
      { limit: 0, scrub: 1 },
      "dropped and counted",
    );

    // Without a level in the request, a 2026-07-28 caller gets no log lines at all.
    logs.length = 0;
    await callWith(client, "leaky");
    assert.equal(logs.length, 0);
  } finally {
    await client.close();
  }
});

test("a flood is bounded per call: at most the limit relayed, the rest counted in the result", async () => {
  const { client, logs } = await modernAgent();
  try {
    const { result, progress } = await callWith(client, "flood", "debug");
    assert.equal(progress.length + logs.length, MAX_RELAYED_NOTIFICATIONS);
    const dropped = result._meta?.[DROPPED_NOTIFICATIONS_META] as { limit: number; scrub: number };
    assert.deepEqual(dropped, { limit: 2 * FLOOD - MAX_RELAYED_NOTIFICATIONS, scrub: 0 });
    assert.equal((result.content[0] as { text: string }).text, "flooded");
  } finally {
    await client.close();
  }
});

test("a downstream never sees the caller's progress token and cannot address one: only its own call's token is relayed", async () => {
  const { client } = await modernAgent();
  try {
    const { progress } = await callWith(client, "impostor");
    assert.deepEqual(
      progress.map((update) => update.progress),
      [3],
    );
    // What the downstream was sent is the gateway's own random token, never the caller's.
    const tokens = d.requests
      .map(
        (request) =>
          JSON.parse(request.body) as { method?: string; params?: { _meta?: Record<string, unknown> } },
      )
      .filter((message) => message.method === "tools/call")
      .map((message) => message.params?._meta?.progressToken);
    assert.ok(tokens.length > 0);
    for (const token of tokens) assert.match(String(token), /^[0-9a-f-]{36}$/);
  } finally {
    await client.close();
  }
});

test("a caller that takes neither progress nor log lines is relayed nothing, and the downstream is sent no token", async () => {
  const { client, logs } = await modernAgent();
  try {
    const before = d.requests.length;
    // No onprogress (no progress token) and no log level: the caller takes no notification.
    const result = (await client.callTool({ name: "leaky", arguments: {} })) as CallToolResult;
    assert.equal((result.content[0] as { text: string }).text, "leaked nothing");
    assert.equal(logs.length, 0);
    assert.equal(
      result._meta?.[DROPPED_NOTIFICATIONS_META],
      undefined,
      "nothing was taken, so nothing was dropped",
    );
    const sent = d.requests
      .slice(before)
      .map(
        (request) =>
          JSON.parse(request.body) as { method?: string; params?: { _meta?: Record<string, unknown> } },
      )
      .filter((message) => message.method === "tools/call");
    assert.equal(sent.length, 1);
    assert.equal(sent[0]?.params?._meta?.progressToken, undefined);
    assert.equal(sent[0]?.params?._meta?.[LOG_LEVEL_META_KEY], undefined);
  } finally {
    await client.close();
  }
});

test("a denied call relays nothing and reaches no downstream", async () => {
  const { client, logs } = await modernAgent();
  try {
    const before = d.calls().length;
    const progress: Progress[] = [];
    await assert.rejects(
      client.callTool(
        { name: "unassigned", arguments: {}, _meta: { [LOG_LEVEL_META_KEY]: "debug" } },
        { onprogress: (update) => progress.push(update) },
      ),
      /not available to this caller/,
    );
    assert.equal(d.calls().length, before);
    assert.equal(progress.length + logs.length, 0);
  } finally {
    await client.close();
  }
});

test("2025-11-25 (SDK 1.x): the level set with logging/setLevel holds for the client's later calls; scrubbed as well", async () => {
  const client = new LegacyClient({ name: "legacy-agent", version: "1.0.0" });
  const logs: { level: string; data: unknown }[] = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
    logs.push(notification.params);
  });
  await client.connect(
    new LegacyTransport(new URL(`${h.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${await h.token("agent-n")}` } },
    }),
  );
  try {
    await client.setLoggingLevel("warning");
    const progress: { progress: number; message?: string }[] = [];
    const result = await client.callTool({ name: "leaky", arguments: {} }, undefined, {
      onprogress: (update) => progress.push(update),
    });
    assert.equal(result.isError, undefined);
    assert.deepEqual(
      logs.map((line) => line.level),
      ["error", "warning"],
    );
    assert.equal(progress.length, 1);
    assert.ok(!JSON.stringify({ logs, progress }).includes(SECRET));
    assert.ok(!JSON.stringify(logs).includes("123-45-6789"));
  } finally {
    await client.close();
  }
});

test("attack (decision 3181): calls that take notifications and calls that take none, at once on one kept downstream client, each get only their own", async () => {
  const taker = await modernAgent();
  const silent = await modernAgent();
  try {
    const rounds = 6;
    const results = await Promise.all(
      Array.from({ length: rounds }, (_, i) =>
        i % 2 === 0
          ? callWith(taker.client, "leaky", "debug").then((call) => ({ taker: true, ...call }))
          : silent.client.callTool({ name: "leaky", arguments: {} }).then((result) => ({
              taker: false,
              result: result as CallToolResult,
              progress: [] as Progress[],
            })),
      ),
    );
    for (const { taker: takes, result, progress } of results) {
      assert.equal((result.content[0] as { text: string }).text, "leaked nothing");
      if (takes) {
        // Its own progress line only, however the calls interleaved.
        assert.equal(progress.length, 1);
        assert.deepEqual(result._meta?.[DROPPED_NOTIFICATIONS_META], { limit: 0, scrub: 1 });
      } else assert.equal(result._meta?.[DROPPED_NOTIFICATIONS_META], undefined);
    }
    // Each taking call's three log lines at debug (the fourth is dropped); none for the silent client.
    assert.equal(taker.logs.length, (rounds / 2) * 3);
    assert.equal(silent.logs.length, 0);
    assert.ok(!JSON.stringify(taker.logs).includes(SECRET));
  } finally {
    await taker.client.close();
    await silent.client.close();
  }
});
