/**
 * The composition root of `authority crypto`: from its validated configuration it opens the
 * store, loads the KEK, builds the bearer verifier and the crypto service on them
 * (createCryptoServer builds its owner registry, token cache and worker pool itself, per
 * server). Tests override the store, KEK or verifier they supply.
 */
import { CryptoServiceError } from "../../clients/crypto-service/reasons.ts";
import type { ServiceOwnerBootstrap } from "../../config/crypto.ts";
import { readSecretFields } from "../../config/secret-fields.ts";
import { ConfigError } from "../../core/config-error.ts";
import { type Kek, loadKek } from "../../crypto/index.ts";
import { createJwtVerifier, type JwtVerifier } from "../../identity/jwt-verifier.ts";
import { createLogger, type Logger } from "../../observability/logger.ts";
import { openStore } from "../../store/index.ts";
import type { Store } from "../../store/store.ts";
import { CryptoServerConfigError } from "./options.ts";
import type { EnsuredService } from "./owner-registry.ts";
import { type CryptoServer, createCryptoServer, type ListenAddress } from "./server.ts";

/** The validated settings of `authority crypto` this builder reads. */
export interface CryptoServiceConfig {
  readonly host: string;
  readonly port: number;
  readonly storeUrl: string;
  readonly kekFile: string;
  /** The KEK itself (AUTHORITY_KEK), when given: it wins over the file. */
  readonly kekValue?: string | undefined;
  readonly initKek: boolean;
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly audience: string;
  readonly adminRole: string;
  readonly logLevel: string;
  /** The service owner kept as its mounted secret says, at every start (decision 2601). */
  readonly serviceOwner?: ServiceOwnerBootstrap | undefined;
}

export interface CryptoServiceOverrides {
  /** Used as is and not closed by close(). */
  readonly store?: Store;
  readonly kek?: Kek;
  readonly verifier?: JwtVerifier;
  readonly logger?: Logger;
  readonly now?: () => Date;
}

export interface CryptoService {
  readonly server: CryptoServer;
  readonly store: Store;
  readonly kek: Kek;
  /** Serves on the configured address; resolves to the base URL bound. */
  listen(address?: ListenAddress): Promise<string>;
  /** Stops the server, then closes the store it opened. */
  close(): Promise<void>;
}

const OWNER_CREDENTIAL_FIELDS = ["api_key", "access_key", "secret_key"] as const;

/** Provisions or updates the operator's service owner from its mounted secret; logs what it did. */
async function ensureServiceOwner(
  server: CryptoServer,
  bootstrap: ServiceOwnerBootstrap,
  logger: Logger,
): Promise<void> {
  const what = "the service owner's credentials";
  let outcome: EnsuredService;
  try {
    const fields = await readSecretFields(bootstrap.credentialsPath, OWNER_CREDENTIAL_FIELDS, what);
    const value = (field: (typeof OWNER_CREDENTIAL_FIELDS)[number]): string => {
      const found = fields[field];
      if (typeof found !== "string")
        throw new ConfigError(`${what} ${bootstrap.credentialsPath}: the field ${field} is missing`);
      return found;
    };
    outcome = await server.ensureServiceOwner({
      id: bootstrap.id,
      allowedSubjects: bootstrap.allowedSubjects,
      credentials: {
        apiKey: value("api_key"),
        accessKey: value("access_key"),
        secretKey: value("secret_key"),
      },
    });
  } catch (error) {
    // A start refused with the reason (never a value); the CLI prints it and exits.
    if (error instanceof ConfigError || error instanceof CryptoServiceError) {
      throw new CryptoServerConfigError(`service owner ${bootstrap.id}: ${error.message}`);
    }
    throw error;
  }
  logger.info(
    { owner: bootstrap.id, outcome, allowedSubjects: bootstrap.allowedSubjects },
    "service owner ensured",
  );
}

export async function buildCryptoService(
  config: CryptoServiceConfig,
  overrides: CryptoServiceOverrides = {},
): Promise<CryptoService> {
  const logger = overrides.logger ?? createLogger("crypto", config.logLevel);
  const kek =
    overrides.kek ??
    (await loadKek({
      ...(config.kekValue === undefined ? {} : { kek: config.kekValue }),
      kekFile: config.kekFile,
      createIfMissing: config.initKek,
    }));
  const ownsStore = overrides.store === undefined;
  const store = overrides.store ?? (await openStore(config.storeUrl));
  try {
    const verifier =
      overrides.verifier ??
      createJwtVerifier({
        issuer: config.issuer,
        audience: config.audience,
        jwks: config.jwksUrl,
        requireTokenUse: "access",
      });
    const server = await createCryptoServer({
      store,
      kek,
      verifier,
      logger,
      adminRole: config.adminRole,
      ...(overrides.now === undefined ? {} : { now: overrides.now }),
    });
    if (config.serviceOwner !== undefined) {
      await ensureServiceOwner(server, config.serviceOwner, logger).catch(async (error: unknown) => {
        await server.close();
        throw error;
      });
    }
    return {
      server,
      store,
      kek,
      listen: (address) => server.listen(address ?? { host: config.host, port: config.port }),
      async close() {
        await server.close();
        if (ownsStore) await store.close();
      },
    };
  } catch (error) {
    if (ownsStore) await store.close();
    throw error;
  }
}
