/**
 * A downstream MCP server's tool is an operation snapshot `POST /tools/<name>` that exists only
 * behind /mcp (decision 2661). Attack: an agent whose policy allows the tool sends that method
 * and path as a plain HTTP request through Envoy or the forward proxy, hoping the sidecar lets
 * its raw body reach the downstream host. Both paths must refuse it as an unknown operation.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { importMcpServer, previewMcpServer } from "../../../src/admin/mcp-servers.ts";
import { assignCapability } from "../../../src/admin/policies.ts";
import { createExtAuthzClient, type ExtAuthzClient } from "../../helpers/ext-authz-client.ts";
import {
  AGENT,
  PARTNER,
  PROFILE,
  proxyRequest,
  type SidecarHandle,
  startWorld,
  type World,
} from "./world.ts";

const TOOLS = "helpdesk-tools";
const DOWNSTREAM_URL = "https://helpdesk.internal/mcp";
const actor = { subject: "root-admin", requestId: "seed" };
const lister = async () => ({
  tools: [
    {
      name: "open_ticket",
      description: "Opens a ticket.",
      inputSchema: { type: "object", properties: { title: { type: "string" } } },
    },
  ],
  server: { name: "helpdesk", version: "1.0.0" },
});

let world: World;
let sidecar: SidecarHandle;
let extAuthz: ExtAuthzClient;

before(async () => {
  world = await startWorld();
  const input = { url: DOWNSTREAM_URL, capability_id: TOOLS, auth_profile_ref: PROFILE };
  const preview = await previewMcpServer(world.context, PARTNER, input, lister);
  await importMcpServer(
    world.context,
    actor,
    PARTNER,
    { ...input, name: "Helpdesk", catalog_hash: preview.catalog_hash },
    lister,
  );
  await assignCapability(world.context, actor, PARTNER, AGENT, TOOLS, {
    allowed_permission_ids: [`${TOOLS}:post:/tools/open_ticket`],
    ttl_seconds: 3600,
  });
  sidecar = await world.startSidecar();
  extAuthz = createExtAuthzClient(sidecar.ports.grpc);
});
after(async () => {
  extAuthz?.close();
  await world?.close();
});

test("ext_authz refuses a downstream tool's snapshot sent as a plain HTTP request", async () => {
  const answer = await extAuthz.check(
    {
      method: "POST",
      path: "/tools/open_ticket",
      token: world.tokens.agent,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ title: "x" }),
    },
    { host: "helpdesk.internal", capability: TOOLS },
  );
  assert.equal(answer.allowed, false);
  assert.equal(JSON.parse(answer.response.denied_response.body).reason, "unknown_operation");
});

test("the forward proxy refuses it too, and sends nothing", async () => {
  const reply = await proxyRequest(
    sidecar.ports.proxy,
    {
      method: "POST",
      target: "http://helpdesk.internal/tools/open_ticket",
      headers: { "x-authority-capability": TOOLS, "content-type": "application/json" },
      body: JSON.stringify({ title: "x" }),
    },
    world.tokens.agent,
  );
  assert.equal(reply.status, 403);
  assert.equal(reply.json().reason, "unknown_operation");
});
