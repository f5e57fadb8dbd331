import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, beforeEach, describe, it } from "node:test";
import { egressAllowSetting } from "../../src/config/settings.ts";
import type { AuthProfile } from "../../src/execute/auth-profiles.ts";
import { readBoundedReply } from "../../src/execute/bounded-body.ts";
import {
  createEgressPolicy,
  type EgressPolicy,
  egressDenialOf,
  endpointOfUrl,
  type Resolver,
} from "../../src/execute/egress.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { executeOnce, testExecutor } from "../helpers/execute-once.ts";
import {
  itemSnapshot,
  openTokenStore,
  secretTable,
  sendJson,
  startServer,
  type TestServer,
  type TokenStoreFixture,
} from "./helpers.ts";

const API_KEY = "upstream-api-key-egress-0001";
const profile: AuthProfile = {
  type: "static",
  id: "p-1",
  kind: "api_key",
  in: "header",
  name: "x-api-key",
  secretRef: "ref:key",
};

let upstream: TestServer;
let platform: TestServer;
let tokens: TokenStoreFixture;

before(async () => {
  upstream = await startServer((_req, res) => sendJson(res, 200, { ok: true }));
  // Stands for a service of the platform (the authority, the IdP, …) on this machine.
  platform = await startServer((_req, res) => sendJson(res, 200, { internal: "platform data" }));
  tokens = await openTokenStore();
});
after(async () => {
  await upstream.close();
  await platform.close();
  await tokens.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  platform.requests.length = 0;
});

const portOf = (origin: string): number => Number(new URL(origin).port);

/** What the policy's fetch dispatcher does with a URL: "ok" or the refused rule. */
async function viaFetch(policy: EgressPolicy, url: string): Promise<string> {
  try {
    const response = await fetch(url, { dispatcher: policy.dispatcher } as unknown as RequestInit);
    await response.arrayBuffer();
    return "ok";
  } catch (error) {
    return egressDenialOf(error)?.rule ?? `error ${(error as Error).message}`;
  }
}

/** The same through a node:http agent of the policy (the forward proxy's client). */
function viaAgent(policy: EgressPolicy, url: string): Promise<string> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { agent: policy.httpAgent() }, (res) => {
      res.resume();
      res.on("end", () => resolve("ok"));
    });
    req.on("error", (error) => resolve(egressDenialOf(error)?.rule ?? `error ${error.message}`));
    req.end();
  });
}

const fixedResolver =
  (table: Record<string, string[]>): Resolver =>
  async (hostname) => {
    const addresses = table[hostname.toLowerCase()];
    if (addresses === undefined) throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
    return addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  };

