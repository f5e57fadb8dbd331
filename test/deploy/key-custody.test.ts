import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { KEY_RINGS_COLLECTION } from "../../src/policy/stored-key-rings.ts";
import { createDevCertificate } from "../../src/servers/managed/dev-certificate.ts";
import { createManagedServer, type ManagedServer } from "../../src/servers/managed/server.ts";
import { openStore } from "../../src/store/index.ts";
import { type RestartableCrypto, startRestartableCrypto } from "../helpers/crypto-service.ts";
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
  envEntries,
  mounts,
  renderChart,
  renderError,
  volumes,
} from "./rendered-pod.ts";

/**
 * The chart's key custody (authority.policyProtection): what the authority pod gets in each
 * mode, the combinations the chart refuses, and — the real check — `authority serve` started
 * with exactly the environment and mounted files the rendered Deployment gives its container,
 * against a real identity provider, crypto service and managed API: it becomes ready, protects
 * and opens policies through the crypto service, and holds no KEK.
 */

const CREDENTIALS_SECRET = "authority-crypto-credentials";
/** Your own crypto service (not the chart's) with your credentials Secret. */
const external = ["--set", "cryptoService.enabled=false"];
const embedded = (...more: string[]) => ["--set", "authority.policyProtection.mode=embedded", ...more];
const crypto = (...more: string[]) => [
  ...external,
  "--set",
  "authority.policyProtection.mode=crypto",
  "--set",
  `authority.policyProtection.credentialsSecret=${CREDENTIALS_SECRET}`,
  ...more,
];
const managed = (...more: string[]) => [
  ...external,
  "--set",
  "authority.policyProtection.mode=managed",
  "--set",
  `authority.policyProtection.credentialsSecret=${CREDENTIALS_SECRET}`,
  ...more,
];

const names = (list: Obj[]) => list.map((item) => String(item.name)).sort();
/** Everything rendered for the authority service (Deployment and ConfigMap), as text. */
const authorityText = (objects: Obj[]) =>
  JSON.stringify(
    objects.filter(
      (o) =>
        (o.kind === "Deployment" || o.kind === "ConfigMap") &&
        isObj(o.metadata) &&
        o.metadata.name === "authority",
    ),
  );

