/**
 * The composition root of `authority managed`: from its validated configuration it loads
 * the TLS material (the given certificate files, or a development certificate kept in the
 * state directory, said in the log) and builds the managed crypto API on it
 * (createManagedServer builds its crypto client, IdP token cache and rate limiter, per
 * server). Tests override the TLS material, the crypto client or the logger.
 */
import { readFile } from "node:fs/promises";
import type { CryptoClient } from "../../clients/crypto-service/client.ts";
import { createLogger, type Logger } from "../../observability/logger.ts";
import { loadOrCreateDevCertificate } from "./dev-certificate.ts";
import type { ManagedServerOptions } from "./options.ts";
import { createManagedServer, type ManagedServer } from "./server.ts";

/** The validated settings of `authority managed` this builder reads. */
export interface ManagedServiceConfig {
  readonly host: string;
  readonly port: number;
  readonly tls: { readonly certFile: string; readonly keyFile: string } | undefined;
  readonly stateDir: string;
  readonly logLevel: string;
  readonly server: Omit<ManagedServerOptions, "https" | "logger">;
}

export interface ManagedServiceOverrides {
  readonly https?: ManagedServerOptions["https"];
  readonly cryptoClient?: CryptoClient;
  readonly logger?: Logger;
  readonly now?: () => number;
}

export interface ManagedService {
  readonly server: ManagedServer;
  /** Serves HTTPS on the configured address; resolves to the base URL bound. */
  listen(address?: { readonly host?: string; readonly port?: number }): Promise<string>;
  close(): Promise<void>;
}

async function tlsMaterial(
  config: ManagedServiceConfig,
  logger: Logger,
): Promise<ManagedServerOptions["https"]> {
  if (config.tls === undefined) {
    const dev = await loadOrCreateDevCertificate(config.stateDir);
    logger.warn(
      { certFile: dev.certFile, fingerprint: dev.fingerprint, created: dev.created },
      "no --tls-cert/--tls-key: serving a self-signed development certificate",
    );
    return { key: dev.key, cert: dev.cert };
  }
  const [cert, key] = await Promise.all([readFile(config.tls.certFile), readFile(config.tls.keyFile)]);
  return { key, cert };
}

export async function buildManagedService(
  config: ManagedServiceConfig,
  overrides: ManagedServiceOverrides = {},
): Promise<ManagedService> {
  const logger = overrides.logger ?? createLogger("managed", config.logLevel);
  const server = await createManagedServer({
    ...config.server,
    https: overrides.https ?? (await tlsMaterial(config, logger)),
    logger,
    ...(overrides.cryptoClient === undefined ? {} : { cryptoClient: overrides.cryptoClient }),
    ...(overrides.now === undefined ? {} : { now: overrides.now }),
  });
  return {
    server,
    listen: (address) => server.listen(address ?? { host: config.host, port: config.port }),
    close: () => server.close(),
  };
}
