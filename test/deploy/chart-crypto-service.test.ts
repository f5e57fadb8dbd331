import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type HttpReply, httpRequest } from "../helpers/http-client.ts";
import { createLogCapture } from "../helpers/log-capture.ts";
import { type PeerProcess, startPeerProcess } from "../helpers/peer-process.ts";
import { type RestartableIdp, startRestartableIdp } from "../helpers/restartable-idp.ts";
import { stablePort } from "../helpers/stable-port.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { itemsOpenApi } from "../helpers/upstream-api.ts";
import { isObj, type Obj, repoPath } from "./helpers.ts";
import {
  asKubelet,
  configMapData,
  deploymentPod,
  type Kubelet,
  renderChart,
  renderError,
} from "./rendered-pod.ts";

/**
 * Custody by default (decision 2601): with only the required values (and the test's issuer) the
 * chart renders the crypto service and the authority in crypto mode pointed at it, with no KEK
 * for the authority and no KEK value anywhere. Then both are started as their pods run them —
 * `authority crypto` and `authority serve` with exactly the rendered environment and volumes
 * (the chart's generated service-identity Secret, the operator's IdP-account Secret, the crypto
 * service's PVC as a directory that outlives its process) — against a real identity provider.
 * Changed: the listen addresses, and the crypto Service's in-cluster URL pointed at the crypto
 * process (what cluster DNS does). Nobody provisions an owner or writes a credentials file.
 */
