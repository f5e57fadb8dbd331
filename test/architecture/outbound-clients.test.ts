/**
 * Every outbound network client in src/ is created by the egress gate (src/execute/egress.ts:
 * its `fetch`, `dispatcher`, agents and `httpClient`), or is one of the few clients of the
 * operator's own configuration listed below with the reason. A destination a partner can
 * influence (upstreams, OAuth token endpoints, a binding's JWKS, anything added later) is
 * therefore checked on the address connected to, redirects included (decision 2503).
 *
 * The scan reads every src/**\/*.ts without its comments and flags what opens a connection:
 * a call of the global `fetch` (or `globalThis.fetch`), a value import of node:http(s)/http2's
 * request/get/Agent, node:net/tls's connect/createConnection/Socket, anything of undici, a
 * default, namespace, dynamic or require import of those modules, jose's createRemoteJWKSet,
 * oauth4webapi, the MCP SDK's client transports, `new WebSocket` and `new EventSource`.
 * A file on the list that no longer creates a client fails too (a stale reason).
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

/** The gate itself: the one module that may build clients for partner-influenced destinations. */
const GATE = "src/execute/egress.ts";

/** `file` → why its outbound client is not one a partner can point anywhere. */
const OPERATOR_CLIENTS: Readonly<Record<string, string>> = {
  "src/identity/jwt-verifier.ts":
    "remote JWKS of a verifier: requested through RemoteJwksOptions.fetch when given — a binding's partner JWKS always gives the gate's fetch (src/bindings/assertions.ts requires it); without one, only the operator's configured issuers (trusted issuers, the crypto service's issuer)",
  "src/identity/token-client.ts":
    "token endpoint of the operator's identity provider (sidecar service token, `authority token`, the managed API's password grant): from configuration",
  "src/admin/platform-diagnostics.ts":
    "probes the platform's own configured services (authority, managed API, crypto service, IdP, Redis) for the diagnostics view",
  "src/clients/crypto-service/transport.ts":
    "the crypto service / managed crypto API at the URL the operator configured",
  "src/servers/sidecar/authority-client.ts":
    "the sidecar's authority service, at the URL the operator configured",
  "src/servers/sidecar/node-json-fetch.ts":
    "the sidecar's transport to the platform's own services (its authority, its trusted issuers' JWKS), at the URLs the operator configured",
  "src/execute/oauth-token-endpoint.ts":
    "oauth4webapi builds the token request; it is sent through the caller's fetch (the executor's: the egress gate)",
  "src/cli/commands/explain.ts": "`authority explain`: the admin API at the --url the operator gives",
  "src/cli/commands/replay.ts": "`authority replay`: the admin API at the --url the operator gives",
  "src/dev/admin-client.ts": "development tool: the admin API of the authority it started itself",
  "src/dev/sample-customers-api.ts": "development sample API: verifies envelopes at its own authority",
  "src/dev/demo/context.ts": "`authority demo`: calls the services it started itself",
  "src/dev/demo/steps-binding.ts": "`authority demo`: calls the services it started itself",
  "src/dev/demo/steps-sidecar.ts": "`authority demo`: calls the sidecar it started itself",
  "src/dev/demo/steps-managed.ts": "`authority demo`: calls the managed API it started itself",
  "src/dev/demo/steps-mcp.ts": "`authority demo`: an MCP client of the authority it started itself",
  "src/dev/demo/steps-user-grant.ts":
    "`authority demo`: the user's browser at the OAuth provider and an MCP client, both started by itself",
};

const NETWORK_MODULES = /^(?:node:)?(?:http|https|http2|net|tls|undici|dgram)$/;
/** Value imports of these names open connections (types and servers do not). */
const CLIENT_NAMES: Readonly<Record<string, ReadonlySet<string>>> = {
  http: new Set(["request", "get", "Agent", "globalAgent", "ClientRequest"]),
  https: new Set(["request", "get", "Agent", "globalAgent"]),
  http2: new Set(["connect"]),
  net: new Set(["connect", "createConnection", "Socket"]),
  tls: new Set(["connect", "TLSSocket"]),
  dgram: new Set(["createSocket"]),
};

