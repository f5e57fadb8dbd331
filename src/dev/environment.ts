/**
 * `authority dev` in one process: the development identity provider, the upstream crypto
 * service, the managed crypto API (HTTPS, self-signed), the authority service, the sample
 * customers API and the sidecar, all on 127.0.0.1 and sharing one embedded SQLite store and
 * one key-encryption key under the state directory; then the demo data, seeded
 * idempotently, and `<state-dir>/dev-credentials.json`.
 *
 * The authority runs in the `crypto` policy protection mode, as a deployment does: policies,
 * envelopes and auth-profile secrets are protected by the crypto service with the service
 * identity (`service:authority`, credentials from `<state-dir>/crypto-credentials.json`), and
 * each subject's own owner (`subject:<id>`), which the authority provisions and acts for.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { resolveAuthorityConfig } from "../config/authority.ts";
import type { EgressAllowEntry } from "../core/egress-address.ts";
import { type Kek, loadKek } from "../crypto/index.ts";
import type { Logger } from "../observability/logger.ts";
import { type AuthorityService, buildAuthorityService } from "../servers/authority/build.ts";
import { buildCryptoService } from "../servers/crypto/build.ts";
import type { CryptoServer, PartnerCredentials } from "../servers/crypto/index.ts";
import { createIdpServer, type IdpServer } from "../servers/idp/index.ts";
import { buildManagedService } from "../servers/managed/build.ts";
import { loadOrCreateDevCertificate, type ManagedServer } from "../servers/managed/index.ts";
import { clientCredentialsTokenSource, type ServiceTokenSource } from "../servers/sidecar/service-token.ts";
import type { Sidecar } from "../servers/sidecar/sidecar.ts";
import { openStore } from "../store/index.ts";
import type { Store } from "../store/store.ts";
import { createAdminClient } from "./admin-client.ts";
import {
  type DevUrls,
  devCredentialsDocument,
  type SeededBinding,
  writeDevCredentials,
} from "./credentials-file.ts";
import { createCryptoOwners } from "./crypto-owners.ts";
import { AGENT_SCOPES, type DevSecrets, loadDevSecrets, registerDevIdentities } from "./identities.ts";
import { DEV_IDP, DEV_PARTNER, DEV_SERVICE_IDENTITY, DEV_SUBJECTS } from "./names.ts";
import {
  DEFAULT_DEV_PORTS,
  DEV_HOST,
  type DevPorts,
  EPHEMERAL_DEV_PORTS,
  findFreePort,
  portInUseHint,
} from "./ports.ts";
import { type SampleCustomersApi, startSampleCustomersApi } from "./sample-customers-api.ts";
import { type SeededData, type SeedReport, seedAuthority } from "./seed.ts";
import { seedBinding } from "./seed-bindings.ts";
import { startDevSidecar } from "./sidecar.ts";
import { createDevVault, type DevVault, randomSecret } from "./vault.ts";

export interface DevEnvironmentOptions {
  /** Where the SQLite store, the KEK, the IdP keys, the TLS certificate and dev-credentials.json live. */
  readonly stateDir: string;
  /**
   * The documented ports, free ports chosen by the OS, or explicit ones (0: a free one) — e.g.
   * to restart on the same addresses, as a re-run of `authority dev` does.
   */
  readonly ports: "default" | "ephemeral" | DevPorts;
  /** Redis for the sidecar's verified-policy cache (and the authority's change events). */
  readonly redisUrl?: string;
  /** Component logs (each server logs as a child of it). */
  readonly log: Logger;
  /** Start the sidecar (default true). */
  readonly sidecar?: boolean;
  /** The user's `egress-allow` entries (their own APIs), allowed beside the sample API. */
  readonly egressAllow?: readonly EgressAllowEntry[];
}

