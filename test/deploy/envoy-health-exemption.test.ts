import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { connect as http2Connect } from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import { parse } from "yaml";
import { type EnvoyHandle, renderBootstrap, startEnvoy } from "../helpers/envoy.ts";
import { rawRequest } from "../helpers/http-client.ts";
import { exchange } from "../helpers/http2-exchange.ts";
import { testCheckServer } from "../servers/sidecar/grpc/helpers.ts";
import { docsYamlBlocks, listRepoDir, loadYamlDocuments, shippedEnvoyBootstraps } from "./helpers.ts";

/**
 * Nothing but the exact health request escapes the ext_authz check, in every Envoy bootstrap
 * the repository ships (deploy/envoy/envoy.yaml, the Kubernetes example's ConfigMap, any whole
 * bootstrap in the docs), run by the real Envoy with only its ports changed:
 *
 *   client ─HTTP/1.1 (raw bytes) or h2c─► Envoy ─ext_authz─► check server (records, denies all)
 *                                               └─router───► app (records what reaches it)
 *
 * The check server denies everything, so whatever reaches the app was not checked. The
 * invariant, for named path tricks and for a generated set of them (lead × spelling × tail ×
 * method × protocol): the app receives a request only as `GET` or `HEAD` of exactly `/healthz`
 * (no query, nothing after it) and without the caller's credentials. Every other request is
 * checked or refused by Envoy itself. Spellings that Envoy's normalization turns into
 * `/healthz` itself (`//healthz`, `/./healthz`, `/%68ealthz`) reach the app as `/healthz`:
 * the path the app sees is the path that was exempted.
 *
 * No Istio runs here: the `CUSTOM` AuthorizationPolicies of deploy/istio and the docs are read
 * statically, with Istio's match rules, over the same tricks (last block).
 */

const HEALTH_PATH = "/healthz";
const CREDENTIALS = {
  authorization: "Bearer health-exemption-test-token",
  "proxy-authorization": "Basic aGVhbHRoOmV4ZW1wdGlvbg==",
  cookie: "session=health-exemption-test-cookie",
  "x-authority-user-assertion": "health-exemption-test-assertion",
};

interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
}

interface Rig {
  readonly envoy: EnvoyHandle;
  readonly app: Seen[];
  readonly checked: string[];
  close(): Promise<void>;
}

async function startApp(seen: Seen[]): Promise<Server> {
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers });
    res.writeHead(200, { "content-type": "text/plain", "content-length": "2" }).end("ok");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

async function startRig(bootstrap: string): Promise<Rig> {
  const app: Seen[] = [];
  const checked: string[] = [];
  const appServer = await startApp(app);
  const checkServer = testCheckServer({
    check: (input) => {
      checked.push(`${input.method} ${input.path}`);
      return { allow: false, httpStatus: 403, reason: "operation_not_allowed", requestId: "" };
    },
  });
  const { port: sidecarPort } = await checkServer.listen("127.0.0.1:0");
  const appPort = (appServer.address() as AddressInfo).port;
  const envoy = await startEnvoy(() =>
    renderBootstrap({ bootstrap, sidecarPort, appPort, capability: "health-exemption-test" }),
  ).catch(async (error: unknown) => {
    await checkServer.close({ graceMs: 0 });
    appServer.close();
    throw error;
  });
  return {
    envoy,
    app,
    checked,
    async close() {
      await envoy.stop();
      await checkServer.close({ graceMs: 0 });
      appServer.closeAllConnections();
      await new Promise((resolve) => appServer.close(resolve));
    },
  };
}

type Protocol = "http1" | "h2c";

interface Trick {
  readonly method: string;
  readonly path: string;
  readonly protocol: Protocol;
}

interface Outcome {
  readonly trick: Trick;
  /** Envoy's status to the client (0: it closed without answering). */
  readonly status: number;
  /** What reached the app for this request (unchecked: the check server denies everything). */
  readonly reached: Seen[];
  /** The Checks Envoy made for it. */
  readonly checks: string[];
}

