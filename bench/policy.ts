/**
 * Policy benchmarks: median time of compile + protect (compile the document, validate,
 * canonicalize, hash, sign-encrypt) and of a cold load + verify (decrypt-verify, parse,
 * schema + cross-field validation, version path, hash binding — no cache) for policies of
 * 10, 100 and 1,000 operations. Targets: load + verify of 100 operations ≤ 2 ms median,
 * compile + protect ≤ 5 ms. For 100 operations also the custody paths (docs/crypto.md): a
 * cold load through the upstream crypto service over loopback HTTP (the content key unwrapped
 * there, decryption and signature checked here; target ≤ 5 ms median), and the sidecar's
 * verification of the signed policy with the signer's public key only.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createCryptoClient } from "../src/clients/crypto-service/client.ts";
import { buildPermissionId } from "../src/core/index.ts";
import type { OperationSnapshot } from "../src/core/operation-snapshot.ts";
import { Kek } from "../src/crypto/index.ts";
import { createJwtVerifier } from "../src/identity/jwt-verifier.ts";
import { createLogger } from "../src/observability/logger.ts";
import { openPolicyDocument, protectPolicy } from "../src/policy/artifact.ts";
import { compilePolicyDocument } from "../src/policy/compile.ts";
import { createLocalPolicyProtector } from "../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../src/policy/process-key-rings.ts";
import { createSignedPolicyVerifier } from "../src/policy/signed-policy.ts";
import { createUpstreamPolicyProtector } from "../src/policy/upstream-protector.ts";
import { createCryptoServer } from "../src/servers/crypto/server.ts";
import { createIdpServer } from "../src/servers/idp/server.ts";
import { openStore } from "../src/store/index.ts";
import type { AssignmentRecord } from "../src/store/model.ts";

export interface PolicyBenchRow {
  name: string;
  operations: number;
  medianMs: number;
  p95Ms: number;
  /** Mean CPU time per run: what the work costs, however busy the machine is. */
  cpuMs: number;
  opsPerSec: number;
  artifactBytes: number;
  targetMs?: number;
}

/** The benches' synthetic operation `i` (also bench/policy-load.ts). */
export function operation(i: number): OperationSnapshot {
  const path = `/resources${i}/{id}/items`;
  return {
    operation_id: `getResource${i}`,
    method: "GET",
    path,
    summary: `Resource ${i}`,
    input_schema: {
      path: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
      query: { type: "object", properties: { limit: { type: "integer", minimum: 1, maximum: 100 } } },
      headers: { type: "object" },
      body: null,
    },
    response_schema: { type: "object", properties: { items: { type: "array", items: { type: "object" } } } },
    upstream_url_template: `https://api.example.com/v1${path}`,
    auth_profile_ref: "bench-profile",
    response_rules: [{ path: "/items/*/secret", mode: "remove" }],
    parameter_constraints: [],
  };
}

/** An assignment of `operations` synthetic operations to bench-agent of bench-partner. */
export function benchAssignment(operations: number): AssignmentRecord {
  const ops = Array.from({ length: operations }, (_, i) => operation(i));
  return {
    partner_id: "bench-partner",
    subject_id: "bench-agent",
    capability_id: "bench-api",
    catalog_version: "1",
    allowed_permission_ids: ops.map((op) => buildPermissionId("bench-api", op.method, op.path)),
    auth_profile_ref: "bench-profile",
    operations: ops,
    response_redactions: {},
    expires_at: "2099-01-01T00:00:00.000Z",
    assigned_by: "bench",
    assigned_at: "2026-01-01T00:00:00.000Z",
  };
}

/** The `q` quantile of ascending `sorted` samples (0 when there are none). */
export function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
}

/** Median and p95 wall time (ms) of `iterations` sequential runs after a warm-up, and CPU (ms) per run. */
export async function measure(
  iterations: number,
  run: () => Promise<unknown>,
): Promise<{ median: number; p95: number; cpu: number }> {
  for (let i = 0; i < Math.min(10, iterations); i++) await run();
  const samples: number[] = [];
  const cpuStart = process.cpuUsage();
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    await run();
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  const cpu = process.cpuUsage(cpuStart);
  samples.sort((a, b) => a - b);
  return {
    median: quantile(samples, 0.5),
    p95: quantile(samples, 0.95),
    cpu: (cpu.user + cpu.system) / 1000 / iterations,
  };
}

const round = (ms: number) => Number(ms.toFixed(4));