describe("egress policy on the connection", () => {
  it("refuses loopback by default, on fetch and on node:http, in IPv4, IPv6 and mapped forms", async () => {
    const strict = createEgressPolicy();
    const port = portOf(upstream.origin);
    for (const url of [
      `http://127.0.0.1:${port}/`,
      `http://[::ffff:127.0.0.1]:${port}/`,
      `http://[::ffff:7f00:1]:${port}/`,
      `http://0x7f.1:${port}/`,
      `http://2130706433:${port}/`,
      `http://[::1]:${port}/`,
    ]) {
      assert.equal(await viaFetch(strict, url), "loopback", url);
      assert.equal(await viaAgent(strict, url), "loopback", url);
    }
    assert.equal(upstream.requests.length, 0);
    await strict.close();
  });

  it("refuses link-local, metadata and unspecified addresses without connecting", async () => {
    const strict = createEgressPolicy();
    const cases: Array<[string, string]> = [
      ["http://169.254.10.10/", "link_local"],
      ["http://169.254.169.254/latest/meta-data/", "metadata"],
      ["http://[fd00:ec2::254]/", "metadata"],
      ["http://100.100.100.200/", "metadata"],
      ["http://[::ffff:169.254.169.254]/", "metadata"],
      ["http://metadata.google.internal/computeMetadata/v1/", "metadata"],
      [`http://0.0.0.0:${portOf(upstream.origin)}/`, "unspecified"],
      ["http://[fe80::1]/", "link_local"],
      ["http://10.0.0.1/", "private"],
    ];
    for (const [url, rule] of cases) {
      assert.equal(await viaFetch(strict, url), rule, url);
      assert.equal(await viaAgent(strict, url), rule, url);
      assert.deepEqual(await strict.checkUrl(url), { ok: false, rule, resolved: false }, url);
    }
    assert.equal(upstream.requests.length, 0);
    await strict.close();
  });

  it("an allow-list entry opens exactly its address and port", async () => {
    const policy = egressAllowing([upstream.origin]);
    assert.equal(await viaFetch(policy, `${upstream.origin}/a`), "ok");
    assert.equal(await viaAgent(policy, `${upstream.origin}/b`), "ok");
    assert.equal(await viaFetch(policy, `http://[::ffff:127.0.0.1]:${portOf(upstream.origin)}/c`), "ok");
    assert.equal(upstream.requests.length, 3);
    // Same address, another port: still loopback.
    assert.equal(await viaFetch(policy, `${platform.origin}/`), "loopback");
    assert.equal(platform.requests.length, 0);
    await policy.close();
  });

  it("the platform's own services stay refused even where a CIDR allows their range", async () => {
    const policy = createEgressPolicy({
      allow: egressAllowSetting.parse("127.0.0.0/8", "egress-allow"),
      platformEndpoints: [endpointOfUrl(platform.origin)].filter((e) => e !== undefined),
    });
    assert.equal(await viaFetch(policy, `${upstream.origin}/`), "ok");
    assert.equal(await viaFetch(policy, `${platform.origin}/`), "platform_service");
    assert.equal(await viaAgent(policy, `${platform.origin}/`), "platform_service");
    assert.equal(platform.requests.length, 0);
    await policy.close();
  });

  it("an operator URL skips the gate only for what the process itself sends there: a partner's POST to it is gated", async () => {
    // The decision export and traces endpoints are operator URLs the process POSTs to; an
    // upstream call that names one exactly must not post a partner's body there ungated.
    const ingest = new URL(`${platform.origin}/ingest`);
    const policy = createEgressPolicy({
      operatorUrls: [ingest.href],
      platformEndpoints: [endpointOfUrl(platform.origin)].filter((e) => e !== undefined),
    });
    const send = async (method: string, body?: string): Promise<string> => {
      try {
        const reply = await policy.request(ingest, {
          method,
          headers: { "content-type": "application/json" },
          ...(body === undefined ? {} : { body }),
          signal: AbortSignal.timeout(5000),
        });
        await readBoundedReply(reply, method, 1024 * 1024);
        return "ok";
      } catch (error) {
        return egressDenialOf(error)?.rule ?? `error ${(error as Error).message}`;
      }
    };
    assert.equal(await send("GET"), "ok");
    assert.equal(await send("POST", '{"records":[{"forged":true}]}'), "platform_service");
    assert.equal(await send("PUT", "{}"), "platform_service");
    // A partner's OAuth token request (partnerFetch) is held the same way.
    const viaPartnerFetch = async (init: RequestInit): Promise<string> => {
      try {
        await (await policy.partnerFetch(ingest, init)).arrayBuffer();
        return "ok";
      } catch (error) {
        return egressDenialOf(error)?.rule ?? `error ${(error as Error).message}`;
      }
    };
    assert.equal(
      await viaPartnerFetch({ method: "POST", body: "grant_type=client_credentials" }),
      "platform_service",
    );
    assert.equal(await viaPartnerFetch({ method: "GET" }), "ok");
    assert.deepEqual(
      platform.requests.map((r) => r.method),
      ["GET", "GET"],
    );
    // The process's own export still posts there (fetch).
    await (await policy.fetch(ingest, { method: "POST", body: "{}" })).arrayBuffer();
    assert.equal(platform.requests.at(-1)?.method, "POST");
    await policy.close();
  });

  it("a platform service listening on every interface is refused at loopback and by its name", async () => {
    const port = portOf(platform.origin);
    const policy = createEgressPolicy({
      allow: egressAllowSetting.parse("127.0.0.0/8", "egress-allow"),
      platformEndpoints: [
        { host: "0.0.0.0", port },
        { host: "authority.platform.svc", port: 8443 },
      ],
      resolve: fixedResolver({ "authority.platform.svc": ["10.9.9.9"], "alias.test": ["10.9.9.9"] }),
    });
    assert.equal(await viaFetch(policy, `http://127.0.0.1:${port}/`), "platform_service");
    assert.deepEqual(await policy.checkUrl("http://authority.platform.svc:8443/"), {
      ok: false,
      rule: "platform_service",
      resolved: false,
    });
    // Another name for the same address and port is the same service.
    assert.deepEqual(await policy.checkUrl("http://alias.test:8443/", { resolve: true }), {
      ok: false,
      rule: "platform_service",
      resolved: true,
    });
    assert.equal(platform.requests.length, 0);
    await policy.close();
  });

  it("a name that resolves to loopback at call time is refused on the resolved address (DNS rebinding)", async () => {
    const port = portOf(platform.origin);
    let answer = "93.184.216.34";
    const policy = createEgressPolicy({ resolve: async () => [{ address: answer, family: 4 }] });
    // At import, the name looks public…
    assert.deepEqual(await policy.checkUrl(`http://rebind.test:${port}/`, { resolve: true }), { ok: true });
    // …and at call time it points at this machine.
    answer = "127.0.0.1";
    assert.equal(await viaFetch(policy, `http://rebind.test:${port}/`), "loopback");
    assert.equal(await viaAgent(policy, `http://rebind.test:${port}/`), "loopback");
    answer = "::ffff:169.254.169.254";
    assert.equal(await viaFetch(policy, `http://rebind.test:${port}/`), "metadata");
    assert.equal(platform.requests.length, 0);
    await policy.close();
  });

  it("a host name entry opens that name (its port, if given) on the addresses it resolves to, nothing else", async () => {
    const port = portOf(upstream.origin);
    const policy = createEgressPolicy({
      allow: egressAllowSetting.parse(
        `orders.shop.svc:${port},any-port.shop.svc,meta.shop.svc`,
        "egress-allow",
      ),
      platformEndpoints: [endpointOfUrl(platform.origin)].filter((e) => e !== undefined),
      resolve: fixedResolver({
        "orders.shop.svc": ["127.0.0.1"],
        "any-port.shop.svc": ["127.0.0.1"],
        "other.shop.svc": ["127.0.0.1"],
        "meta.shop.svc": ["169.254.169.254"],
      }),
    });
    // The listed name, on fetch and node:http, in any case.
    assert.equal(await viaFetch(policy, `http://orders.shop.svc:${port}/a`), "ok");
    assert.equal(await viaAgent(policy, `http://ORDERS.shop.svc:${port}/b`), "ok");
    assert.deepEqual(await policy.checkUrl(`http://orders.shop.svc:${port}/`, { resolve: true }), {
      ok: true,
    });
    assert.equal(upstream.requests.length, 2);
    // Another name for the same address, the address itself, and the listed name on another port.
    assert.equal(await viaFetch(policy, `http://other.shop.svc:${port}/`), "loopback");
    assert.equal(await viaFetch(policy, `http://127.0.0.1:${port}/`), "loopback");
    assert.equal(await viaFetch(policy, `http://orders.shop.svc:${port + 1}/`), "loopback");
    // A name entry without a port opens every port, but never the platform's own services or metadata.
    assert.equal(await viaFetch(policy, `http://any-port.shop.svc:${port}/`), "ok");
    assert.equal(
      await viaFetch(policy, `http://any-port.shop.svc:${portOf(platform.origin)}/`),
      "platform_service",
    );
    assert.equal(await viaFetch(policy, "http://meta.shop.svc/"), "metadata");
    assert.equal(upstream.requests.length, 3);
    assert.equal(platform.requests.length, 0);
    await policy.close();
  });

  it("one refused address among several refuses the name", async () => {
    const policy = createEgressPolicy({
      resolve: fixedResolver({ "mixed.test": ["93.184.216.34", "127.0.0.1"] }),
    });
    assert.deepEqual(await policy.checkUrl("http://mixed.test/", { resolve: true }), {
      ok: false,
      rule: "loopback",
      resolved: true,
    });
    await policy.close();
  });
});