describe("chart key custody: what the authority pod gets", () => {
  it("embedded (chosen explicitly): a KEK created by the explicit init, no credentials, no crypto service", async () => {
    const objects = await renderChart(embedded());
    const { pod, container } = deploymentPod(objects, "authority");
    assert.equal(configMapData(objects, "authority").AUTHORITY_POLICY_PROTECTION, "embedded");
    assert.deepEqual(envEntries(container), [{ name: "AUTHORITY_INIT_KEK", value: "true" }]);
    assert.deepEqual(names(volumes(pod)), ["state", "tmp"]);
    assert.doesNotMatch(authorityText(objects), /CREDENTIALS|MANAGED_CA|crypto-credentials/);
    assert.equal(
      objects.some((o) => isObj(o.metadata) && String(o.metadata.name).startsWith("authority-crypto")),
      false,
    );
  });

  it("embedded with a KEK Secret: the KEK file mounted read-only, no init", async () => {
    const objects = await renderChart(embedded("--set", "authority.kek.existingSecret=authority-kek"));
    const { pod, container } = deploymentPod(objects, "authority");
    assert.deepEqual(envEntries(container), [
      { name: "AUTHORITY_KEK_FILE", value: "/var/run/authority/kek/kek" },
    ]);
    assert.deepEqual(names(volumes(pod)), ["kek", "state", "tmp"]);
    assert.deepEqual(
      mounts(container).find((m) => m.name === "kek"),
      { name: "kek", mountPath: "/var/run/authority/kek", readOnly: true },
    );
  });

  it("crypto: the credentials file mounted read-only from the Secret, and no KEK anywhere", async () => {
    const objects = await renderChart(
      crypto(
        "--set",
        "authority.cryptoUrl=http://crypto.crypto-system.svc:8082",
        "--set",
        "authority.policyProtection.tokenUrl=https://login.example.com/oauth2/token",
      ),
    );
    const { pod, container } = deploymentPod(objects, "authority");
    const data = configMapData(objects, "authority");
    assert.equal(data.AUTHORITY_POLICY_PROTECTION, "crypto");
    assert.equal(data.AUTHORITY_CRYPTO_URL, "http://crypto.crypto-system.svc:8082");
    assert.equal(data.AUTHORITY_CRYPTO_TOKEN_URL, "https://login.example.com/oauth2/token");
    assert.deepEqual(envEntries(container), [
      {
        name: "AUTHORITY_CRYPTO_CREDENTIALS_FILE",
        value: "/var/run/authority/crypto-credentials/credentials.json",
      },
    ]);
    assert.deepEqual(names(volumes(pod)), ["crypto-credentials", "state", "tmp"]);
    assert.deepEqual(
      volumes(pod).find((v) => v.name === "crypto-credentials"),
      {
        name: "crypto-credentials",
        secret: {
          secretName: CREDENTIALS_SECRET,
          defaultMode: 0o440,
          items: [{ key: "credentials.json", path: "credentials.json" }],
        },
      },
    );
    assert.deepEqual(
      mounts(container).find((m) => m.name === "crypto-credentials"),
      { name: "crypto-credentials", mountPath: "/var/run/authority/crypto-credentials", readOnly: true },
    );
    // No KEK file, no init, no KEK volume, no KEK value: the word appears nowhere for the service.
    assert.doesNotMatch(authorityText(objects), /kek/i);
  });

  it("managed: the managed API's CA from a Secret or a ConfigMap, mounted read-only; no KEK anywhere", async () => {
    for (const [source, volume] of [
      [
        "existingSecret",
        {
          secret: { secretName: "crypto-ca", defaultMode: 0o444, items: [{ key: "ca.pem", path: "ca.pem" }] },
        },
      ],
      [
        "existingConfigMap",
        { configMap: { name: "crypto-ca", defaultMode: 0o444, items: [{ key: "ca.pem", path: "ca.pem" }] } },
      ],
    ] as const) {
      const objects = await renderChart(
        managed(
          "--set",
          "authority.managedUrl=https://managed.crypto-system.svc:8081",
          "--set",
          `authority.policyProtection.managedCa.${source}=crypto-ca`,
          "--set",
          "authority.policyProtection.managedCa.key=ca.pem",
          "--set",
          "authority.policyProtection.credentialsKey=service.json",
        ),
      );
      const { pod, container } = deploymentPod(objects, "authority");
      const data = configMapData(objects, "authority");
      assert.equal(data.AUTHORITY_POLICY_PROTECTION, "managed");
      assert.equal(data.AUTHORITY_MANAGED_URL, "https://managed.crypto-system.svc:8081");
      assert.deepEqual(envEntries(container), [
        {
          name: "AUTHORITY_CRYPTO_CREDENTIALS_FILE",
          value: "/var/run/authority/crypto-credentials/service.json",
        },
        { name: "AUTHORITY_MANAGED_CA_FILE", value: "/var/run/authority/managed-ca/ca.pem" },
      ]);
      assert.deepEqual(names(volumes(pod)), ["crypto-credentials", "managed-ca", "state", "tmp"], source);
      assert.deepEqual(
        volumes(pod).find((v) => v.name === "managed-ca"),
        { name: "managed-ca", ...volume },
      );
      for (const name of ["crypto-credentials", "managed-ca"]) {
        assert.equal(mounts(container).find((m) => m.name === name)?.readOnly, true, name);
      }
      assert.doesNotMatch(authorityText(objects), /kek/i);
    }
  });

  it("several replicas share an external Redis store and no KEK in crypto and managed modes", async () => {
    for (const mode of [crypto, managed]) {
      const objects = await renderChart(
        mode(
          "--set",
          "authority.replicaCount=3",
          "--set",
          "authority.store.backend=redis",
          "--set",
          "redis.externalUrl=redis://redis.cache.svc.cluster.local:6379/0",
        ),
      );
      const deployment = objects.find(
        (o) => o.kind === "Deployment" && isObj(o.metadata) && o.metadata.name === "authority",
      );
      assert.ok(deployment !== undefined && isObj(deployment.spec));
      assert.equal(deployment.spec.replicas, 3);
      assert.doesNotMatch(authorityText(objects), /kek/i);
    }
  });
});