export async function benchPolicy(
  options: { iterations?: number; sizes?: number[] } = {},
): Promise<PolicyBenchRow[]> {
  const protector = createLocalPolicyProtector({
    keyRings: createProcessKeyRings(),
    serviceIdentity: "bench",
  });
  const context = {
    cryptoVersion: "subject_credentials_v1",
    subjectId: "bench-agent",
    partnerId: "bench-partner",
  } as const;
  const rows: PolicyBenchRow[] = [];
  for (const size of options.sizes ?? [10, 100, 1000]) {
    const iterations = options.iterations ?? (size >= 1000 ? 30 : 200);
    const input = {
      subject: { subject_id: "bench-agent", subject_type: "agent", display_name: "Bench" },
      cryptoVersion: "subject_credentials_v1",
      assignments: [benchAssignment(size)],
      expiresAt: "2099-01-01T00:00:00.000Z",
      revokedAt: null,
      now: new Date("2026-01-01T00:00:00.000Z"),
    } as const;
    let artifact = "";
    const protect = await measure(iterations, async () => {
      artifact = (await protectPolicy(compilePolicyDocument(input), protector, "bench-partner")).artifact;
    });
    const open = await measure(iterations, () => openPolicyDocument(artifact, protector, context));
    const bytes = Buffer.byteLength(artifact);
    rows.push(
      {
        name: `compile+protect ${size} ops`,
        operations: size,
        medianMs: round(protect.median),
        p95Ms: round(protect.p95),
        cpuMs: round(protect.cpu),
        opsPerSec: Math.round(1000 / protect.median),
        artifactBytes: bytes,
        ...(size === 100 ? { targetMs: 5 } : {}),
      },
      {
        name: `load+verify (cold) ${size} ops`,
        operations: size,
        medianMs: round(open.median),
        p95Ms: round(open.p95),
        cpuMs: round(open.cpu),
        opsPerSec: Math.round(1000 / open.median),
        artifactBytes: bytes,
        ...(size === 100 ? { targetMs: 2 } : {}),
      },
    );
  }
  if ((options.sizes ?? [100]).includes(100)) rows.push(...(await benchCustody(options.iterations ?? 200)));
  return rows;
}

/** Cold loads of a 100-operation policy through the crypto service, and the sidecar's signature check. */
async function benchCustody(iterations: number): Promise<PolicyBenchRow[]> {
  const dir = await mkdtemp(join(tmpdir(), "bench-custody-"));
  const idp = await createIdpServer({ audience: "authority", logger: createLogger("idp", "silent") });
  await idp.listen({ host: "127.0.0.1", port: 0 });
  const store = await openStore(`sqlite:${join(dir, "crypto.db")}`);
  const server = await createCryptoServer({
    store,
    kek: Kek.generate().kek,
    verifier: createJwtVerifier({ issuer: idp.issuer, audience: "authority", jwks: idp.jwksUri }),
    logger: createLogger("crypto", "silent"),
  });
  try {
    const url = await server.listen({ host: "127.0.0.1", port: 0 });
    const owner = await server.provisionOwner({ id: "subject:bench-agent", kind: "subject" });
    const token = (await idp.issueToken({ subject: "authority", lifetimeSec: 3600 })).accessToken;
    const credentials = {
      owner: owner.id,
      token,
      apiKey: owner.apiKey,
      accessKey: owner.accessKey,
      secretKey: owner.secretKey,
    };
    const upstream = createUpstreamPolicyProtector({
      client: createCryptoClient({ baseUrl: url }),
      credentialsFor: async () => credentials,
      token: async () => token,
    });
    const context = {
      cryptoVersion: "subject_credentials_v1",
      subjectId: "bench-agent",
      partnerId: "bench-partner",
    } as const;
    const document = compilePolicyDocument({
      subject: { subject_id: "bench-agent", subject_type: "agent", display_name: "Bench" },
      cryptoVersion: "subject_credentials_v1",
      assignments: [benchAssignment(100)],
      expiresAt: "2099-01-01T00:00:00.000Z",
      revokedAt: null,
      now: new Date("2026-01-01T00:00:00.000Z"),
    });
    const { artifact } = await protectPolicy(document, upstream, "bench-partner");
    const cold = await measure(iterations, () => openPolicyDocument(artifact, upstream, context));
    const opened = await upstream.open(artifact, context);
    const signed = opened.signedBlob ?? "";
    const sidecar = createSignedPolicyVerifier({
      serviceIdentity: "bench",
      pinned: [await server.publicKeys(owner.id)],
    });
    const verify = await measure(iterations, () => openPolicyDocument(signed, sidecar, context));
    const row = (name: string, m: typeof cold, bytes: number, targetMs?: number): PolicyBenchRow => ({
      name,
      operations: 100,
      medianMs: round(m.median),
      p95Ms: round(m.p95),
      cpuMs: round(m.cpu),
      opsPerSec: Math.round(1000 / m.median),
      artifactBytes: bytes,
      ...(targetMs === undefined ? {} : { targetMs }),
    });
    return [
      row("load+verify (cold) via crypto service 100 ops", cold, Buffer.byteLength(artifact), 5),
      row("sidecar: verify signed policy 100 ops", verify, Buffer.byteLength(signed)),
    ];
  } finally {
    await server.close();
    await store.close();
    await idp.close();
    await rm(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  console.table(await benchPolicy());
}
