/**
 * The sidecar of the development environment: Envoy ext_authz (gRPC), the forward proxy and
 * the metrics/health port, in-process. Like a deployed sidecar it holds no policy key: it
 * verifies the signed policies the authority hands it with the signer's public keys (fetched
 * from the authority). A capability map that sends the sample API's host to the `customers` capability.
 */
import { egressAllowSetting } from "../config/settings.ts";
import { createEgressPolicy, endpointOfUrl } from "../execute/egress.ts";
import { createJwtVerifier } from "../identity/jwt-verifier.ts";
import type { Logger } from "../observability/logger.ts";
import { createAuthorityClient } from "../servers/sidecar/authority-client.ts";
import { createCapabilityMap } from "../servers/sidecar/capability-map.ts";
import { clientCredentialsTokenSource } from "../servers/sidecar/service-token.ts";
import { createSidecar, type Sidecar, type SidecarPorts } from "../servers/sidecar/sidecar.ts";
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
  /** The `egress-allow` setting of the environment (exactly the sample API's address and port). */
  readonly egressAllow: string;
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
  const sidecar = createSidecar({
    authority: createAuthorityClient({ baseUrl: options.authorityUrl, token }),
    // A cold decision loads the policy (decrypt-verify at the crypto service), the catalog and
    // the credentials; production's 200 ms / 1 s are tuned for warm caches, not for a laptop
    // running every service in one process.
    decisionTimeoutMs: DEV_DECISION_TIMEOUT_MS,
    proxyDecisionTimeoutMs: DEV_DECISION_TIMEOUT_MS,
    verifier: createJwtVerifier({
      issuer: options.issuer,
      audience: "authority",
      jwks: { url: options.jwksUrl },
      requireTokenUse: "access",
    }),
    policyKeys: { serviceIdentity: options.serviceIdentity },
    capabilityMap: createCapabilityMap({ [new URL(options.sampleApiUrl).host]: DEV_CAPABILITY.capabilityId }),
    ...(options.redis === undefined ? {} : { redis: options.redis }),
    listen: {
      grpc: { host: DEV_HOST, port: options.ports.grpc },
      proxy: { host: DEV_HOST, port: options.ports.proxy },
      metrics: { host: DEV_HOST, port: options.ports.metrics },
    },
    ...(options.constraintsRollout === undefined ? {} : { constraintsRollout: options.constraintsRollout }),
    logger: options.log,
    egress: createEgressPolicy({
      allow: egressAllowSetting.parse(options.egressAllow, "egress-allow"),
      platformEndpoints: [options.authorityUrl, options.issuer, options.jwksUrl, options.tokenUrl]
        .map(endpointOfUrl)
        .filter((endpoint) => endpoint !== undefined),
    }),
  });
  try {
    return { sidecar, ports: await sidecar.start() };
  } catch (error) {
    await sidecar.close({ graceMs: 0 });
    throw error;
  }
}