describe("chart key custody: combinations refused with a clear message", () => {
  const refusals: Array<[string, string[], RegExp]> = [
    [
      "crypto mode on a crypto service of your own without a credentials Secret",
      [...external, "--set", "authority.policyProtection.mode=crypto"],
      /policyProtection\.mode=crypto with cryptoService\.enabled=false needs authority\.policyProtection\.credentialsSecret/,
    ],
    [
      "managed mode on a crypto service of your own without a credentials Secret",
      [...external, "--set", "authority.policyProtection.mode=managed"],
      /policyProtection\.mode=managed with cryptoService\.enabled=false needs authority\.policyProtection\.credentialsSecret/,
    ],
    [
      "a credentials Secret beside the chart's crypto service (which provisions the identity itself)",
      ["--set", `authority.policyProtection.credentialsSecret=${CREDENTIALS_SECRET}`],
      /credentialsSecret is for a crypto service of your own/,
    ],
    [
      "a crypto URL of your own beside the chart's crypto service",
      ["--set", "authority.cryptoUrl=http://crypto.elsewhere:8082"],
      /authority\.cryptoUrl names a crypto service of your own, but cryptoService\.enabled deploys the chart's/,
    ],
    [
      "the chart's crypto service with a KEK Secret for the authority",
      ["--set", "authority.kek.existingSecret=authority-kek"],
      /mode=crypto holds no key-encryption key/,
    ],
    [
      "crypto mode with a KEK Secret",
      crypto("--set", "authority.kek.existingSecret=authority-kek"),
      /mode=crypto holds no key-encryption key .*remove authority\.kek\.existingSecret/,
    ],
    [
      "managed mode with a KEK Secret",
      managed("--set", "authority.kek.existingSecret=authority-kek"),
      /mode=managed holds no key-encryption key/,
    ],
    [
      "a credentials Secret in the embedded mode (a KEK would be kept while the operator thinks not)",
      embedded("--set", `authority.policyProtection.credentialsSecret=${CREDENTIALS_SECRET}`),
      /are for mode crypto or managed, but authority\.policyProtection\.mode is embedded/,
    ],
    [
      "a managed-API CA in crypto mode",
      crypto("--set", "authority.policyProtection.managedCa.existingSecret=crypto-ca"),
      /managedCa is the CA of the managed crypto API: only for mode managed/,
    ],
    [
      "a managed-API CA from a Secret and a ConfigMap",
      managed(
        "--set",
        "authority.policyProtection.managedCa.existingSecret=crypto-ca",
        "--set",
        "authority.policyProtection.managedCa.existingConfigMap=crypto-ca",
      ),
      /set existingSecret or existingConfigMap, not both/,
    ],
    [
      "the embedded mode on the shared Redis store without a KEK Secret",
      embedded(
        "--set",
        "authority.store.backend=redis",
        "--set",
        "redis.externalUrl=redis://redis.cache.svc.cluster.local:6379/0",
      ),
      /mode=embedded on store\.backend=redis needs authority\.kek\.existingSecret/,
    ],
    [
      "several embedded replicas without a shared KEK (the schema)",
      embedded(
        "--set",
        "authority.replicaCount=2",
        "--set",
        "authority.store.backend=redis",
        "--set",
        "redis.externalUrl=redis://redis.cache.svc.cluster.local:6379/0",
      ),
      /values don't meet the specifications of the schema/,
    ],
    [
      "several crypto replicas on SQLite (the schema)",
      crypto("--set", "authority.replicaCount=2"),
      /values don't meet the specifications of the schema/,
    ],
    [
      "a mode that does not exist (the schema)",
      ["--set", "authority.policyProtection.mode=kms"],
      /policyProtection\/mode/,
    ],
  ];
  for (const [what, args, message] of refusals) {
    it(`refuses ${what}`, async () => {
      const error = await renderError(args);
      assert.ok(error !== undefined, `${what}: rendered`);
      assert.match(error, message);
    });
  }
});