describe("the chart's crypto service, started as rendered: custody with no operator step at the crypto service", () => {
  const SERVICE_ACCOUNT = { username: "authority-svc", password: `pw-${randomBytes(12).toString("hex")}` };
  const PARTNER = "acme";
  const logs = createLogCapture("silent");
  let dir: TempDir;
  let idp: RestartableIdp;
  let objects: Obj[];
  const processes: PeerProcess[] = [];

  before(async () => {
    dir = await makeTempDir("chart-crypto-");
    idp = await startRestartableIdp({
      dir: dir.path,
      name: "idp",
      audience: "authority",
      logs,
      setup: (server) => server.directory.addServiceAccount({ ...SERVICE_ACCOUNT, scopes: [] }),
    });
    objects = await renderChart([
      "--set",
      `authority.issuer=${idp.issuer}`,
      "--set",
      `authority.policyProtection.tokenUrl=${idp.tokenEndpoint}`,
      "--set",
      `cryptoService.serviceIdentity.allowedSubjects={${SERVICE_ACCOUNT.username}}`,
      // the catalog's upstream (never called), opened as a platform admin would
      "--set-json",
      'egress.allow=["127.0.0.1:9"]',
    ]);
  });
  after(async () => {
    for (const child of processes) await child.kill();
    await idp?.stop();
    await dir?.cleanup();
  });

  it("renders the crypto service and crypto mode with only the required values, and no KEK for the authority", async () => {
    const defaults = await renderChart([]);
    const authority = configMapData(defaults, "authority");
    assert.equal(authority.AUTHORITY_POLICY_PROTECTION, "crypto");
    assert.equal(
      authority.AUTHORITY_CRYPTO_URL,
      "http://authority-crypto.authority-system.svc.cluster.local:8082",
    );
    const crypto = deploymentPod(defaults, "authority-crypto");
    assert.deepEqual(crypto.container.args, ["crypto"]);
    const service = defaults.find(
      (o) => o.kind === "Service" && isObj(o.metadata) && o.metadata.name === "authority-crypto",
    );
    assert.ok(service !== undefined && isObj(service.spec));
    assert.equal((service.spec.ports as Obj[])[0]?.port, 8082);
    // The authority's Deployment and ConfigMap name no KEK; no KEK value is rendered anywhere
    // (the crypto service generates its own on its volume, or mounts kek.existingSecret).
    const authorityObjects = defaults.filter(
      (o) =>
        (o.kind === "Deployment" || o.kind === "ConfigMap") &&
        isObj(o.metadata) &&
        o.metadata.name === "authority",
    );
    assert.doesNotMatch(JSON.stringify(authorityObjects), /kek/i);
    assert.doesNotMatch(JSON.stringify(defaults), /AUTHORITY_KEK"|"AUTHORITY_KEK=/);
    assert.deepEqual(
      (crypto.container.env as Obj[]).map((e) => e.name),
      ["AUTHORITY_INIT_KEK"],
    );
    const claim = defaults.find(
      (o) =>
        o.kind === "PersistentVolumeClaim" && isObj(o.metadata) && o.metadata.name === "authority-crypto",
    );
    assert.ok(claim !== undefined && isObj(claim.metadata) && isObj(claim.metadata.annotations));
    assert.equal(claim.metadata.annotations["helm.sh/resource-policy"], "keep");
    // The embedded mode, chosen, renders the KEK path as before and no crypto service.
    const embedded = await renderChart(["--set", "authority.policyProtection.mode=embedded"]);
    assert.equal(configMapData(embedded, "authority").AUTHORITY_POLICY_PROTECTION, "embedded");
    assert.deepEqual(deploymentPod(embedded, "authority").container.env, [
      { name: "AUTHORITY_INIT_KEK", value: "true" },
    ]);
    assert.equal(
      embedded.some((o) => isObj(o.metadata) && String(o.metadata.name).startsWith("authority-crypto")),
      false,
    );
  });

  const startCrypto = async (kubelet: Kubelet, port: number): Promise<PeerProcess> => {
    const rendered = deploymentPod(objects, "authority-crypto");
    const child = startPeerProcess({
      command: process.execPath,
      args: ["bin/authority.ts", ...(rendered.container.args as string[]), "--listen", `127.0.0.1:${port}`],
      cwd: repoPath("."),
      env: { ...kubelet.env, PATH: process.env.PATH ?? "" },
    });
    processes.push(child);
    await waitReady(`http://127.0.0.1:${port}/readyz`, child);
    return child;
  };

  it("crypto mode: create, assign, allow, rotate, revoke, delete — the crypto service restarted on its volume keeps the identity", async () => {
    const cryptoPod = deploymentPod(objects, "authority-crypto");
    const cryptoKubelet = await asKubelet(objects, cryptoPod, {}, join(dir.path, "crypto-pod"));
    assert.equal(cryptoKubelet.env.AUTHORITY_CRYPTO_SERVICE_OWNER, "service:authority");
    const cryptoPort = await stablePort();
    let crypto = await startCrypto(cryptoKubelet, cryptoPort);
    assert.match(crypto.output(), /"outcome":"provisioned"/);

    const authorityPod = deploymentPod(objects, "authority");
    const kubelet = await asKubelet(
      objects,
      authorityPod,
      { secrets: { "authority-crypto-service-account": SERVICE_ACCOUNT } },
      join(dir.path, "authority-pod"),
    );
    assert.equal(kubelet.env.AUTHORITY_POLICY_PROTECTION, "crypto");
    assert.deepEqual(
      Object.keys(kubelet.env).filter((name) => /KEK/.test(name)),
      [],
    );
    const port = await stablePort();
    const serve = startPeerProcess({
      command: process.execPath,
      args: [
        "bin/authority.ts",
        ...(authorityPod.container.args as string[]),
        "--listen",
        `127.0.0.1:${port}`,
      ],
      cwd: repoPath("."),
      // cluster DNS: the crypto Service's name reaches the crypto process
      env: {
        ...kubelet.env,
        AUTHORITY_CRYPTO_URL: `http://127.0.0.1:${cryptoPort}`,
        PATH: process.env.PATH ?? "",
      },
    });
    processes.push(serve);
    const url = `http://127.0.0.1:${port}`;
    await waitReady(`${url}/readyz`, serve);
    assert.doesNotMatch(serve.output(), /EMBEDDED/);

    const token = async (subject: string, roles: string[] = []) =>
      (await idp.server().issueToken({ subject, roles, lifetimeSec: 3600 })).accessToken;
    const call = async (method: string, path: string, body?: unknown, bearer?: string): Promise<HttpReply> =>
      httpRequest(`${url}${path}`, {
        method,
        headers: bearer === undefined ? {} : { authorization: `Bearer ${bearer}` },
        ...(body === undefined ? {} : { json: body }),
        timeoutMs: 20_000,
      });
    const admin = async (method: string, path: string, body: unknown, status: number): Promise<HttpReply> => {
      const reply = await call(method, path, body, await token("root-admin", ["admin"]));
      assert.equal(reply.status, status, `${method} ${path}: ${reply.text}\n${serve.output()}`);
      return reply;
    };
    const partner = `/partners/${PARTNER}`;
    await admin("POST", "/partners", { partner_id: PARTNER, name: "Acme" }, 201);
    await admin(
      "PUT",
      `${partner}/caab/auth-profiles/items-key`,
      {
        type: "static",
        kind: "api_key",
        in: "header",
        name: "x-api-key",
        secret: `up-${randomBytes(8).toString("hex")}`,
      },
      201,
    );
    await admin(
      "POST",
      `${partner}/api-specs/import-openapi`,
      {
        capability_id: "items",
        name: "Items",
        document: itemsOpenApi(),
        upstream_base_url: "http://127.0.0.1:9",
        auth_profile_ref: "items-key",
      },
      201,
    );
    const assign = (subject: string) =>
      admin(
        "PUT",
        `${partner}/caab/subjects/${subject}/policies/items`,
        { allowed_permission_ids: ["items:get:/items/{itemId}"], ttl_seconds: 3600 },
        200,
      );
    const authorize = async (subject: string) =>
      call(
        "POST",
        "/v1/authorize-invocation",
        { subject: { subject_id: subject }, capability_id: "items", method: "GET", path: "/items/7" },
        await token(subject),
      );
    const create = (subject: string) =>
      admin(
        "POST",
        `${partner}/users`,
        { subject_id: subject, subject_type: "agent", display_name: subject },
        201,
      );

    await create("agent-1");
    await assign("agent-1");
    assert.equal((await authorize("agent-1")).json.status, "allowed");
    await admin("POST", `${partner}/users/agent-1/rotate-keys`, undefined, 200);
    await assign("agent-1");
    assert.equal((await authorize("agent-1")).json.status, "allowed", "a policy under the rotated keys");
    await admin("POST", `${partner}/caab/subjects/agent-1/policy/revoke`, {}, 200);
    assert.notEqual((await authorize("agent-1")).json.status, "allowed");
    await admin("DELETE", `${partner}/users/agent-1`, undefined, 204);

    // The crypto pod restarted on the same volume: the identity is unchanged, the keys are kept.
    await crypto.stop();
    crypto = await startCrypto(
      await asKubelet(objects, cryptoPod, {}, join(dir.path, "crypto-pod")),
      cryptoPort,
    );
    assert.match(crypto.output(), /"outcome":"unchanged"/);
    await create("agent-2");
    await assign("agent-2");
    assert.equal((await authorize("agent-2")).json.status, "allowed");
    for (const child of [serve, crypto]) {
      const output = child.output();
      for (const secret of [SERVICE_ACCOUNT.password, ...Object.values(secretsOf(objects))]) {
        assert.ok(!output.includes(secret), "no credential in a log");
      }
    }
  });
});