const PATTERNS: ReadonlyArray<readonly [string, RegExp]> = [
  ["global fetch", /(?<![\w$.])fetch\s*\(/],
  ["globalThis.fetch", /(?<!typeof\s+)globalThis\s*\.\s*fetch\b/],
  ["jose remote JWKS", /\bcreateRemoteJWKSet\b/],
  ["oauth4webapi", /from\s+["']oauth4webapi["']/],
  ["MCP client transport", /from\s+["']@modelcontextprotocol\/sdk\/client\//],
  ["WebSocket / EventSource", /\bnew\s+(?:WebSocket|EventSource)\s*\(/],
  [
    "dynamic network import",
    // import(), require() and any require function made by createRequire (requireModule(…))
    /\b(?:import|\w*[Rr]equire\w*)\s*\(\s*["'](?:node:)?(?:http|https|http2|net|tls|undici)["']\s*\)/,
  ],
];

/** Source without comments (strings keep their text; a `//` inside one ends the line's scan). */
function withoutComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");
}

/** The client-creating imports of one file's source: `module: name` for each. */
function networkImports(source: string): string[] {
  const found: string[] = [];
  const importStatement = /import\s+(type\s+)?([^;]*?)\s+from\s+["']([^"']+)["']/g;
  for (const match of source.matchAll(importStatement)) {
    const [, typeOnly, clause = "", specifier = ""] = match;
    if (typeOnly !== undefined || !NETWORK_MODULES.test(specifier)) continue;
    const module = specifier.replace(/^node:/, "");
    const named = /\{([^}]*)\}/.exec(clause);
    const outside = clause
      .replace(/\{[^}]*\}/, "")
      .replace(/,/g, "")
      .trim();
    // A default or namespace import hands out the whole module.
    if (outside.length > 0) found.push(`${module}: ${outside}`);
    for (const part of named?.[1]?.split(",") ?? []) {
      const spec = part.trim();
      if (spec === "" || spec.startsWith("type ")) continue;
      const name = spec.split(/\s+as\s+/)[0]?.trim() ?? "";
      if (module === "undici" || CLIENT_NAMES[module]?.has(name) === true) found.push(`${module}: ${name}`);
    }
  }
  return found;
}

/** What in one file's source creates an outbound client. */
export function outboundClients(source: string): string[] {
  const code = withoutComments(source);
  return [
    ...networkImports(code),
    ...PATTERNS.filter(([, pattern]) => pattern.test(code)).map(([kind]) => kind),
  ];
}

async function sourceFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sourceFiles(path)));
    else if (entry.name.endsWith(".ts")) out.push(path);
  }
  return out;
}

describe("outbound clients pass the egress gate", () => {
  it("recognizes each way of opening a connection, and not types or servers", () => {
    const flagged = (source: string) => outboundClients(source);
    assert.deepEqual(flagged(`const r = await fetch(url);`), ["global fetch"]);
    assert.deepEqual(flagged(`const f = options.fetch ?? globalThis.fetch;`), ["globalThis.fetch"]);
    assert.deepEqual(flagged(`readonly fetch?: typeof globalThis.fetch;`), []);
    assert.deepEqual(flagged(`await request.fetch(url); await entries.fetch(key);`), []);
    assert.deepEqual(flagged(`import { request as r } from "node:https";`), ["https: request"]);
    assert.deepEqual(flagged(`import { createServer, type Agent } from "node:http";`), []);
    assert.deepEqual(flagged(`import type { Agent } from "node:http";`), []);
    assert.deepEqual(flagged(`import * as http from "node:http";`), ["http: * as http"]);
    assert.deepEqual(flagged(`import { connect as c } from "node:tls";`), ["tls: connect"]);
    assert.deepEqual(flagged(`import { Pool } from "undici";`), ["undici: Pool"]);
    assert.deepEqual(flagged(`const h = await import("node:http");`), ["dynamic network import"]);
    assert.deepEqual(flagged(`const u = requireModule("undici");`), ["dynamic network import"]);
    assert.deepEqual(flagged(`const jwks = createRemoteJWKSet(url);`), ["jose remote JWKS"]);
    assert.deepEqual(flagged(`// fetch(url) in a comment\n/* globalThis.fetch */`), []);
    assert.deepEqual(flagged(`const ws = new WebSocket("wss://x");`), ["WebSocket / EventSource"]);
  });

  it("no module outside the gate creates one, except the operator's own clients listed with a reason", async () => {
    const root = process.cwd();
    const outside: string[] = [];
    const seen = new Set<string>();
    for (const path of await sourceFiles(join(root, "src"))) {
      const file = relative(root, path).split("\\").join("/");
      if (file === GATE) continue;
      const clients = outboundClients(await readFile(path, "utf8"));
      if (clients.length === 0) continue;
      seen.add(file);
      if (OPERATOR_CLIENTS[file] === undefined) outside.push(`${file}: ${clients.join(", ")}`);
    }
    assert.deepEqual(
      outside,
      [],
      "outbound clients outside the egress gate (use EgressPolicy.fetch / httpClient, or list an operator-only client with its reason)",
    );
    const stale = Object.keys(OPERATOR_CLIENTS).filter((file) => !seen.has(file));
    assert.deepEqual(stale, [], "allow-list entries whose file no longer creates an outbound client");
  });

  it("the gate itself still builds the clients it hands out", async () => {
    const clients = outboundClients(await readFile(join(process.cwd(), GATE), "utf8"));
    // undici is required on first use (a process that never fetches through the gate skips it)
    assert.ok(
      clients.includes("dynamic network import") && clients.includes("globalThis.fetch"),
      clients.join(", "),
    );
  });
});