export interface DevEnvironment {
  readonly stateDir: string;
  readonly credentialsFile: string;
  readonly urls: DevUrls;
  /** The sample API's own OAuth provider (users' grants): its issuer URL. */
  readonly userOAuthProvider: string;
  /** The contents written to dev-credentials.json. */
  readonly credentials: Readonly<Record<string, unknown>>;
  readonly secrets: DevSecrets;
  readonly partnerKeys: PartnerCredentials;
  readonly seeded: SeededData;
  readonly binding: SeededBinding | undefined;
  /** Everything seeding did in this start (created / updated / unchanged). */
  readonly report: SeedReport;
  /** Parts that could not be started or seeded; empty when everything is up. */
  readonly warnings: readonly string[];
  readonly store: Store;
  readonly kek: Kek;
  readonly vault: DevVault;
  readonly idp: IdpServer;
  readonly crypto: CryptoServer;
  readonly managed: ManagedServer;
  readonly authority: AuthorityService;
  readonly sampleApi: SampleCustomersApi;
  readonly sidecar: Sidecar | undefined;
  /** Stops everything, newest first; safe to call more than once. */
  close(): Promise<void>;
}

export class DevEnvironmentOptionsError extends Error {
  readonly code = "dev_environment_options_invalid";

  constructor(message: string) {
    super(`authority dev: ${message}`);
    this.name = "DevEnvironmentOptionsError";
  }
}

function validate(options: DevEnvironmentOptions): void {
  if (typeof options !== "object" || options === null)
    throw new DevEnvironmentOptionsError("options are required");
  if (typeof options.stateDir !== "string" || options.stateDir.length === 0) {
    throw new DevEnvironmentOptionsError("stateDir is required");
  }
  if (typeof options.ports === "object" && options.ports !== null) {
    for (const [name, port] of Object.entries(options.ports)) {
      if (!Number.isInteger(port) || port < 0 || port > 65535) {
        throw new DevEnvironmentOptionsError(`ports.${name} must be 0-65535`);
      }
    }
  } else if (options.ports !== "default" && options.ports !== "ephemeral") {
    throw new DevEnvironmentOptionsError('ports must be "default", "ephemeral" or a DevPorts object');
  }
  if (options.redisUrl !== undefined && !/^rediss?:\/\//.test(options.redisUrl)) {
    throw new DevEnvironmentOptionsError("redisUrl must be a redis:// URL");
  }
  if (typeof options.log?.child !== "function")
    throw new DevEnvironmentOptionsError("log must be a pino logger");
}

const OPENAPI_DOCUMENT = new URL("../../examples/openapi/customers.yaml", import.meta.url);

/** Closes what was started, newest first, and keeps going past failures. */
function closer(log: Logger) {
  const steps: Array<{ name: string; close: () => Promise<unknown> }> = [];
  let closing: Promise<void> | undefined;
  return {
    add(name: string, close: () => Promise<unknown>): void {
      steps.push({ name, close });
    },
    close(): Promise<void> {
      closing ??= (async () => {
        for (const step of steps.reverse()) {
          try {
            await step.close();
          } catch (error) {
            log.warn({ err: error, component: step.name }, "failed to close");
          }
        }
      })();
      return closing;
    },
  };
}

async function listenOn<T>(what: string, port: number, start: () => Promise<T>): Promise<T> {
  try {
    return await start();
  } catch (error) {
    throw portInUseHint(error, what, port);
  }
}