function secretsOf(objects: readonly Obj[]): Record<string, string> {
  const identity = objects.find(
    (o) =>
      o.kind === "Secret" && isObj(o.metadata) && o.metadata.name === "authority-crypto-service-identity",
  );
  assert.ok(identity !== undefined && isObj(identity.data));
  return Object.fromEntries(
    Object.entries(identity.data).map(([key, value]) => [
      key,
      Buffer.from(String(value), "base64").toString("utf8"),
    ]),
  );
}

async function waitReady(url: string, child: PeerProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    assert.ok(child.running, `exited:\n${child.output()}`);
    const reply = await httpRequest(url, { method: "GET", timeoutMs: 2000 }).catch(() => undefined);
    if (reply?.status === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  assert.fail(`not ready: ${url}\n${child.output()}`);
}

describe("chart: sidecar credentials per namespace, scoped or refused; the Ingress", () => {
  it("renders one Secret per namespace and the clients to register, each scoped to its partner and capabilities", async () => {
    const objects = await renderChart(["-f", repoPath("charts/authority/ci/ingress-values.yaml")]);
    const secrets = objects.filter(
      (o) => o.kind === "Secret" && isObj(o.metadata) && o.metadata.name === "authority-sidecar-credentials",
    );
    assert.deepEqual(secrets.map((o) => (o.metadata as Obj).namespace).sort(), ["platform-tools", "shop"]);
    for (const secret of secrets) {
      assert.ok(isObj(secret.data));
      const clientSecret = Buffer.from(String(secret.data["client-secret"]), "base64").toString("utf8");
      assert.match(clientSecret, /^[A-Za-z0-9]{48}$/);
    }
    const clients = JSON.parse(configMapData(objects, "authority-sidecar-clients")["clients.json"] ?? "[]");
    assert.deepEqual(clients, [
      {
        client_id: "sidecar-shop",
        claims: { partner_id: "acme" },
        scopes: [
          "authority/sidecar",
          "authority/sidecar.capability:cap_payments",
          "authority/sidecar.capability:cap_orders",
        ],
        secret: { namespace: "shop", name: "authority-sidecar-credentials", key: "client-secret" },
      },
      {
        client_id: "sidecar-platform-tools",
        scopes: ["authority/sidecar", "authority/sidecar.platform"],
        secret: { namespace: "platform-tools", name: "authority-sidecar-credentials", key: "client-secret" },
      },
    ]);
    const ingress = objects.find((o) => o.kind === "Ingress");
    assert.ok(ingress !== undefined && isObj(ingress.spec));
    assert.equal(ingress.spec.ingressClassName, "nginx");
    assert.equal(JSON.stringify(ingress.spec.rules).includes('"name":"authority"'), true);
    assert.equal(
      (await renderChart([])).some((o) => o.kind === "Ingress"),
      false,
      "off by default",
    );
  });

  const refusals: Array<[string, string[], RegExp]> = [
    [
      "a sidecar credential without a partner (it would read every partner's secrets)",
      ["--set-json", 'sidecarCredentials=[{"namespace":"shop","capabilities":["cap_a"]}]'],
      /sidecarCredentials\[shop\] needs partnerId and at least one capability .*or platformWide: true/,
    ],
    [
      "a partner's sidecar credential without a capability",
      ["--set-json", 'sidecarCredentials=[{"namespace":"shop","partnerId":"acme"}]'],
      /sidecarCredentials\[shop\] needs partnerId and at least one capability/,
    ],
    [
      "a platform-wide credential that also names a partner",
      ["--set-json", 'sidecarCredentials=[{"namespace":"ops","platformWide":true,"partnerId":"acme"}]'],
      /sidecarCredentials\[ops\]: platformWide reads every partner's records and secrets; it takes no partnerId/,
    ],
    ["an Ingress without hosts", ["--set", "ingress.enabled=true"], /ingress\.enabled needs ingress\.hosts/],
  ];
  for (const [what, args, message] of refusals) {
    it(`refuses ${what}`, async () => {
      const error = await renderError(args);
      assert.ok(error !== undefined, `${what}: rendered`);
      assert.match(error, message);
    });
  }
});
