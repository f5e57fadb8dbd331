import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { parseListenAddress } from "../../../src/config/listen-address.ts";
import { loadReview } from "./fixtures.ts";
import { httpsRequest, selfSignedCert } from "./tls.ts";

const bin = fileURLToPath(new URL("../../../bin/authority.ts", import.meta.url));

/** Settings shaped like the chart's injector ConfigMap `settings.yaml`. */
const settingsYaml = `
image: ghcr.io/authority/authority:0.1.0
imagePullPolicy: IfNotPresent
authorityUrl: http://authority.authority-system.svc.cluster.local:8080
redis:
  urlSecret:
    name: authority-redis-url
    key: url
cacheKeySecret:
  name: authority-sidecar-cache-key
  key: cache-key
istio:
  mode: auto
`;

function startInjector(args: string[], env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, [bin, "inject", ...args], {
    env: { PATH: process.env.PATH ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
}

async function listeningUrl(child: ChildProcess): Promise<string> {
  let buffered = "";
  for await (const chunk of child.stdout ?? []) {
    buffered += String(chunk);
    for (const line of buffered.split("\n")) {
      if (!line.startsWith("{")) continue;
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === "injector listening" && entry.url !== undefined) return entry.url;
      } catch {
        // a partial line; wait for the rest
      }
    }
  }
  throw new Error("the injector exited before listening");
}

describe("authority inject", () => {
  let dir = "";
  let tls: Awaited<ReturnType<typeof selfSignedCert>>;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-inject-"));
    tls = await selfSignedCert();
    await writeFile(join(dir, "tls.crt"), tls.cert);
    await writeFile(join(dir, "tls.key"), tls.key, { mode: 0o600 });
    await writeFile(join(dir, "settings.yaml"), settingsYaml);
    await writeFile(join(dir, "bad.yaml"), "redis:\n  url: redis://r:6379/0\n");
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("serves the webhook from env-configured files and stops cleanly on SIGTERM", async () => {
    const child = startInjector(
      ["--listen", "127.0.0.1:0", "--sidecar-image", "registry.local/authority:dev"],
      {
        AUTHORITY_TLS_CERT_FILE: join(dir, "tls.crt"),
        AUTHORITY_TLS_KEY_FILE: join(dir, "tls.key"),
        AUTHORITY_INJECT_SETTINGS_FILE: join(dir, "settings.yaml"),
        // The flag must win over this.
        AUTHORITY_INJECT_LISTEN: "127.0.0.1:1",
      },
    );
    try {
      const url = await listeningUrl(child);
      const review = loadReview("plain-pod");
      const res = await httpsRequest(`${url}/mutate`, {
        ca: tls.cert,
        method: "POST",
        body: JSON.stringify(review),
      });
      assert.equal(res.status, 200);
      const answer = JSON.parse(res.body) as { response: { uid: string; patch: string } };
      assert.equal(answer.response.uid, review.request.uid);
      const ops = JSON.parse(Buffer.from(answer.response.patch, "base64").toString()) as Array<{
        value: { image?: string };
      }>;
      assert.equal(ops[0]?.value.image, "registry.local/authority:dev");
    } finally {
      child.kill("SIGTERM");
    }
    const [code] = await once(child, "exit");
    assert.equal(code, 0);
  });

  it("fails fast on invalid settings and on missing TLS files", async () => {
    const bad = startInjector(
      ["--listen", "127.0.0.1:0", "--tls-cert", join(dir, "tls.crt"), "--tls-key", join(dir, "tls.key")],
      { AUTHORITY_INJECT_SETTINGS_FILE: join(dir, "bad.yaml") },
    );
    let stderr = "";
    bad.stderr?.on("data", (c) => {
      stderr += String(c);
    });
    const [code] = await once(bad, "exit");
    assert.equal(code, 1);
    assert.match(stderr, /cacheKeySecret is required when redis is set/);

    const noTls = startInjector(["--listen", "127.0.0.1:0"], {});
    let stderr2 = "";
    noTls.stderr?.on("data", (c) => {
      stderr2 += String(c);
    });
    const [code2] = await once(noTls, "exit");
    assert.equal(code2, 1);
    assert.match(stderr2, /--tls-cert and --tls-key/);
  });

  it("parses listen addresses", () => {
    assert.deepEqual(parseListenAddress("0.0.0.0:8443"), { host: "0.0.0.0", port: 8443 });
    assert.deepEqual(parseListenAddress("[::]:8443"), { host: "::", port: 8443 });
    assert.throws(() => parseListenAddress("8443"), /must be host:port/);
    assert.throws(() => parseListenAddress("a:99999"), /port 99999 is out of range/);
  });
});
