/**
 * Interop with the MCP Inspector's CLI, as an operator runs it: a separate process over
 * Streamable HTTP with a bearer header, listing and calling through `/mcp`.
 *
 * - v1 (`@modelcontextprotocol/inspector-cli`, pinned; built on SDK 1.x): the 2025 revisions.
 * - v2 (`@modelcontextprotocol/inspector`, pinned; the current line, built on the SDK's 2.x
 *   client): `--cli` runs it headless; `--protocol-era legacy` negotiates a 2025 revision
 *   (`initialize`), `--protocol-era modern` pins 2026-07-28 (stateless, no `initialize`).
 *   Its catalog, OAuth state and secret store live under a scratch HOME, never the user's.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { ALLOWED_ORIGIN, type Harness, permission, startHarness } from "./harness.ts";

const run = promisify(execFile);
const resolvePackage = (name: string) => createRequire(import.meta.url).resolve(`${name}/package.json`);
const CLI_V1 = join(resolvePackage("@modelcontextprotocol/inspector-cli"), "../build/index.js");
const CLI_V2 = join(resolvePackage("@modelcontextprotocol/inspector"), "../clients/launcher/build/index.js");

let h: Harness;
let home: string;
let recorder: Recorder;
before(async () => {
  // Three CLI processes start on a shared machine: no upstream deadline short enough to trip.
  h = await startHarness({ mcp: { allowedOrigins: [ALLOWED_ORIGIN], upstreamTimeoutMs: 10_000 } });
  await h.grant("inspected", [permission("get", "/orders")]);
  home = await mkdtemp(join(tmpdir(), "inspector-home-"));
  recorder = await startRecorder(`${h.url}/mcp`);
});
after(async () => {
  await new Promise<void>((resolve) => {
    recorder.server.closeAllConnections();
    recorder.server.close(() => resolve());
  });
  await h.close();
  await rm(home, { recursive: true, force: true });
});

interface Seen {
  readonly method: string;
  readonly version: string | undefined;
}
interface Recorder {
  readonly server: Server;
  readonly url: string;
  /** The JSON-RPC method and `MCP-Protocol-Version` header of each POST, in order. */
  readonly seen: Seen[];
}

/** Passes every request through to `/mcp` unchanged, noting which revision each one spoke. */
async function startRecorder(target: string): Promise<Recorder> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (value === undefined || ["host", "connection", "content-length"].includes(name)) continue;
        headers.set(name, Array.isArray(value) ? value.join(", ") : value);
      }
      if (req.method === "POST") {
        const message = JSON.parse(body.toString("utf8")) as { method?: string };
        seen.push({
          method: message.method ?? "",
          version: headers.get("mcp-protocol-version") ?? undefined,
        });
      }
      fetch(target, { method: req.method ?? "GET", headers, ...(body.length > 0 ? { body } : {}) })
        .then(async (response) => {
          res.writeHead(response.status, Object.fromEntries(response.headers));
          res.end(Buffer.from(await response.arrayBuffer()));
        })
        .catch(() => {
          res.writeHead(502);
          res.end();
        });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, seen };
}

async function runJson(cli: string, args: string[], cwd: string): Promise<Record<string, unknown>> {
  try {
    const { stdout } = await run(process.execPath, [cli, ...args], {
      timeout: 60_000,
      cwd,
      env: { ...process.env, HOME: home, USERPROFILE: home, NO_COLOR: "1" },
    });
    return JSON.parse(stdout) as Record<string, unknown>;
  } catch (error) {
    // Not the command line: it holds the token.
    const { stderr, stdout } = error as { stderr?: string; stdout?: string };
    throw new Error(
      `inspector ${args.filter((a) => !a.startsWith("Authorization")).join(" ")} failed: ${stderr ?? ""}${stdout ?? String(error)}`,
    );
  }
}

/** Runs one CLI invocation; its result as the CLI prints it. */
type Inspector = (token: string, ...args: string[]) => Promise<Record<string, unknown>>;

/** v1: its build finds its own package.json relative to the working directory. */
const inspectorV1: Inspector = (token, ...args) =>
  runJson(
    CLI_V1,
    [recorder.url, "--transport", "http", "--header", `Authorization: Bearer ${token}`, ...args],
    dirname(CLI_V1),
  );

/** v2 headless (`--cli`), in one protocol era; `--format json` wraps the result in `{ result }`. */
const inspectorV2 =
  (era: "legacy" | "modern"): Inspector =>
  async (token, ...args) => {
    const printed = await runJson(
      CLI_V2,
      [
        "--cli",
        recorder.url,
        "--transport",
        "http",
        "--protocol-era",
        era,
        "--format",
        "json",
        "--header",
        `Authorization: Bearer ${token}`,
        ...args,
      ],
      home,
    );
    return printed.result as Record<string, unknown>;
  };

/** Lists (one tool: the caller's policy) and calls it; returns what `/mcp` received. */
async function listsAndCalls(inspector: Inspector): Promise<readonly Seen[]> {
  const token = await h.token("inspected");
  const from = recorder.seen.length;
  const listed = (await inspector(token, "--method", "tools/list")) as { tools: Array<{ name: string }> };
  assert.equal(listed.tools.length, 1);
  const name = listed.tools[0]?.name ?? "";
  assert.match(name, /^listOrders_[0-9a-f]{8}$/);
  const called = (await inspector(token, "--method", "tools/call", "--tool-name", name)) as {
    structuredContent?: { status: number; body: unknown };
  };
  assert.ok(called.structuredContent !== undefined, JSON.stringify(called));
  assert.equal(called.structuredContent.status, 200);
  assert.deepEqual(called.structuredContent.body, [{ id: "o-1" }, { id: "o-2" }]);
  return recorder.seen.slice(from);
}

/** The 2025 revisions: an `initialize` handshake, then requests on a 2025 version. */
function assertLegacy(seen: readonly Seen[]): void {
  assert.ok(seen.some((s) => s.method === "initialize"));
  const call = seen.find((s) => s.method === "tools/call");
  assert.match(call?.version ?? "", /^2025-/);
}

test("MCP Inspector CLI v1 (2025 revisions) lists the caller's tools and calls one", async () => {
  assertLegacy(await listsAndCalls(inspectorV1));
});

test("MCP Inspector v2 CLI in legacy mode lists the caller's tools and calls one", async () => {
  assertLegacy(await listsAndCalls(inspectorV2("legacy")));
});

test("MCP Inspector v2 CLI in modern mode speaks 2026-07-28: no initialize, every request on it", async () => {
  const seen = await listsAndCalls(inspectorV2("modern"));
  assert.ok(!seen.some((s) => s.method === "initialize"));
  assert.ok(seen.some((s) => s.method === "tools/list") && seen.some((s) => s.method === "tools/call"));
  for (const request of seen) assert.equal(request.version, "2026-07-28", request.method);
});
