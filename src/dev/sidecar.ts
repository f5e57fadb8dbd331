/**
 * The sidecar of the development environment: Envoy ext_authz (gRPC), the forward proxy and
 * the metrics/health port, in-process. Like a deployed sidecar it holds no policy key: it
 * verifies the signed policies the authority hands it with the signer's public keys (fetched
 * from the authority). A capability map that sends the sample API's host to the `customers` capability.
 */
import type { Logger } from "../observability/logger.ts";
import { buildSidecar } from "../servers/sidecar/build.ts";
import { resolveSidecarConfig } from "../servers/sidecar/config.ts";
import { clientCredentialsTokenSource } from "../servers/sidecar/service-token.ts";
import type { Sidecar, SidecarPorts } from "../servers/sidecar/sidecar.ts";
import { DEV_CAPABILITY, DEV_IDP } from "./names.ts";
import { DEV_HOST } from "./ports.ts";

/** Decision deadline of the dev sidecar (ext_authz and proxy). */
export const DEV_DECISION_TIMEOUT_MS = 3000;

export interface DevSidecarOptions {
  readonly authorityUrl: string;
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly tokenUrl: string;
  /** The sidecar's own client secret at the identity provider (role `sidecar`). */
  readonly clientSecret: string;
  /** Names the v2 policy signer (`service:<identity>`). */
  readonly serviceIdentity: string;
  readonly sampleApiUrl: string;
  /** The parameter-scoping rollout of the authority service beside it. */
  readonly constraintsRollout?: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  /** The `egress-allow` setting of the environment (the sample API's address and port, and the user's entries). */
  readonly egressAllow: string;
  /** Where the sidecar writes its decision records ahead (in the environment's state directory). */
  readonly journalDir: string;
  readonly ports: { readonly grpc: number; readonly proxy: number; readonly metrics: number };
  /** Redis and the 32-byte MAC key of its cache entries (optional). */
  readonly redis?: { readonly url: string; readonly cacheKey: Uint8Array };
  readonly log: Logger;
}

export interface DevSidecar {
  readonly sidecar: Sidecar;
  readonly ports: SidecarPorts;
}

export async function startDevSidecar(options: DevSidecarOptions): Promise<DevSidecar> {
  const token = clientCredentialsTokenSource({
    tokenUrl: options.tokenUrl,
    clientId: DEV_IDP.sidecarClientId,
    clientSecret: options.clientSecret,
  });
  // Fetched now, not inside the first decision: the IdP's secret check (scrypt) alone can
  // take a good part of an ext_authz deadline on a busy machine.
  await token.token();
  // Configured as `authority sidecar` is, through its own composition root; the dev
  // environment supplies the token it already fetched and the Redis key from its vault.
  const config = resolveSidecarConfig({
    flags: {
      "authority-url": options.authorityUrl,
      "grpc-listen": `${DEV_HOST}:${options.ports.grpc}`,
      "proxy-listen": `${DEV_HOST}:${options.ports.proxy}`,
      "metrics-listen": `${DEV_HOST}:${options.ports.metrics}`,
      issuer: options.issuer,
      "jwks-url": options.jwksUrl,
      audience: "authority",
      "idp-token-url": options.tokenUrl,
      "client-id": DEV_IDP.sidecarClientId,
      "service-identity": options.serviceIdentity,
      // A cold decision loads the policy (decrypt-verify at the crypto service), the catalog
      // and the credentials; production's 200 ms / 1 s are tuned for warm caches, not for a
      // laptop running every service in one process.
      "decision-timeout-ms": String(DEV_DECISION_TIMEOUT_MS),
      "proxy-decision-timeout-ms": String(DEV_DECISION_TIMEOUT_MS),
      "capability-map": JSON.stringify({ [new URL(options.sampleApiUrl).host]: DEV_CAPABILITY.capabilityId }),
      ...(options.constraintsRollout === undefined
        ? {}
        : {
            "parameter-scoping": String(options.constraintsRollout.enabled),
            ...(options.constraintsRollout.partnerAllowlist.length === 0
              ? {}
              : { "parameter-scoping-partners": options.constraintsRollout.partnerAllowlist.join(",") }),
          }),
      "egress-allow": options.egressAllow,
      "journal-dir": options.journalDir,
    },
    env: { AUTHORITY_CLIENT_SECRET: options.clientSecret },
  });
  const sidecar = await buildSidecar(config, {
    token,
    logger: options.log,
    ...(options.redis === undefined ? {} : { redis: options.redis }),
  });
  try {
    return { sidecar, ports: await sidecar.start() };
  } catch (error) {
    await sidecar.close({ graceMs: 0 });
    throw error;
  }
}