describe("executor and the egress policy", () => {
  const executorWith = (egress: EgressPolicy, secrets = secretTable({ "ref:key": API_KEY })) => ({
    secrets,
    executor: testExecutor({
      secretResolver: secrets.resolve,
      tokenSetStore: tokens.tokenSetStore,
      constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
      egress,
    }),
  });

  const refusal = async (promise: Promise<unknown>): Promise<ExecutionError> => {
    try {
      await promise;
    } catch (error) {
      assert.ok(error instanceof ExecutionError, String(error));
      return error;
    }
    assert.fail("expected a refusal");
  };

  it("a literal internal destination is egress_denied (403) before any secret is loaded", async () => {
    const { executor, secrets } = executorWith(createEgressPolicy());
    for (const [origin, rule] of [
      [platform.origin, "loopback"],
      ["http://169.254.169.254", "metadata"],
      [`http://[::ffff:127.0.0.1]:${portOf(platform.origin)}`, "loopback"],
    ] as const) {
      const error = await refusal(
        executeOnce(executor, {
          snapshot: itemSnapshot(origin),
          args: { path: { id: "1" } },
          authProfile: profile,
          partnerId: "p",
        }),
      );
      assert.equal(error.code, "egress_denied");
      assert.equal(error.status, 403);
      assert.equal(error.details?.rule, rule);
      assert.ok(!JSON.stringify(error.toJSON()).includes("127.0.0.1"));
    }
    assert.deepEqual(secrets.calls, []);
    assert.equal(platform.requests.length, 0);
  });

  it("a name that rebinds to loopback at call time is egress_denied and the upstream receives nothing", async () => {
    const port = portOf(platform.origin);
    const policy = createEgressPolicy({ resolve: fixedResolver({ "rebind.test": ["127.0.0.1"] }) });
    const { executor } = executorWith(policy);
    const error = await refusal(
      executeOnce(executor, {
        snapshot: itemSnapshot(`http://rebind.test:${port}`),
        args: { path: { id: "1" } },
        authProfile: profile,
        partnerId: "p",
      }),
    );
    assert.equal(error.code, "egress_denied");
    assert.equal(error.details?.rule, "loopback");
    assert.equal(platform.requests.length, 0);
    await policy.close();
  });

  it("an OAuth token endpoint on an internal address is refused the same way", async () => {
    const { executor } = executorWith(
      egressAllowing([upstream.origin]),
      secretTable({ "ref:cs": "client-secret" }),
    );
    const error = await refusal(
      executeOnce(executor, {
        snapshot: itemSnapshot(upstream.origin),
        args: { path: { id: "1" } },
        authProfile: {
          type: "oauth_client_credentials",
          id: "cc",
          tokenUrl: `${platform.origin}/token`,
          clientId: "c",
          clientSecretRef: "ref:cs",
          scopes: [],
        },
        partnerId: "p",
      }),
    );
    assert.equal(error.code, "egress_denied");
    assert.equal(error.details?.issue, "token_endpoint");
    assert.equal(platform.requests.length, 0);
    assert.equal(upstream.requests.length, 0);
  });
});
