/**
 * The development IdP as a dependency that can go away and come back: stop() closes it
 * (its JWKS and token endpoint are unreachable), start() serves again on the same port,
 * with the same issuer and the same signing keys (kept in `<dir>/<name>-keys`), and runs
 * `setup` again (accounts live in memory).
 *
 *   const idp = await startRestartableIdp({ dir, name: "idp", audience: "authority", logs });
 *   await idp.stop();  …  await idp.start();
 *   idp.server().issueToken({ subject })   // works while stopped too (keys are in memory)
 */
import { join } from "node:path";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/index.ts";
import type { LogCapture } from "./log-capture.ts";
import { stablePort } from "./stable-port.ts";

export interface RestartableIdp {
  readonly issuer: string;
  readonly jwksUri: string;
  readonly tokenEndpoint: string;
  readonly port: number;
  /** The current server object (a new one after each start()). */
  server(): IdpServer;
  running(): boolean;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export interface RestartableIdpOptions {
  readonly dir: string;
  readonly name: string;
  readonly audience: string;
  readonly logs: LogCapture;
  readonly tenantClaim?: string;
  /** Registers accounts; runs after every start. */
  readonly setup?: (server: IdpServer) => Promise<void>;
}

/** Cheap scrypt: tests should not spend seconds hashing passwords. */
const scryptCost = { log2N: 10, r: 8, p: 1 } as const;

export async function startRestartableIdp(options: RestartableIdpOptions): Promise<RestartableIdp> {
  const keysDir = join(options.dir, `${options.name}-keys`);
  const create = (issuer?: string) =>
    createIdpServer({
      keysDir,
      audience: options.audience,
      scryptCost,
      // Bad-input tests send many wrong passwords; a lockout would make their answers vary.
      failureLimit: false,
      logger: options.logs.logger(options.name),
      ...(options.tenantClaim === undefined ? {} : { tenantClaim: options.tenantClaim }),
      ...(issuer === undefined ? {} : { issuer }),
    });
  let server = await create();
  const url = await server.listen({ host: "127.0.0.1", port: await stablePort() });
  await options.setup?.(server);
  const issuer = server.issuer;
  const port = Number(new URL(url).port);
  let running = true;
  return {
    issuer,
    jwksUri: server.jwksUri,
    tokenEndpoint: server.tokenEndpoint,
    port,
    server: () => server,
    running: () => running,
    async stop() {
      if (!running) return;
      running = false;
      await server.close();
    },
    async start() {
      if (running) return;
      server = await create(issuer);
      await server.listen({ host: "127.0.0.1", port });
      await options.setup?.(server);
      running = true;
    },
  };
}
