/**
 * The upstream crypto service as a dependency that can go away and come back: stop()
 * closes the real server, start() serves again on the same port over the same store and
 * KEK (owners and keys survive). A fault proxy in front of it (`proxy.url`) can freeze or
 * reset connections without touching the service. Owners are provisioned with planted
 * canary credentials (test/helpers/canary.ts).
 *
 *   const crypto = await startRestartableCrypto({ dir, logs, issuer, jwksUri });
 *   createCryptoClient({ baseUrl: crypto.proxy.url })
 *   const owners = canaryOwners(crypto)    // `CryptoOwners` for policyCredentials()
 */
import { join } from "node:path";
import { Kek } from "../../src/crypto/index.ts";
import type { CryptoOwners } from "../../src/dev/crypto-owners.ts";
import { createJwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { type CryptoServer, createCryptoServer } from "../../src/servers/crypto/index.ts";
import { openStore } from "../../src/store/index.ts";
import { canary } from "./canary.ts";
import { type FaultProxy, startFaultProxy } from "./fault-proxy.ts";
import type { LogCapture } from "./log-capture.ts";
import { stablePort } from "./stable-port.ts";

export interface PartnerKeys {
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
}

export interface RestartableCrypto {
  /** The service itself. */
  readonly url: string;
  /** The fault proxy in front of it. */
  readonly proxy: FaultProxy;
  server(): CryptoServer;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Closes the proxy, the server and its store. */
  close(): Promise<void>;
}

export interface RestartableCryptoOptions {
  readonly dir: string;
  readonly logs: LogCapture;
  /** The identity provider whose tokens the service accepts. */
  readonly issuer: string;
  readonly jwksUri: string;
}

export function partnerKeysWithCanaries(): PartnerKeys {
  return { apiKey: canary("apk_"), accessKey: canary("ak_"), secretKey: canary("sk_") };
}

export async function startRestartableCrypto(options: RestartableCryptoOptions): Promise<RestartableCrypto> {
  const store = await openStore(`sqlite:${join(options.dir, "crypto.db")}`);
  const { kek } = Kek.generate();
  const verifier = createJwtVerifier({
    issuer: options.issuer,
    audience: "authority",
    jwks: { url: options.jwksUri, cooldownMs: 0 },
    requireTokenUse: "access",
  });
  const create = () => createCryptoServer({ store, kek, verifier, logger: options.logs.logger("crypto") });
  let server: CryptoServer;
  let url: string;
  try {
    server = await create();
    url = await server.listen({ host: "127.0.0.1", port: await stablePort() });
  } catch (error) {
    await store.close();
    throw error;
  }
  const port = Number(new URL(url).port);
  let running = true;
  const proxy = await startFaultProxy(port);
  const stop = async () => {
    if (!running) return;
    running = false;
    await server.close();
  };
  return {
    url,
    proxy,
    server: () => server,
    stop,
    async start() {
      if (running) return;
      server = await create();
      await server.listen({ host: "127.0.0.1", port });
      running = true;
    },
    async close() {
      await proxy.close();
      await stop();
      await store.close();
    },
  };
}

/**
 * Policy owners (the service identity, one per v1 subject) provisioned on first use with
 * canary credentials — what `authority dev` does with its vault.
 */
export function canaryOwners(crypto: Pick<RestartableCrypto, "server">): CryptoOwners {
  const provisioned = new Map<string, Promise<PartnerKeys>>();
  return {
    ensure(input) {
      let pending = provisioned.get(input.id);
      if (pending === undefined) {
        const keys = partnerKeysWithCanaries();
        pending = (async () => {
          if (!(await crypto.server().hasOwner(input.id))) {
            await crypto.server().provisionOwner({
              id: input.id,
              kind: input.kind,
              credentials: keys,
              ...(input.allowedSubjects === undefined ? {} : { allowedSubjects: input.allowedSubjects }),
            });
          }
          return keys;
        })();
        // A failure is not remembered: the next call provisions again.
        pending.catch(() => provisioned.delete(input.id));
        provisioned.set(input.id, pending);
      }
      return pending;
    },
  };
}
