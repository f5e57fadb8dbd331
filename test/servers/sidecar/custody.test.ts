import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Redis } from "ioredis";
import { createSubject } from "../../../src/admin/subjects.ts";
import { validatePolicyDocument } from "../../../src/core/policy-document.ts";
import { SIGNATURE_BYTES } from "../../../src/crypto/index.ts";
import { protectPolicy } from "../../../src/policy/artifact.ts";
import {
  deriveCacheKeys,
  type PolicyFetchResult,
  policyEntryKey,
  policyEntryName,
  policyHeadKey,
  sealEntry,
} from "../../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import { policyKeyOwner } from "../../../src/policy/protector.ts";
import { sidecarContainer } from "../../../src/servers/inject/patch.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { resolveSidecarConfig } from "../../../src/servers/sidecar/config.ts";
import { staticTokenSource } from "../../../src/servers/sidecar/service-token.ts";
import type { CryptoVersion } from "../../../src/store/model.ts";
import { signedPolicyText } from "../../policy/cache/helpers.ts";
import { chartLikeSettings } from "../inject/fixtures.ts";
import { ALLOWED, CAPABILITY, deniedBody, eventually, PARTNER, startWorld, type World } from "./world.ts";

/**
 * Key custody (issue 17, item 2): everything an injected sidecar is given — its environment,
 * its mounted files (workload token, Redis cache key), read and write access to the cache
 * Redis, and its sidecar token at the authority — and nothing it can do with them opens or
 * forges another subject's policy. Policies altered in Redis or in transit are refused.
 */

const SIGNED_HEAD_BYTES = 5;

/** The parts of a signed blob (0x02 || u32 length || document || signature || payload). */
function splitBlob(base64: string): { head: Buffer; signature: Buffer; payload: Buffer } {
  const blob = Buffer.from(base64, "base64");
  const documentEnd = SIGNED_HEAD_BYTES + blob.readUInt32BE(1);
  return {
    head: blob.subarray(0, documentEnd),
    signature: blob.subarray(documentEnd, documentEnd + SIGNATURE_BYTES),
    payload: blob.subarray(documentEnd + SIGNATURE_BYTES),
  };
}

const sha256Ref = (text: string | Buffer): `sha256:${string}` =>
  `sha256:${createHash("sha256").update(text).digest("hex")}`;