export async function startDevEnvironment(options: DevEnvironmentOptions): Promise<DevEnvironment> {
  validate(options);
  const log = options.log;
  const stateDir = resolve(options.stateDir);
  const ports: DevPorts =
    options.ports === "default"
      ? DEFAULT_DEV_PORTS
      : options.ports === "ephemeral"
        ? EPHEMERAL_DEV_PORTS
        : options.ports;
  const warnings: string[] = [];
  const stack = closer(log);
  try {
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    const kek = await loadKek({ kekFile: join(stateDir, "kek"), createIfMissing: true });
    const store = await openStore(`sqlite:${join(stateDir, "authority.db")}`);
    stack.add("store", () => store.close());
    const vault = createDevVault({ store, kek });
    const secrets = await loadDevSecrets(vault);

    // The authority's address comes first: the IdP issues tokens for its MCP resource.
    const authorityPort = ports.authority === 0 ? await findFreePort() : ports.authority;
    const authorityBase = `http://${DEV_HOST}:${authorityPort}`;
    // Identity provider: its signing keys persist, so tokens survive a restart.
    const idp = await createIdpServer({
      // A fixed port gives a fixed issuer (tokens and the binding stay valid across restarts).
      ...(ports.idp === 0 ? {} : { issuer: `http://${DEV_HOST}:${ports.idp}` }),
      keysDir: join(stateDir, "idp-keys"),
      audience: "authority",
      // An admin can add an agent's client (docs/onboarding.md): development only.
      clientRegistration: true,
      // An MCP client gets its own token (docs/mcp.md, "Clients that get their own token"):
      // it registers, and the authorize endpoint signs in the demo agent without a page.
      authorizationCode: {
        user: { subject: DEV_SUBJECTS.agent.subjectId, roles: [] },
        resources: [`${authorityBase}/mcp`],
        scopes: [...AGENT_SCOPES],
      },
      logger: log.child({ component: "idp" }),
    });
    await listenOn("identity provider", ports.idp, () => idp.listen({ host: DEV_HOST, port: ports.idp }));
    stack.add("idp", () => idp.close());
    await registerDevIdentities(idp.directory, secrets);
    const issuer = idp.issuer;
    const jwksUrl = idp.jwksUri;
    const tokenUrl = idp.tokenEndpoint;
    // The sample API's own OAuth provider, where a user connects their account (docs/admin-api.md,
    // "User grants"): another dev IdP, not the platform's (egress keeps partners' token URLs off
    // the platform's own services). Its authorize endpoint signs in the demo agent's user.
    const userOAuthProvider = await createIdpServer({
      audience: "customers-api",
      authorizationCode: { user: { subject: DEV_SUBJECTS.agent.subjectId, roles: [] }, maxClients: 10 },
      logger: log.child({ component: "user-oauth-provider" }),
    });
    await userOAuthProvider.listen({ host: DEV_HOST, port: 0 });
    stack.add("user OAuth provider", () => userOAuthProvider.close());

    // Upstream crypto service and the partner's owner (its keys are the managed API's).
    const cryptoService = await buildCryptoService(
      {
        host: DEV_HOST,
        port: ports.crypto,
        storeUrl: `sqlite:${join(stateDir, "authority.db")}`,
        kekFile: join(stateDir, "kek"),
        initKek: false,
        issuer,
        jwksUrl,
        audience: "authority",
        adminRole: "admin",
        logLevel: "info",
      },
      // The one store and KEK of the environment (the authority's too).
      { store, kek, logger: log.child({ component: "crypto" }) },
    );
    const crypto = cryptoService.server;
    const cryptoUrl = await listenOn("crypto service", ports.crypto, () => cryptoService.listen());
    stack.add("crypto", () => cryptoService.close());
    const owners = createCryptoOwners({ crypto, vault });
    const partnerKeys = await owners.ensure({
      id: `partner-${DEV_PARTNER.partnerId}`,
      kind: "partner",
      allowedSubjects: [DEV_IDP.serviceAccountUsername],
    });

    // Managed crypto API over HTTPS with the development certificate.
    const certificate = await loadOrCreateDevCertificate(stateDir);
    const managed = await buildManagedService(
      {
        host: DEV_HOST,
        port: ports.managed,
        tls: undefined,
        stateDir,
        logLevel: "info",
        server: { idpTokenUrl: tokenUrl, cryptoUrl, rateLimit: { perUserPerMinute: 600, burst: 60 } },
      },
      {
        https: { key: certificate.key, cert: certificate.cert },
        logger: log.child({ component: "managed" }),
      },
    );
    const managedUrl = await listenOn("managed crypto API", ports.managed, () => managed.listen());
    stack.add("managed", () => managed.close());

    // Authority service in the crypto mode, as a deployment runs it: the service identity's
    // credentials from a mounted file (here: written from the vault), no KEK and no key ring;
    // subjects' owners are provisioned by the authority itself (decision 2513).
    const serviceKeys = await owners.ensure({
      id: `service:${DEV_SERVICE_IDENTITY}`,
      kind: "service",
      allowedSubjects: [DEV_IDP.authorityClientId],
    });
    const cryptoCredentialsFile = join(stateDir, "crypto-credentials.json");
    await writeFile(
      cryptoCredentialsFile,
      JSON.stringify({
        username: DEV_IDP.authorityClientId,
        password: secrets.authorityClientSecret,
        api_key: serviceKeys.apiKey,
        access_key: serviceKeys.accessKey,
        secret_key: serviceKeys.secretKey,
      }),
      { mode: 0o600 },
    );
    // The sample API's port is fixed before the authority starts: the egress allow list opens
    // exactly that one loopback destination and what the user's own `egress-allow` lists.
    const sampleApiPort = ports.sampleApi === 0 ? await findFreePort() : ports.sampleApi;
    const egressAllow = [
      `${DEV_HOST}:${sampleApiPort}`,
      // The sample API's own OAuth provider: users' grants (auth profile `customers-user`).
      new URL(userOAuthProvider.issuer).host,
      ...(options.egressAllow ?? []).map((e) => e.text),
    ].join(",");
    const config = resolveAuthorityConfig({
      flags: {
        "state-dir": stateDir,
        listen: `${DEV_HOST}:${authorityPort}`,
        "public-url": authorityBase,
        issuer,
        "jwks-url": jwksUrl,
        audience: "authority",
        "managed-url": managedUrl,
        "crypto-url": cryptoUrl,
        "policy-protection": "crypto",
        "crypto-credentials-file": cryptoCredentialsFile,
        "crypto-token-url": tokenUrl,
        "service-identity": DEV_SERVICE_IDENTITY,
        // The sample API's operations carry signed parameter constraints (e.g. limit ≤ 50):
        // the demo partner is in the rollout, so they are enforced instead of failing closed.
        "parameter-scoping": "true",
        "parameter-scoping-partners": DEV_PARTNER.partnerId,
        "egress-allow": egressAllow,
        ...(options.redisUrl === undefined ? {} : { "redis-url": options.redisUrl }),
      },
      env: {},
    });
    const authority = await buildAuthorityService(config, {
      store,
      logger: log.child({ component: "authority" }),
    });
    const { protector, secretKeyRings } = authority.context;
    const authorityUrl = await listenOn("authority service", authorityPort, () => authority.listen());
    stack.add("authority", () => authority.close());

    // The sample upstream; envelope verification is wired once the binding exists.
    let binding: SeededBinding | undefined;
    let workloadToken: ServiceTokenSource | undefined;
    const sampleApi = await listenOn("sample customers API", sampleApiPort, () =>
      startSampleCustomersApi({
        apiKey: secrets.upstreamApiKey,
        adminBearer: secrets.upstreamAdminBearer,
        host: DEV_HOST,
        port: sampleApiPort,
        // GET /customers/me answers the signed-in user of a token its provider issued.
        userTokens: { issuer: userOAuthProvider.issuer, jwksUrl: userOAuthProvider.jwksUri },
        envelopeVerification: () => {
          const source = workloadToken;
          return binding === undefined || source === undefined
            ? undefined
            : { authorityUrl, bindingId: binding.bindingId, workloadToken: () => source.token() };
        },
      }),
    );
    stack.add("sample API", () => sampleApi.close());

    // Seeding: the admin domain services for the authority's own data…
    const deps = {
      store,
      now: () => new Date(),
      protector,
      logger: log.child({ component: "seed" }),
      secretKeyRings,
      egress: authority.context.egress,
      ...(authority.context.onPolicyChange === undefined
        ? {}
        : { onPolicyChange: authority.context.onPolicyChange }),
    };
    const seeded = await seedAuthority({
      deps,
      openApiDocument: await readFile(OPENAPI_DOCUMENT, "utf8"),
      upstreamBaseUrl: sampleApi.url,
      upstreamSecrets: { apiKey: secrets.upstreamApiKey, adminBearer: secrets.upstreamAdminBearer },
    });
    const report: SeedReport = {
      created: [...seeded.report.created],
      updated: [...seeded.report.updated],
      unchanged: [...seeded.report.unchanged],
    };

    // …and the public admin routes for the headless binding.
    const adminToken = async () =>
      (await idp.issueToken({ subject: DEV_IDP.adminUsername, roles: ["admin"], lifetimeSec: 300 }))
        .accessToken;
    try {
      const seededBinding = await seedBinding({
        admin: createAdminClient({ baseUrl: authorityUrl, token: adminToken }),
        vault,
        issuer,
        jwksUrl,
        now: () => new Date(),
      });
      binding = seededBinding.binding;
      workloadToken = clientCredentialsTokenSource({
        tokenUrl: `${authorityUrl}/v1/bindings/${binding.bindingId}/token`,
        clientId: binding.workloadClientId,
        clientSecret: binding.workloadClientSecret,
        scope: "authority/authority.broker.execute",
      });
      report.created.push(...seededBinding.report.created);
      report.updated.push(...seededBinding.report.updated);
      report.unchanged.push(...seededBinding.report.unchanged);
    } catch (error) {
      log.warn({ err: error }, "headless binding could not be seeded");
      warnings.push(`headless binding not seeded: ${error instanceof Error ? error.message : String(error)}`);
    }

    // Sidecar: ext_authz gRPC, forward proxy, metrics — no policy key: it verifies signed
    // policies with the signer's public key, fetched from the authority.
    let sidecar: Sidecar | undefined;
    let sidecarUrls: DevUrls["sidecar"];
    if (options.sidecar !== false) {
      try {
        const cacheKey =
          options.redisUrl === undefined
            ? undefined
            : Buffer.from(
                await vault.getOrCreate("sidecar-cache-key", () => randomSecret("", 32)),
                "base64url",
              );
        const { sidecar: started, ports: bound } = await listenOn("sidecar", ports.sidecarGrpc, () =>
          startDevSidecar({
            authorityUrl,
            issuer,
            jwksUrl,
            tokenUrl,
            clientSecret: secrets.sidecarClientSecret,
            serviceIdentity: DEV_SERVICE_IDENTITY,
            sampleApiUrl: sampleApi.url,
            // The same rollout as the authority service: constraints hold on every path.
            constraintsRollout: config.parameterScoping,
            egressAllow,
            journalDir: join(stateDir, "sidecar-journal"),
            ports: { grpc: ports.sidecarGrpc, proxy: ports.sidecarProxy, metrics: ports.sidecarMetrics },
            ...(options.redisUrl === undefined || cacheKey === undefined
              ? {}
              : { redis: { url: options.redisUrl, cacheKey } }),
            log: log.child({ component: "sidecar" }),
          }),
        );
        stack.add("sidecar", () => started.close({ graceMs: 2000 }));
        sidecar = started;
        sidecarUrls = {
          grpc: `${DEV_HOST}:${bound.grpc}`,
          proxy: `http://${DEV_HOST}:${bound.proxy}`,
          metrics: `http://${DEV_HOST}:${bound.metrics}`,
        };
      } catch (error) {
        log.warn({ err: error }, "sidecar could not be started");
        warnings.push(`sidecar not started: ${error instanceof Error ? error.message : String(error)}`);
      }
    }

    const urls: DevUrls = {
      authority: authorityUrl,
      managed: managedUrl,
      crypto: cryptoUrl,
      idp: issuer,
      tokenEndpoint: tokenUrl,
      jwks: jwksUrl,
      sampleApi: sampleApi.url,
      ...(sidecarUrls === undefined ? {} : { sidecar: sidecarUrls }),
    };
    const credentials = devCredentialsDocument({
      urls,
      managedCertFile: certificate.certFile,
      secrets,
      partnerKeys,
      seeded,
      binding,
      now: new Date(),
    });
    const credentialsFile = await writeDevCredentials(stateDir, credentials);
    return {
      stateDir,
      credentialsFile,
      urls,
      userOAuthProvider: userOAuthProvider.issuer,
      credentials,
      secrets,
      partnerKeys,
      seeded,
      binding,
      report,
      warnings,
      store,
      kek,
      vault,
      idp,
      crypto,
      managed: managed.server,
      authority,
      sampleApi,
      sidecar,
      close: () => stack.close(),
    };
  } catch (error) {
    await stack.close();
    throw error;
  }
}