async function sendHttp1(envoy: EnvoyHandle, trick: Trick): Promise<number> {
  const head = [
    `${trick.method} ${trick.path} HTTP/1.1`,
    "host: app.example",
    ...Object.entries(CREDENTIALS).map(([name, value]) => `${name}: ${value}`),
    "connection: close",
  ];
  const reply = await rawRequest("127.0.0.1", envoy.port, `${head.join("\r\n")}\r\n\r\n`, {
    timeoutMs: 15_000,
  });
  return reply.status;
}

async function sendH2c(envoy: EnvoyHandle, trick: Trick): Promise<number> {
  const session = http2Connect(envoy.url);
  session.on("error", () => undefined);
  try {
    const reply = await exchange(session, {
      ":method": trick.method,
      ":path": trick.path,
      ":authority": "app.example",
      ...CREDENTIALS,
    });
    return Number(reply.headers[":status"] ?? 0);
  } finally {
    session.close();
  }
}

async function send(rig: Rig, trick: Trick): Promise<Outcome> {
  const app = rig.app.length;
  const checks = rig.checked.length;
  const status =
    trick.protocol === "http1" ? await sendHttp1(rig.envoy, trick) : await sendH2c(rig.envoy, trick);
  return { trick, status, reached: rig.app.slice(app), checks: rig.checked.slice(checks) };
}

const describeOutcome = ({ trick, ...outcome }: Outcome): string =>
  `${trick.protocol} ${JSON.stringify(trick.method)} ${JSON.stringify(trick.path)} → ${outcome.status}, ` +
  `app saw ${JSON.stringify(outcome.reached.map((r) => `${r.method} ${r.url}`))}, ` +
  `checks ${JSON.stringify(outcome.checks)}`;

/** The one thing that may reach the app unchecked: GET or HEAD of exactly the health path, without credentials. */
function assertOnlyTheHealthRequestEscapes(outcome: Outcome): void {
  const what = describeOutcome(outcome);
  assert.ok(outcome.reached.length <= 1, what);
  for (const seen of outcome.reached) {
    assert.ok(seen.method === "GET" || seen.method === "HEAD", what);
    assert.equal(seen.url, HEALTH_PATH, what);
    for (const name of Object.keys(CREDENTIALS)) {
      assert.equal(seen.headers[name], undefined, `${name} reached the app: ${what}`);
    }
  }
}

/** Nothing reached the app, and the check server saw the request or Envoy answered it itself. */
function assertCheckedOrRefused(outcome: Outcome): void {
  const what = describeOutcome(outcome);
  assert.deepEqual(outcome.reached, [], what);
  assert.ok(outcome.checks.length === 1 || (outcome.checks.length === 0 && outcome.status !== 200), what);
}

/** Spelled differently from the health path, and must never reach the app. */
const NAMED_TRICKS = [
  "/healthz/..;/x",
  "/healthz/..;/admin",
  "/healthz/..;x/admin",
  "/healthz/..;jsessionid=1/admin",
  "/healthz/%2e%2e;/admin",
  "/healthz;/../admin",
  "/healthz/.;/../admin",
  "/healthz/../x",
  "/healthz/%2e%2e/x",
  "/healthz%2F..%2Fx",
  "/healthz%2f..%2fx",
  "/healthz%5C..%5Cx",
  "/healthz;x",
  "/healthz;/x",
  "/healthz/;x",
  "/HEALTHZ",
  "/Healthz",
  "/healthz/",
  "/healthz/.",
  "/healthz/x",
  "/healthzx",
  "/healthz.json",
  "/healthz?x",
  "/healthz?",
  "/healthz#x",
  "/healthz%3Fx",
  "/healthz%23x",
  "/healthz%00",
  "/healthz%20",
  "/./healthz/../x",
  "//healthz/../x",
  "/x/../healthz/../x",
  // Envoy reads a backslash inside the path as a slash, and refuses a target that starts with
  // one (over HTTP/2 by closing the connection after a second: hence only here, not generated).
  "\\healthz",
  "/healthz\\..\\x",
];