describe("key custody: what an injected sidecar holds cannot open or forge a policy", () => {
  let world: World;
  let redis: Redis;
  /** A subject allowed only GET /orders: a forged policy would allow GET /orders/{orderId}. */
  const NARROW = "agent-narrow";
  let narrowToken: string;

  before(async () => {
    world = await startWorld({ redis: true });
    await createSubject(world.context, PARTNER, {
      subject_id: NARROW,
      subject_type: "agent",
      display_name: NARROW,
    });
    await world.assign(NARROW, {
      allowed_permission_ids: [`${CAPABILITY}:get:/orders`],
      response_redactions: {},
    });
    narrowToken = await world.token(NARROW);
    if (world.redis === undefined) throw new Error("redis missing");
    redis = new Redis(world.redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    redis.on("error", () => undefined);
    await redis.connect();
  });
  after(async () => {
    redis.disconnect();
    await world.close();
  });

  /** What the sidecar's own token gets from the authority for a subject. */
  const fetchAsSidecar = async (subjectId: string) => {
    const client = createAuthorityClient({
      baseUrl: world.authorityUrl,
      token: staticTokenSource(world.tokens.sidecar),
    });
    const result = await client.fetchPolicy(subjectId, {});
    assert.equal(result.status, "found");
    const found = result as Extract<PolicyFetchResult, { status: "found" }>;
    // As base64: the client hands the blob's bytes when its transport has them.
    return {
      ...found,
      signedPolicy: found.signedPolicy === null ? null : signedPolicyText(found.signedPolicy),
    };
  };

  /** The genuine document of a signed policy, widened to allow every operation of the catalog. */
  const widened = (signedPolicy: string): string => {
    const document = JSON.parse(splitBlob(signedPolicy).payload.toString("utf8"));
    document.apis[0].allowed_permission_ids = [...ALLOWED];
    return JSON.stringify(validatePolicyDocument(document));
  };

  test("the injected container's environment and mounts carry no store and no key; they are enough to start", async () => {
    const container = sidecarContainer(chartLikeSettings, { istio: false });
    const env = container.env as Array<{ name: string; value?: string }>;
    const names = env.map((entry) => entry.name);
    for (const forbidden of ["AUTHORITY_KEK", "AUTHORITY_KEK_FILE", "AUTHORITY_STORE_URL"]) {
      assert.ok(!names.includes(forbidden), `${forbidden} is not given to a sidecar`);
    }
    const mounts = (container.volumeMounts as Array<{ mountPath: string }>).map((mount) => mount.mountPath);
    assert.ok(
      mounts.every((path) => !/kek|store/i.test(path)),
      mounts.join(", "),
    );
    // With its workload token, that environment is a complete sidecar configuration.
    const values = Object.fromEntries(
      env.map((entry) => [entry.name, entry.value ?? "redis://redis:6379/0"]),
    );
    const config = resolveSidecarConfig({
      env: { ...values, AUTHORITY_SIDECAR_TOKEN_FILE: "/var/run/secrets/authority/token" },
    });
    assert.equal(config.redis?.cacheKeyFile, "/var/run/authority/cache-key/cache-key");
    assert.equal(JSON.stringify(config).match(/kek|store/i), null);
  });

  test("the sidecar's token reads no artifact, no private key and no other partner's records", async () => {
    const reply = await fetch(`${world.authorityUrl}/v1/sidecar/policies/${NARROW}`, {
      headers: { authorization: `Bearer ${world.tokens.sidecar}` },
    });
    const body = (await reply.json()) as { policy: { artifact?: string; crypto_version: CryptoVersion } };
    assert.equal(reply.status, 200);
    assert.equal(body.policy.artifact, undefined);
    assert.equal(JSON.stringify(body).includes("artifact"), false);
    const owner = policyKeyOwner(
      { cryptoVersion: body.policy.crypto_version, subjectId: NARROW, partnerId: PARTNER },
      "test-environment",
    );
    const keys = await fetch(`${world.authorityUrl}/v1/sidecar/policy-keys/${encodeURIComponent(owner)}`, {
      headers: { authorization: `Bearer ${world.tokens.sidecar}` },
    });
    const keysText = await keys.text();
    assert.equal(keys.status, 200);
    assert.match(keysText, /sigPublicKey/);
    assert.doesNotMatch(keysText, /private|seed|wrapped/i);
    // An owner name a caller invents gets nothing (and no key ring is made for it).
    for (const invented of ["subject:nobody", "service:someone-else", "partner:acme"]) {
      const refused = await fetch(
        `${world.authorityUrl}/v1/sidecar/policy-keys/${encodeURIComponent(invented)}`,
        { headers: { authorization: `Bearer ${world.tokens.sidecar}` } },
      );
      await refused.arrayBuffer();
      assert.ok([400, 404].includes(refused.status), `${invented}: ${refused.status}`);
    }
    // The admin routes, where records live, are closed to it.
    const admin = await fetch(`${world.authorityUrl}/partners/${PARTNER}/caab/policies`, {
      headers: { authorization: `Bearer ${world.tokens.sidecar}` },
    });
    await admin.arrayBuffer();
    assert.equal(admin.status, 403);
  });

  test("with the cache key and Redis write access, forged sealed entries are refused; the genuine policy decides", async () => {
    const genuine = await fetchAsSidecar(NARROW);
    assert.ok(genuine.signedPolicy !== null);
    const keys = deriveCacheKeys(world.cacheKey);
    const { head, signature } = splitBlob(genuine.signedPolicy);
    const wide = widened(genuine.signedPolicy);

    // 1. The genuine signature over a widened document.
    const altered = Buffer.concat([head, signature, Buffer.from(wide, "utf8")]).toString("base64");
    // 2. A widened document signed by the attacker's own key ring under the real owner's name.
    const owner = policyKeyOwner(
      { cryptoVersion: genuine.record.crypto_version, subjectId: NARROW, partnerId: PARTNER },
      "test-environment",
    );
    const attacker = createLocalPolicyProtector({
      keyRings: createProcessKeyRings(),
      serviceIdentity: "test-environment",
    });
    const forgedArtifact = await protectPolicy(validatePolicyDocument(JSON.parse(wide)), attacker, PARTNER);
    const selfSigned = (
      await attacker.open(forgedArtifact.artifact, {
        cryptoVersion: genuine.record.crypto_version,
        subjectId: NARROW,
        partnerId: PARTNER,
      })
    ).signedBlob;
    assert.ok(selfSigned !== undefined);
    assert.ok(JSON.parse(splitBlob(selfSigned).head.subarray(SIGNED_HEAD_BYTES).toString()).signer === owner);
    // 3. Another subject's genuine (wider) signed policy filed under this subject.
    const other = await fetchAsSidecar("agent-1");
    assert.ok(other.signedPolicy !== null);

    const forgeries: Array<[string, string, `sha256:${string}`]> = [
      ["genuine signature, altered document", altered, sha256Ref(wide)],
      ["signed by an attacker key under the owner's name", selfSigned, sha256Ref(wide)],
      ["another subject's signed policy", other.signedPolicy, other.record.document_hash],
    ];
    for (const [what, blob, documentHash] of forgeries) {
      const sealed = sealEntry(keys, policyEntryName(NARROW), {
        v: 2,
        subject_id: NARROW,
        head: genuine.record.head,
        partner_id: PARTNER,
        identity: genuine.identity,
        verified_at: Date.now(),
        reason: null,
        signed_policy: blob,
        crypto_version: genuine.record.crypto_version,
        document_hash: documentHash,
        revoked_marker: null,
      });
      await redis.set(policyEntryKey(NARROW), sealed);
      await redis.set(policyHeadKey(NARROW), String(genuine.record.head));
      // A fresh sidecar: nothing local, the forged entry is the first thing it finds. Traffic
      // comes once it is ready, as in a pod (a cold first decision may otherwise be a 503).
      const sidecar = await world.startSidecar();
      assert.equal(await sidecar.sidecar.whenReady(30_000), true);
      try {
        const response = await sidecar.check({ token: narrowToken, path: "/orders/42" });
        assert.equal(response.http_response, "denied_response", what);
        assert.equal(deniedBody(response).reason, "operation_not_allowed", what);
        assert.match(
          await sidecar.metricsText(),
          /authority_sidecar_policy_verification_failures_total\{layer="redis"\} [1-9]/,
          what,
        );
        // The genuine narrow policy still allows what it allows.
        assert.equal(
          (await sidecar.check({ token: narrowToken, path: "/orders" })).http_response,
          "ok_response",
        );
      } finally {
        await sidecar.close();
      }
    }
    // The control: the genuine signed policy sealed the same way decides alike. A fresh sidecar
    // does not take it on Redis' word (a rolled-back head and entry would agree as well): the
    // authority, which has confirmed no head to it yet, is asked.
    await redis.set(
      policyEntryKey(NARROW),
      sealEntry(keys, policyEntryName(NARROW), {
        v: 2,
        subject_id: NARROW,
        head: genuine.record.head,
        partner_id: PARTNER,
        identity: genuine.identity,
        verified_at: Date.now(),
        reason: null,
        signed_policy: genuine.signedPolicy,
        crypto_version: genuine.record.crypto_version,
        document_hash: genuine.record.document_hash,
        revoked_marker: null,
      }),
    );
    const control = await world.startSidecar();
    assert.equal(await control.sidecar.whenReady(30_000), true);
    try {
      assert.equal(
        (await control.check({ token: narrowToken, path: "/orders" })).http_response,
        "ok_response",
      );
      const metrics = await control.metricsText();
      assert.doesNotMatch(metrics, /authority_sidecar_cache_hits_total\{kind="policy",layer="redis"\} [1-9]/);
      assert.match(metrics, /authority_sidecar_cache_hits_total\{kind="policy",layer="authority"\} 1/);
    } finally {
      await control.close();
    }
  });

  test("a replayed older genuine policy (from before a revocation) under the current head is not confirmed by a 304", async () => {
    const subject = "agent-replay";
    await createSubject(world.context, PARTNER, {
      subject_id: subject,
      subject_type: "agent",
      display_name: subject,
    });
    await world.assign(subject, {});
    const token = await world.token(subject);
    const before = await fetchAsSidecar(subject);
    assert.ok(before.signedPolicy !== null);
    assert.equal(await world.revoke(subject), 200);
    const revoked = await fetchAsSidecar(subject);
    assert.ok(revoked.record.head > before.record.head);
    const keys = deriveCacheKeys(world.cacheKey);
    await redis.set(
      policyEntryKey(subject),
      sealEntry(keys, policyEntryName(subject), {
        v: 2,
        subject_id: subject,
        head: revoked.record.head,
        partner_id: PARTNER,
        identity: before.identity,
        verified_at: Date.now(),
        reason: null,
        signed_policy: before.signedPolicy,
        crypto_version: before.record.crypto_version,
        document_hash: before.record.document_hash,
        revoked_marker: null,
      }),
    );
    await redis.set(policyHeadKey(subject), String(revoked.record.head));
    // A fresh sidecar may take the replay for at most half its max age, then asks in full.
    const sidecar = await world.startSidecar({ policyMaxAgeMs: 600 });
    try {
      await sidecar.check({ token });
      let reason: unknown;
      const settled = await eventually(async () => {
        const response = await sidecar.check({ token });
        if (response.http_response !== "denied_response") return false;
        reason = deniedBody(response).reason;
        return true;
      }, 5000);
      assert.equal(settled, true, "the replayed policy was still used after 5 s");
      assert.equal(reason, "policy_revoked");
    } finally {
      await sidecar.close();
    }
  });

  test("a signed policy altered in transit is refused (policy_verification_failed), with keys from the authority or pinned", async () => {
    const genuine = await fetchAsSidecar(NARROW);
    assert.ok(genuine.signedPolicy !== null);
    const { head, signature, payload } = splitBlob(genuine.signedPolicy);
    const wide = widened(genuine.signedPolicy);
    const real = createAuthorityClient({
      baseUrl: world.authorityUrl,
      token: staticTokenSource(world.tokens.sidecar),
    });
    const attacker = createLocalPolicyProtector({
      keyRings: createProcessKeyRings(),
      serviceIdentity: "test-environment",
    });
    const owner = policyKeyOwner(
      { cryptoVersion: genuine.record.crypto_version, subjectId: NARROW, partnerId: PARTNER },
      "test-environment",
    );
    const forged = await protectPolicy(validatePolicyDocument(JSON.parse(wide)), attacker, PARTNER);
    const forgedBlob = (
      await attacker.open(forged.artifact, {
        cryptoVersion: genuine.record.crypto_version,
        subjectId: NARROW,
        partnerId: PARTNER,
      })
    ).signedBlob;
    assert.ok(forgedBlob !== undefined);
    const flipped = Buffer.from(payload);
    const middle = Math.floor(flipped.length / 2);
    flipped.writeUInt8(flipped.readUInt8(middle) ^ 0x01, middle);

    /** A man in the middle of the sidecar's channel: rewrites the signed policy (and the facts to match). */
    const tampering = (signedPolicy: string, documentHash: `sha256:${string}`, swapKeys: boolean) => ({
      ...real,
      fetchPolicy: async (subjectId: string, options: { readonly knownHead?: number }) => {
        const result = await real.fetchPolicy(subjectId, options);
        if (result.status !== "found" || subjectId !== NARROW) return result;
        return { ...result, signedPolicy, record: { ...result.record, document_hash: documentHash } };
      },
      fetchPolicyKeys: async (name: string) =>
        swapKeys && attacker.signerKeys !== undefined
          ? attacker.signerKeys(name)
          : real.fetchPolicyKeys(name),
    });
    const pinned = await world.protector.signerKeys?.(owner);
    assert.ok(pinned !== undefined);
    const cases: Array<[string, ReturnType<typeof tampering>, boolean]> = [
      [
        "document altered under the genuine signature",
        tampering(
          Buffer.concat([head, signature, Buffer.from(wide)]).toString("base64"),
          sha256Ref(wide),
          false,
        ),
        false,
      ],
      [
        "one bit flipped in the policy text",
        tampering(Buffer.concat([head, signature, flipped]).toString("base64"), sha256Ref(flipped), false),
        false,
      ],
      [
        "truncated",
        tampering(genuine.signedPolicy.slice(0, 400), genuine.record.document_hash, false),
        false,
      ],
      [
        "attacker-signed, attacker keys served, signer key pinned",
        tampering(forgedBlob, sha256Ref(wide), true),
        true,
      ],
    ];
    for (const [what, authority, pin] of cases) {
      const sidecar = await world.startSidecar({
        authority,
        redis: undefined,
        policyKeys: { serviceIdentity: "test-environment", ...(pin ? { pinned: [pinned] } : {}) },
      });
      try {
        for (const path of ["/orders/42", "/orders"]) {
          const response = await sidecar.check({ token: narrowToken, path });
          assert.equal(response.http_response, "denied_response", `${what} ${path}`);
          assert.equal(deniedBody(response).reason, "policy_verification_failed", `${what} ${path}`);
        }
      } finally {
        await sidecar.close();
      }
    }
    // The control: the untouched channel with the same pinned key allows what the policy allows.
    const control = await world.startSidecar({
      authority: real,
      redis: undefined,
      policyKeys: { serviceIdentity: "test-environment", pinned: [pinned] },
    });
    try {
      assert.equal(
        (await control.check({ token: narrowToken, path: "/orders" })).http_response,
        "ok_response",
      );
      const denied = await control.check({ token: narrowToken, path: "/orders/42" });
      assert.equal(deniedBody(denied).reason, "operation_not_allowed");
    } finally {
      await control.close();
    }
  });

  test("a pinned key set that is missing or not a key ring stops the CLI start, naming the file", async () => {
    const dir = await mkdtemp(join(tmpdir(), "custody-"));
    try {
      const bad = join(dir, "keys.json");
      await writeFile(bad, JSON.stringify({ keys: [] }));
      const { register } = await import("../../../src/cli/commands/sidecar.ts");
      const { Command } = await import("commander");
      for (const [file, message] of [
        [join(dir, "absent.json"), /absent\.json does not exist/],
        [bad, /keys\.json is not a public key ring/],
      ] as const) {
        const program = new Command().exitOverride();
        let said = "";
        program.configureOutput({
          writeErr: (text) => {
            said += text;
          },
        });
        register(program);
        await assert.rejects(
          program.parseAsync(["sidecar", "--token-file", join(dir, "token"), "--policy-keys-file", file], {
            from: "user",
          }),
        );
        assert.match(said, message);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
