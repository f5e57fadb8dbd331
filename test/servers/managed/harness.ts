/**
 * Real servers on ephemeral ports for the crypto and managed tests: the development IdP,
 * the upstream crypto service on a SQLite store in a temp dir, and the managed API over
 * HTTPS with a self-signed certificate. Stop/start helpers reuse the same ports so a
 * stopped dependency can come back.
 */

import { join } from "node:path";
import { pino } from "pino";
import { Kek } from "../../../src/crypto/index.ts";
import { createJwtVerifier, type JwtVerifier } from "../../../src/identity/jwt-verifier.ts";
import { loggerOptions } from "../../../src/observability/logger.ts";
import {
  type CryptoServer,
  createCryptoServer,
  type ProvisionedOwner,
} from "../../../src/servers/crypto/server.ts";
import { createIdpServer, type IdpServer } from "../../../src/servers/idp/index.ts";
import { createDevCertificate, type DevCertificate } from "../../../src/servers/managed/dev-certificate.ts";
import type { ManagedServerOptions } from "../../../src/servers/managed/options.ts";
import { createManagedServer, type ManagedServer } from "../../../src/servers/managed/server.ts";
import { openStore, type Store } from "../../../src/store/index.ts";
import { type Conformance, checkResponsesAgainstDocument } from "../../helpers/openapi-conformance.ts";
import { makeTempDir, type TempDir } from "../../helpers/temp-dir.ts";

export const silentLogger = () => pino({ level: "silent" });

/** Every log line the crypto service and the managed API wrote, for leak checks. */
export const capturedLogs: string[] = [];

/** The project's logger settings (with its redaction), writing into `capturedLogs`. */
export const capturingLogger = () =>
  pino(
    { ...loggerOptions("debug"), name: "test" },
    { write: (line: string) => void capturedLogs.push(line) },
  );

/** Cheap scrypt so tests do not spend seconds hashing passwords. */
const scryptCost = { log2N: 10, r: 8, p: 1 } as const;

export interface Account {
  readonly username: string;
  readonly password: string;
}

export interface Environment {
  readonly dir: TempDir;
  readonly store: Store;
  readonly kek: Kek;
  readonly verifier: JwtVerifier;
  readonly certificate: DevCertificate;
  readonly idpUrl: string;
  readonly cryptoUrl: string;
  readonly managedUrl: string;
  readonly partner: ProvisionedOwner;
  readonly account: Account;
  idp(): IdpServer;
  crypto(): CryptoServer;
  addAccount(account: Account): Promise<void>;
  adminToken(): Promise<string>;
  userToken(subject?: string): Promise<string>;
  /** Another managed API on the same upstreams (closed with the environment). */
  startManaged(overrides?: Partial<ManagedServerOptions>): Promise<{ server: ManagedServer; url: string }>;
  stopCrypto(): Promise<void>;
  startCrypto(): Promise<void>;
  stopIdp(): Promise<void>;
  startIdp(): Promise<void>;
  close(): Promise<void>;
}

export async function startEnvironment(): Promise<Environment> {
  const dir = await makeTempDir("managed-crypto-");
  const store = await openStore(`sqlite:${join(dir.path, "authority.db")}`);
  const { kek } = Kek.generate();
  const certificate = await createDevCertificate();
  const accounts: Account[] = [];
  const keysDir = join(dir.path, "idp-keys");
  const managedServers: ManagedServer[] = [];

  const newIdp = async (issuer?: string, port = 0) => {
    const server = await createIdpServer({
      keysDir,
      scryptCost,
      failureLimit: false,
      logger: silentLogger(),
      ...(issuer === undefined ? {} : { issuer }),
    });
    const url = await server.listen({ host: "127.0.0.1", port });
    for (const account of accounts)
      await server.directory.addServiceAccount({ ...account, scopes: ["crypto"] });
    return { server, url };
  };
  let idp = await newIdp();
  const issuer = idp.server.issuer;
  const idpUrl = idp.url;
  const idpPort = Number(new URL(idpUrl).port);
  const verifier = createJwtVerifier({
    issuer,
    audience: "authority",
    jwks: { url: idp.server.jwksUri, cooldownMs: 0 },
  });

  const newCrypto = async (port = 0) => {
    const server = await createCryptoServer({ store, kek, verifier, logger: capturingLogger() });
    return { server, url: await server.listen({ host: "127.0.0.1", port }) };
  };
  let crypto = await newCrypto();
  const cryptoUrl = crypto.url;
  const cryptoPort = Number(new URL(cryptoUrl).port);
  const partner = await crypto.server.provisionOwner({ id: "partner-acme", kind: "partner" });

  const conformances: Conformance[] = [];
  const startManaged = async (overrides: Partial<ManagedServerOptions> = {}) => {
    const server = await createManagedServer({
      idpTokenUrl: `${idpUrl}/oauth2/token`,
      cryptoUrl,
      upstreamTimeoutMs: 10_000,
      https: { key: certificate.key, cert: certificate.cert },
      rateLimit: { perUserPerMinute: 1_000_000, burst: 10_000 },
      logger: capturingLogger(),
      ...overrides,
    });
    managedServers.push(server);
    conformances.push(checkResponsesAgainstDocument(server.app));
    return { server, url: await server.listen({ host: "127.0.0.1", port: 0 }) };
  };

  const addAccount = async (account: Account) => {
    accounts.push(account);
    await idp.server.directory.addServiceAccount({ ...account, scopes: ["crypto"] });
  };
  const account: Account = { username: "svc-acme", password: "canary-password-7f3a9c1e" };
  await addAccount(account);
  const managed = await startManaged();

  return {
    dir,
    store,
    kek,
    verifier,
    certificate,
    idpUrl,
    cryptoUrl,
    managedUrl: managed.url,
    partner,
    account,
    idp: () => idp.server,
    crypto: () => crypto.server,
    addAccount,
    adminToken: async () =>
      (await idp.server.issueToken({ subject: "admin-1", roles: ["admin"] })).accessToken,
    userToken: async (subject = "svc-acme") =>
      (await idp.server.issueToken({ subject, scopes: ["crypto"] })).accessToken,
    startManaged,
    stopCrypto: () => crypto.server.close(),
    async startCrypto() {
      crypto = await newCrypto(cryptoPort);
    },
    stopIdp: () => idp.server.close(),
    async startIdp() {
      idp = await newIdp(issuer, idpPort);
    },
    async close() {
      for (const server of managedServers) await server.close();
      await crypto.server.close();
      await idp.server.close();
      await store.close();
      await dir.cleanup();
      for (const conformance of conformances) conformance.assertConforming();
    },
  };
}