/** Spellings Envoy's normalization turns into exactly /healthz before routing: the app sees /healthz. */
const NORMALIZED_TO_HEALTH = ["//healthz", "/./healthz", "/x/../healthz", "/%68ealthz"];

/** The generated set: lead × spelling of the name × tail. */
const LEADS = ["/", "//", "/./", "/%2e/", "/x/../", "/x/%2e%2e/", "/;x/", "/.;/"];
const SPELLINGS = [
  "healthz",
  "HEALTHZ",
  "Healthz",
  "healthZ",
  "%68ealthz",
  "healt%68z",
  "%48EALTHZ",
  "%EF%BD%88ealthz",
  "health%7a",
];
const TAILS = [
  "",
  "/",
  "/.",
  "/..",
  "//",
  "/../x",
  "/..;/x",
  "/..;x/x",
  "/%2e%2e;/x",
  "/.;/../x",
  "/%2e%2e/x",
  "%2F..%2Fx",
  "%2f",
  "%5C..%5Cx",
  ";",
  ";x",
  ";/x",
  "?",
  "?x",
  "?x=/../y",
  "#",
  "#x",
  "%3Fx",
  "%23x",
  "%00",
  "%20",
  "%09",
  ".",
  "..;",
  "x",
  "/x",
  "~",
  "%2e",
];

const shipped = shippedEnvoyBootstraps();

describe("only the exact health request escapes ext_authz in every shipped Envoy bootstrap", () => {
  it("finds the shipped bootstraps (deploy/envoy, the Kubernetes example's ConfigMap)", () => {
    assert.ok(shipped.length >= 2, shipped.map((b) => b.name).join(", "));
  });

  for (const { name, text } of shipped) {
    describe(name, () => {
      let rig: Rig;
      before(async () => {
        rig = await startRig(text);
      });
      after(async () => {
        await rig?.close();
      });

      for (const protocol of ["http1", "h2c"] as const) {
        it(`${protocol}: GET and HEAD ${HEALTH_PATH} reach the app unchecked, without the caller's credentials`, async () => {
          for (const method of ["GET", "HEAD"]) {
            const outcome = await send(rig, { method, path: HEALTH_PATH, protocol });
            assert.equal(outcome.status, 200, describeOutcome(outcome));
            assert.equal(outcome.reached.length, 1, describeOutcome(outcome));
            assert.deepEqual(outcome.checks, [], describeOutcome(outcome));
            assertOnlyTheHealthRequestEscapes(outcome);
          }
        });

        it(`${protocol}: any other method on ${HEALTH_PATH} is checked or refused by Envoy`, async () => {
          for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get"]) {
            assertCheckedOrRefused(await send(rig, { method, path: HEALTH_PATH, protocol }));
          }
        });

        it(`${protocol}: every other spelling of the path is checked or refused by Envoy`, async () => {
          for (const path of NAMED_TRICKS)
            assertCheckedOrRefused(await send(rig, { method: "GET", path, protocol }));
        });

        it(`${protocol}: spellings normalized to ${HEALTH_PATH} reach the app as ${HEALTH_PATH}`, async () => {
          for (const path of NORMALIZED_TO_HEALTH) {
            const outcome = await send(rig, { method: "GET", path, protocol });
            assert.equal(outcome.reached.length, 1, describeOutcome(outcome));
            assertOnlyTheHealthRequestEscapes(outcome);
          }
        });
      }

      it("a generated set of path tricks: the app sees nothing unchecked but GET/HEAD /healthz", async () => {
        const method = fc.constantFrom("GET", "GET", "GET", "HEAD", "POST", "OPTIONS");
        const pick = (values: readonly string[]) => fc.constantFrom(...values);
        const protocol = fc.constantFrom<Protocol>("http1", "h2c");
        await fc.assert(
          fc.asyncProperty(
            pick(LEADS),
            pick(SPELLINGS),
            pick(TAILS),
            method,
            protocol,
            async (l, s, t, m, p) => {
              assertOnlyTheHealthRequestEscapes(
                await send(rig, { method: m, path: `${l}${s}${t}`, protocol: p }),
              );
            },
          ),
          { numRuns: 500 },
        );
      });
    });
  }
});