/**
 * `authority serve` as the pod runs it. The chart is rendered with the test's real URLs as
 * values; the process gets the rendered environment and the materialised volumes and nothing
 * else, except `--listen` on a free loopback port (the pod listens on 0.0.0.0:8080).
 */
describe("authority serve with exactly what the rendered pod gives it", () => {
  const SERVICE_ACCOUNT = { username: "authority-svc", password: `pw-${randomBytes(12).toString("hex")}` };
  const PARTNER = "acme";
  const logs = createLogCapture("silent");
  let dir: TempDir;
  let idp: RestartableIdp;
  let cryptoService: RestartableCrypto;
  let managedApi: ManagedServer;
  let managedUrl: string;
  let managedCa: string;
  const serviceKeys = () => ({
    api_key: `apk_${randomBytes(8).toString("hex")}`,
    access_key: `ak_${randomBytes(8).toString("hex")}`,
    secret_key: `sk_${randomBytes(8).toString("hex")}`,
  });
  type Keys = ReturnType<typeof serviceKeys>;
  const keysOf = (k: Keys) => ({ apiKey: k.api_key, accessKey: k.access_key, secretKey: k.secret_key });
  const credentials: { service: Keys; subjects: Record<string, Keys> } = {
    service: serviceKeys(),
    subjects: {},
  };
  const processes: PeerProcess[] = [];

  before(async () => {
    dir = await makeTempDir("chart-custody-");
    idp = await startRestartableIdp({
      dir: dir.path,
      name: "idp",
      audience: "authority",
      logs,
      setup: (server) => server.directory.addServiceAccount({ ...SERVICE_ACCOUNT, scopes: [] }),
    });
    cryptoService = await startRestartableCrypto({
      dir: dir.path,
      logs,
      issuer: idp.issuer,
      jwksUri: idp.jwksUri,
    });
    // The chart's default service identity is `authority`: its owner, and one subject per mode.
    await cryptoService
      .server()
      .provisionOwner({ id: "service:authority", kind: "service", credentials: keysOf(credentials.service) });
    for (const agent of ["agent-crypto", "agent-crypto-late", "agent-managed", "agent-managed-late"]) {
      const keys = serviceKeys();
      credentials.subjects[agent] = keys;
      await cryptoService
        .server()
        .provisionOwner({ id: `subject:${agent}`, kind: "subject", credentials: keysOf(keys) });
    }
    const certificate = await createDevCertificate();
    managedCa = certificate.cert;
    managedApi = await createManagedServer({
      idpTokenUrl: idp.tokenEndpoint,
      cryptoUrl: cryptoService.url,
      upstreamTimeoutMs: 3000,
      https: { key: certificate.key, cert: certificate.cert },
      rateLimit: { perUserPerMinute: 1_000_000, burst: 100_000 },
      logger: logs.logger("managed"),
    });
    managedUrl = await managedApi.listen({ host: "127.0.0.1", port: 0 });
  });
  after(async () => {
    for (const child of processes) await child.kill();
    await managedApi?.close();
    await cryptoService?.close();
    await idp?.stop();
    await dir?.cleanup();
  });

  const token = async (subject: string, roles: string[] = []) =>
    (await idp.server().issueToken({ subject, roles, lifetimeSec: 3600 })).accessToken;

  for (const mode of ["crypto", "managed"] as const) {
    it(`${mode} mode: ready, protects and opens policies through the crypto service, no KEK`, async () => {
      const agent = `agent-${mode}`;
      const late = `agent-${mode}-late`;
      const podDir = join(dir.path, `pod-${mode}`);
      const values = [
        ...external,
        "--set",
        `authority.policyProtection.mode=${mode}`,
        "--set",
        `authority.policyProtection.credentialsSecret=${CREDENTIALS_SECRET}`,
        "--set",
        `authority.issuer=${idp.issuer}`,
        "--set",
        // the crypto service through the fault proxy: what the test stops is what the pod reaches
        `authority.cryptoUrl=${cryptoService.proxy.url}`,
        "--set",
        `authority.policyProtection.tokenUrl=${idp.tokenEndpoint}`,
        // the catalog's upstream (never called), opened as a platform admin would
        "--set-json",
        'authority.extraEnv=[{"name":"AUTHORITY_EGRESS_ALLOW","value":"127.0.0.1:9"}]',
        ...(mode === "managed"
          ? [
              "--set",
              `authority.managedUrl=${managedUrl}`,
              "--set",
              "authority.policyProtection.managedCa.existingConfigMap=crypto-ca",
            ]
          : []),
      ];
      const objects = await renderChart(values);
      const rendered = deploymentPod(objects, "authority");
      assert.deepEqual(rendered.container.args, ["serve"]);
      const kubelet = await asKubelet(
        objects,
        rendered,
        {
          secrets: {
            [CREDENTIALS_SECRET]: {
              "credentials.json": JSON.stringify({
                ...SERVICE_ACCOUNT,
                ...credentials.service,
                subjects: { [agent]: credentials.subjects[agent], [late]: credentials.subjects[late] },
              }),
            },
          },
          configMaps: { "crypto-ca": { "ca.crt": managedCa } },
        },
        podDir,
      );
      // The pod's whole environment: nothing about a KEK, the credentials as a file in a mount.
      assert.deepEqual(
        Object.keys(kubelet.env).filter((name) => /KEK/.test(name)),
        [],
      );
      assert.equal(kubelet.env.AUTHORITY_POLICY_PROTECTION, mode);
      assert.equal(
        kubelet.env.AUTHORITY_CRYPTO_CREDENTIALS_FILE,
        join(kubelet.mounted.get("/var/run/authority/crypto-credentials") ?? "", "credentials.json"),
      );
      if (mode === "managed")
        assert.equal(kubelet.env.AUTHORITY_MANAGED_CA_FILE, join(podDir, "managed-ca", "ca.crt"));
      const stateDir = kubelet.mounted.get("/var/lib/authority");
      assert.ok(stateDir !== undefined);
      assert.equal(kubelet.env.AUTHORITY_STORE_URL, `sqlite:${join(stateDir, "authority.db")}`);

      const port = await stablePort();
      const serve = startPeerProcess({
        command: process.execPath,
        args: ["bin/authority.ts", ...(rendered.container.args as string[]), "--listen", `127.0.0.1:${port}`],
        cwd: repoPath("."),
        env: { ...kubelet.env, PATH: process.env.PATH ?? "" },
      });
      processes.push(serve);
      const url = `http://127.0.0.1:${port}`;
      const call = async (
        method: string,
        path: string,
        body?: unknown,
        bearer?: string,
      ): Promise<HttpReply> =>
        httpRequest(`${url}${path}`, {
          method,
          headers: bearer === undefined ? {} : { authorization: `Bearer ${bearer}` },
          ...(body === undefined ? {} : { json: body }),
          timeoutMs: 20_000,
        });
      const admin = async (method: string, path: string, body: unknown): Promise<HttpReply> =>
        call(method, path, body, await token("root-admin", ["admin"]));
      const expect = (reply: HttpReply, status: number, what: string) =>
        assert.equal(reply.status, status, `${what}: ${reply.text}\n${serve.output()}`);

      // Ready, as the readiness probe asks it.
      const probe = rendered.container.readinessProbe as { httpGet: { path: string } };
      const deadline = Date.now() + 60_000;
      let ready: HttpReply | undefined;
      while (Date.now() < deadline) {
        assert.ok(serve.running, `authority serve exited:\n${serve.output()}`);
        ready = await call("GET", probe.httpGet.path).catch(() => undefined);
        if (ready?.status === 200) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.equal(ready?.status, 200, `not ready:\n${serve.output()}`);
      assert.match(serve.output(), /the crypto service \(no policy or envelope key in this process\)/);
      assert.match(serve.output(), new RegExp(`"policyProtection":"${mode}"`));
      assert.doesNotMatch(serve.output(), /EMBEDDED/);

      // Set up a partner, a catalog (its auth-profile secret sealed by the crypto service) and a policy.
      expect(
        await admin("POST", "/partners", { partner_id: `${PARTNER}-${mode}`, name: "Acme" }),
        201,
        "partner",
      );
      const partner = `/partners/${PARTNER}-${mode}`;
      expect(
        await admin("PUT", `${partner}/caab/auth-profiles/items-key`, {
          type: "static",
          kind: "api_key",
          in: "header",
          name: "x-api-key",
          secret: `upstream-${randomBytes(8).toString("hex")}`,
        }),
        201,
        "auth profile",
      );
      const capability = `items-${mode}`;
      expect(
        await admin("POST", `${partner}/api-specs/import-openapi`, {
          capability_id: capability,
          name: "Items",
          document: itemsOpenApi(),
          upstream_base_url: "http://127.0.0.1:9",
          auth_profile_ref: "items-key",
        }),
        201,
        "import",
      );
      for (const subject of [agent, late]) {
        expect(
          await admin("POST", `${partner}/users`, {
            subject_id: subject,
            subject_type: "agent",
            display_name: subject,
          }),
          201,
          "subject",
        );
      }
      const assign = async (subject: string) =>
        admin("PUT", `${partner}/caab/subjects/${subject}/policies/${capability}`, {
          allowed_permission_ids: [`${capability}:get:/items/{itemId}`],
          ttl_seconds: 3600,
        });
      const authorize = async (subject: string) =>
        call(
          "POST",
          "/v1/authorize-invocation",
          { subject: { subject_id: subject }, capability_id: capability, method: "GET", path: "/items/7" },
          await token(subject),
        );
      expect(await assign(agent), 200, "assign");
      const allowed = await authorize(agent);
      expect(allowed, 200, "authorize");
      assert.equal(allowed.json.status, "allowed");

      // Signed by the crypto service's current key of the subject, not by anything local.
      const record = await call(
        "GET",
        `/v1/sidecar/policies/${agent}`,
        undefined,
        await token("sidecar-1", ["sidecar", "sidecar_platform"]),
      );
      expect(record, 200, "signed policy");
      const blob = Buffer.from(record.json.signed_policy as string, "base64");
      const signer = JSON.parse(blob.subarray(5, 5 + blob.readUInt32BE(1)).toString("utf8")).signer_key_id;
      const active = (await cryptoService.server().publicKeys(`subject:${agent}`)).keys.find(
        (key) => key.status === "active",
      );
      assert.equal(signer, active?.keyId);

      // Without the crypto service nothing is protected or opened; back, both work without a restart.
      await cryptoService.stop();
      try {
        const during = await assign(late);
        assert.equal(during.status, 503, during.text);
      } finally {
        await cryptoService.start();
      }
      expect(await assign(late), 200, "assign after recovery");
      const lateAllowed = await authorize(late);
      expect(lateAllowed, 200, "authorize after recovery");
      assert.equal(lateAllowed.json.status, "allowed");

      // No KEK and no key ring: nothing in the state volume but the store, no ring in the store.
      assert.deepEqual(
        (await readdir(stateDir)).filter((file) => !file.startsWith("authority.db")),
        [],
      );
      const store = await openStore(kubelet.env.AUTHORITY_STORE_URL ?? "");
      try {
        assert.equal(await store.count(KEY_RINGS_COLLECTION), 0);
      } finally {
        await store.close();
      }
      await serve.stop();
    });
  }
});
