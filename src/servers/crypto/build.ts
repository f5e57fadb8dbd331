/**
 * The composition root of `authority crypto`: from its validated configuration it opens the
 * store, loads the KEK, builds the bearer verifier and the crypto service on them
 * (createCryptoServer builds its owner registry, token cache and worker pool itself, per
 * server). Tests override the store, KEK or verifier they supply.
 */
import { type Kek, loadKek } from "../../crypto/index.ts";
import { createJwtVerifier, type JwtVerifier } from "../../identity/jwt-verifier.ts";
import { createLogger, type Logger } from "../../observability/logger.ts";
import { openStore } from "../../store/index.ts";
import type { Store } from "../../store/store.ts";
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