// biome-ignore lint/suspicious/noExplicitAny: an Envoy bootstrap is walked field by field
type Yaml = any;

const EXT_AUTHZ = "envoy.filters.http.ext_authz";
const isDisabled = (node: Yaml): boolean => node?.typed_per_filter_config?.[EXT_AUTHZ]?.disabled === true;

/** The paths a bootstrap exempts from ext_authz, after checking that each is one exact path. */
function envoyExemptPaths(name: string, text: string): string[] {
  const bootstrap: Yaml = parse(text);
  const paths: string[] = [];
  for (const listener of bootstrap.static_resources.listeners)
    for (const chain of listener.filter_chains)
      for (const filter of chain.filters) {
        for (const host of filter.typed_config?.route_config?.virtual_hosts ?? []) {
          assert.ok(!isDisabled(host), `${name}: virtual host ${host.name} turns ext_authz off`);
          for (const route of host.routes.filter(isDisabled)) {
            const what = `${name}: route ${JSON.stringify(route.match)} without ext_authz`;
            const { path, headers, ...rest } = route.match;
            assert.deepEqual(rest, {}, `${what} matches more than one exact path`);
            assert.equal(typeof path, "string", what);
            const header = (h: string) => (headers ?? []).find((m: Yaml) => m.name === h)?.string_match;
            assert.deepEqual(header(":path"), { exact: path }, `${what}: \`path\` ignores the query`);
            assert.ok(header(":method") !== undefined, `${what}: any method`);
            for (const credential of Object.keys(CREDENTIALS))
              assert.ok(
                route.request_headers_to_remove?.includes(credential),
                `${what} forwards ${credential}`,
              );
            paths.push(path);
          }
        }
      }
  return paths;
}

/** Istio's match of a rule's string field: `*` presence, `x*` prefix, `*x` suffix, else exact. */
function istioMatches(pattern: string, value: string): boolean {
  if (pattern === "*") return value !== "";
  if (pattern.endsWith("*")) return value.startsWith(pattern.slice(0, -1));
  if (pattern.startsWith("*")) return value.endsWith(pattern.slice(1));
  return value === pattern;
}

const OPERATION_FIELDS = ["paths", "notPaths", "methods", "notMethods"];
/**
 * One plain path: exact in Istio's reading (no `*` for prefix, suffix or presence, no `{`/`}`
 * templates), and nothing that normalization or the app could read as another path (no dot
 * segments, `//`, `;`, `%`, `\`, `?`, `#`, trailing slash).
 */
const PLAIN_PATH = /^(\/[A-Za-z0-9_~-]+(\.[A-Za-z0-9_~-]+)*)+$/;

