/**
 * What a sidecar bench runs against, in this process: a SQLite store with a KEK, the dev IdP,
 * the authority service, a real redis-server, one partner ("acme") with an "orders"
 * capability imported from an OpenAPI document, and subjects assigned to it. It hands back
 * the environment an `authority sidecar` process needs (its own token and cache-key files),
 * so a bench starts the sidecar exactly as deployed (bench/lib/processes.ts).
 */
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { putAuthProfile } from "../../src/admin/auth-profiles.ts";
import { importOpenApi } from "../../src/admin/capabilities.ts";
import { createPartner } from "../../src/admin/partners.ts";
import { assignCapability } from "../../src/admin/policies.ts";
import { createSubject } from "../../src/admin/subjects.ts";
import { egressAllowSetting } from "../../src/config/settings.ts";
import { Kek } from "../../src/crypto/index.ts";
import { createJwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { createLogger } from "../../src/observability/logger.ts";
import { createPolicyChangePublisher } from "../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../src/policy/process-key-rings.ts";
import { createStoredKeyRings } from "../../src/policy/stored-key-rings.ts";
import { buildAuthorityService } from "../../src/servers/authority/build.ts";
import { createIdpServer } from "../../src/servers/idp/server.ts";
import { openStore } from "../../src/store/index.ts";
import { egressAllowValue } from "../../test/helpers/egress.ts";
import { startRedisServer } from "../../test/helpers/redis-server.ts";
import { makeTempDir } from "../../test/helpers/temp-dir.ts";
import { benchAuthorityConfig } from "./authority-config.ts";

export const PARTNER = "acme";
export const CAPABILITY = "orders";
export const UPSTREAM_HOST = "orders.internal";

export interface BenchWorldOptions {
  /** The OpenAPI document of the "orders" capability. */
  readonly document: Record<string, unknown>;
  /** Its operations' base URL (the sidecar's forward proxy calls it). */
  readonly upstreamUrl: string;
  /** Subjects created and assigned these permission ids of "orders". */
  readonly subjects: readonly string[];
  readonly allowed: readonly string[];
  /** Signed parameter constraints enforced for "acme" (authority and sidecar). */
  readonly parameterScoping?: boolean;
  /** More capabilities of "acme" (same upstream and auth profile), assigned to the same subjects. */
  readonly moreCapabilities?: ReadonlyArray<{
    readonly capabilityId: string;
    readonly document: Record<string, unknown>;
    readonly allowed: readonly string[];
  }>;
}

export interface BenchWorld {
  readonly dir: string;
  readonly authorityUrl: string;
  readonly redisPort: number;
  /** The environment of an `authority sidecar` process for this world. */
  readonly sidecarEnv: Record<string, string>;
  /** A one-hour access token of a subject. */
  token(subject: string, roles?: string[]): Promise<string>;
  close(): Promise<void>;
}

export async function startBenchWorld(options: BenchWorldOptions): Promise<BenchWorld> {
  const temp = await makeTempDir("bench-world-");
  const cleanups: Array<() => Promise<void>> = [() => temp.cleanup()];
  const close = async (): Promise<void> => {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  };
  try {
    const dbFile = join(temp.path, "authority.db");
    const kekFile = join(temp.path, "kek");
    const { kek, base64 } = Kek.generate();
    await writeFile(kekFile, `${base64}\n`, { mode: 0o600 });
    const store = await openStore(`sqlite:${dbFile}`);
    cleanups.unshift(() => store.close());
    const idp = await createIdpServer({ audience: "authority" });
    const issuer = await idp.listen();
    cleanups.unshift(() => idp.close());
    const redis = await startRedisServer();
    cleanups.unshift(() => redis.stop());
    const publisher = createPolicyChangePublisher({ url: redis.url });
    cleanups.unshift(() => publisher.close());

    const scoping = options.parameterScoping === true;
    // The authority's own composition root, with the bench's store, verifier and keys.
    const service = await buildAuthorityService(
      benchAuthorityConfig({
        publicUrl: "http://127.0.0.1:8080",
        issuer,
        audience: "authority",
        bodyLimitBytes: 1024 * 1024,
        serviceIdentity: "bench",
        parameterScoping: { enabled: scoping, partnerAllowlist: scoping ? [PARTNER] : [] },
        // The upstream is on loopback: opened by the egress allow list, as a deployment would.
        egress: { allow: egressAllowSetting.parse(egressAllowValue(options.upstreamUrl), "egress-allow") },
      }),
      {
        store,
        verifier: createJwtVerifier({
          issuer,
          audience: "authority",
          jwks: `${issuer}/.well-known/jwks.json`,
        }),
        protector: createLocalPolicyProtector({
          keyRings: createStoredKeyRings({ store, kek }),
          serviceIdentity: "bench",
        }),
        keyRings: createProcessKeyRings(),
        logger: createLogger("bench", "silent"),
        platform: null,
        onPolicyChange: async (subjectId, head) => {
          await publisher.publish(subjectId, head);
        },
      },
    );
    const { context } = service;
    const authorityUrl = await service.listen();
    cleanups.unshift(async () => void (await service.close()));

    const actor = { subject: "bench", requestId: "bench" };
    await createPartner(context, { partner_id: PARTNER, name: "Acme" });
    await putAuthProfile(context, PARTNER, "orders-key", {
      type: "static",
      kind: "api_key",
      in: "header",
      name: "x-api-key",
      secret: "upstream-secret-0123456789",
    });
    const capabilities = [
      { capabilityId: CAPABILITY, name: "Orders", document: options.document, allowed: options.allowed },
      ...(options.moreCapabilities ?? []).map((more) => ({ ...more, name: more.capabilityId })),
    ];
    for (const { capabilityId, name, document } of capabilities) {
      await importOpenApi(context, actor, PARTNER, {
        capability_id: capabilityId,
        name,
        document,
        upstream_base_url: options.upstreamUrl,
        auth_profile_ref: "orders-key",
      });
    }
    for (const subjectId of options.subjects) {
      await createSubject(context, PARTNER, {
        subject_id: subjectId,
        subject_type: "agent",
        display_name: subjectId,
      });
      for (const { capabilityId, allowed } of capabilities) {
        await assignCapability(context, actor, PARTNER, subjectId, capabilityId, {
          allowed_permission_ids: [...allowed],
          ttl_seconds: 3600,
        });
      }
    }
    const token = async (subject: string, roles?: string[]): Promise<string> =>
      (await idp.issueToken({ subject, lifetimeSec: 3600, ...(roles === undefined ? {} : { roles }) }))
        .accessToken;
    const tokenFile = join(temp.path, "sidecar-token");
    const cacheKeyFile = join(temp.path, "cache-key");
    // Scoped as an injected sidecar's credential: its partner and its pod's capabilities.
    const sidecarToken = await idp.issueToken({
      subject: "bench-sidecar",
      roles: ["sidecar"],
      claims: { partner_id: PARTNER },
      scopes: capabilities.map(({ capabilityId }) => `authority/sidecar.capability:${capabilityId}`),
      lifetimeSec: 3600,
    });
    await writeFile(tokenFile, sidecarToken.accessToken, { mode: 0o600 });
    await writeFile(cacheKeyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    const sidecarEnv: Record<string, string> = {
      AUTHORITY_URL: authorityUrl,
      AUTHORITY_ISSUER: issuer,
      AUTHORITY_AUDIENCE: "authority",
      AUTHORITY_STORE_URL: `sqlite:${dbFile}`,
      AUTHORITY_KEK_FILE: kekFile,
      AUTHORITY_SERVICE_IDENTITY: "bench",
      AUTHORITY_REDIS_URL: redis.url,
      AUTHORITY_SIDECAR_CACHE_KEY_FILE: cacheKeyFile,
      AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
      AUTHORITY_SIDECAR_GRPC_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_PROXY_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_METRICS_LISTEN: "127.0.0.1:0",
      AUTHORITY_EGRESS_ALLOW: egressAllowValue(options.upstreamUrl),
      AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [UPSTREAM_HOST]: CAPABILITY }),
      ...(scoping
        ? { AUTHORITY_PARAMETER_SCOPING: "true", AUTHORITY_PARAMETER_SCOPING_PARTNERS: PARTNER }
        : {}),
    };
    return { dir: temp.path, authorityUrl, redisPort: redis.port, sidecarEnv, token, close };
  } catch (error) {
    await close();
    throw error;
  }
}