/** Whether a CUSTOM policy sends a request to its provider: some rule matches it. */
function istioChecks(policy: Yaml, method: string, path: string): boolean {
  // Envoy's url_path (what Istio's paths compile to) is the path without query and fragment.
  const urlPath = path.split(/[?#]/)[0] ?? "";
  const any = (patterns: string[] | undefined, value: string) =>
    patterns?.some((p) => istioMatches(p, value));
  const operationMatches = (op: Yaml): boolean =>
    (op.paths === undefined || any(op.paths, urlPath) === true) &&
    (op.notPaths === undefined || any(op.notPaths, urlPath) === false) &&
    (op.methods === undefined || any(op.methods, method) === true) &&
    (op.notMethods === undefined || any(op.notMethods, method) === false);
  return (policy.spec.rules ?? []).some(
    (rule: Yaml) => rule.to === undefined || rule.to.some((to: Yaml) => operationMatches(to.operation ?? {})),
  );
}

/** Every AuthorizationPolicy with action CUSTOM in deploy/istio and in the docs' YAML blocks. */
function shippedCustomPolicies(): Array<{ name: string; policy: Yaml }> {
  const files = listRepoDir("deploy/istio")
    .filter((f) => f.endsWith(".yaml"))
    .flatMap((f) =>
      loadYamlDocuments(`deploy/istio/${f}`).map((policy) => ({ name: `deploy/istio/${f}`, policy })),
    );
  const docs = docsYamlBlocks()
    .filter(({ text }) => /^kind: AuthorizationPolicy$/m.test(text))
    .map(({ file, text }) => ({ name: file, policy: parse(text) as Yaml }));
  return [...files, ...docs].filter(
    ({ policy }) => policy.kind === "AuthorizationPolicy" && policy.spec?.action === "CUSTOM",
  );
}

describe("statically: what the shipped configs exempt (no Istio runs here)", () => {
  const exempt = [...new Set(shipped.flatMap(({ name, text }) => envoyExemptPaths(name, text)))];
  const policies = shippedCustomPolicies();
  const methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "get"];
  const paths = [
    HEALTH_PATH,
    ...NAMED_TRICKS,
    ...NORMALIZED_TO_HEALTH,
    ...LEADS.flatMap((l) => SPELLINGS.flatMap((s) => TAILS.map((t) => `${l}${s}${t}`))),
  ];

  it("every Envoy route without ext_authz matches GET/HEAD of one exact path and drops credentials", () => {
    assert.deepEqual(exempt, [HEALTH_PATH]);
  });

  it("every Istio CUSTOM policy names only exact, plain paths: the health path Envoy exempts", () => {
    assert.ok(policies.length >= 1);
    for (const { name, policy } of policies) {
      for (const rule of policy.spec.rules ?? []) {
        // `from` and `when` would leave requests unchecked by who sends them; other operation
        // fields (hosts, ports) are not modelled by istioChecks.
        assert.deepEqual(Object.keys(rule), ["to"], `${name}: a rule with more than \`to\``);
        for (const { operation, ...rest } of rule.to) {
          assert.deepEqual(rest, {}, name);
          for (const field of Object.keys(operation))
            assert.ok(OPERATION_FIELDS.includes(field), `${name}: ${field}`);
          for (const path of [...(operation.paths ?? []), ...(operation.notPaths ?? [])]) {
            assert.match(path, PLAIN_PATH, `${name}: ${path} is not one plain path`);
            assert.ok(exempt.includes(path), `${name}: ${path} is not the health path Envoy exempts`);
          }
        }
      }
    }
  });

  it("every Istio CUSTOM policy leaves unchecked only GET/HEAD of the exact health path (query aside)", () => {
    for (const { name, policy } of policies) {
      assert.equal(istioChecks(policy, "GET", HEALTH_PATH), false, `${name}: the health path is checked`);
      for (const method of methods)
        for (const path of paths) {
          if (istioChecks(policy, method, path)) continue;
          assert.ok(method === "GET" || method === "HEAD", `${name}: ${method} ${path} unchecked`);
          assert.equal(path.split(/[?#]/)[0], HEALTH_PATH, `${name}: ${method} ${path} unchecked`);
        }
    }
  });

  it("the Istio model is not vacuous: a prefix or an unrestricted method is caught", () => {
    const [first] = policies;
    assert.ok(first);
    const prefix = structuredClone(first.policy);
    prefix.spec.rules = [{ to: [{ operation: { notPaths: ["/healthz*"] } }] }];
    assert.equal(istioChecks(prefix, "GET", "/healthz/..;/admin"), false);
    for (const path of ["/healthz*", "/healthz/", "/healthz/{**}", "/a/../healthz", "//healthz"])
      assert.doesNotMatch(path, PLAIN_PATH);
    const anyMethod = structuredClone(first.policy);
    anyMethod.spec.rules = [{ to: [{ operation: { notPaths: [HEALTH_PATH] } }] }];
    assert.equal(istioChecks(anyMethod, "POST", HEALTH_PATH), false);
  });
});
