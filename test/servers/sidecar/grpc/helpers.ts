import { Client, credentials, type ServiceError } from "@grpc/grpc-js";
import { loadSync, type MethodDefinition } from "@grpc/proto-loader";
import { createLogger } from "../../../../src/observability/logger.ts";
import {
  type CheckServer,
  type CheckServerOptions,
  createCheckServer,
} from "../../../../src/servers/sidecar/grpc/check-server.ts";
import { protoDir } from "../../../../src/servers/sidecar/grpc/proto.ts";
import { testSidecarConfig } from "../../../helpers/sidecar-config.ts";

/**
 * A real grpc-js client built from proto/ by its own proto-loader load (not the server's
 * cached one), speaking to a real server on an ephemeral port.
 */

const definition = loadSync(["envoy/service/auth/v3/external_auth.proto", "grpc/health/v1/health.proto"], {
  keepCase: true,
  enums: String,
  longs: String,
  defaults: true,
  oneofs: true,
  includeDirs: [protoDir],
});

function method(service: string, name: string): MethodDefinition<object, object> {
  const entry = definition[service] as Record<string, MethodDefinition<object, object>> | undefined;
  const found = entry?.[name];
  if (found === undefined) throw new Error(`${service}/${name} missing`);
  return found;
}

export const checkMethod = method("envoy.service.auth.v3.Authorization", "Check");
export const healthCheckMethod = method("grpc.health.v1.Health", "Check");
export const healthWatchMethod = method("grpc.health.v1.Health", "Watch");

/** A decoded message: loose on purpose, tests assert on its shape. */
// biome-ignore lint/suspicious/noExplicitAny: decoded protobuf objects are asserted field by field
export type Decoded = Record<string, any>;

export const silentLogger = createLogger("test", "silent");

/** The sidecar's ext_authz deadline at its default (`--decision-timeout-ms`, from the settings schema). */
export const DECISION_TIMEOUT_MS = testSidecarConfig().decisionTimeoutMs;

/** The check server's options, the deadline and logger optional (the default deadline, a silent logger). */
export type TestCheckServerOptions = Omit<CheckServerOptions, "deadlineMs" | "logger"> &
  Partial<Pick<CheckServerOptions, "deadlineMs" | "logger">>;

export function testCheckServer(options: TestCheckServerOptions): CheckServer {
  return createCheckServer({ logger: silentLogger, deadlineMs: DECISION_TIMEOUT_MS, ...options });
}

export interface Harness {
  readonly server: CheckServer;
  readonly port: number;
  readonly client: Client;
  close(): Promise<void>;
}

export async function startHarness(options: TestCheckServerOptions): Promise<Harness> {
  const server = testCheckServer(options);
  const { port } = await server.listen("127.0.0.1:0");
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  return {
    server,
    port,
    client,
    async close() {
      client.close();
      await server.close({ graceMs: 1_000 });
    },
  };
}

export function unary(
  client: Client,
  definition: MethodDefinition<object, object>,
  request: object,
  deadlineMs = 5_000,
): Promise<Decoded> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      definition.path,
      definition.requestSerialize,
      definition.responseDeserialize,
      request,
      { deadline: Date.now() + deadlineMs },
      (error: ServiceError | null, response?: object) => {
        if (error !== null || response === undefined) reject(error ?? new Error("no response"));
        else resolve(response as Decoded);
      },
    );
  });
}

const identity = (bytes: Buffer): Buffer => bytes;

/** Sends raw bytes as the request and returns the raw response bytes. */
export function unaryRaw(
  client: Client,
  path: string,
  bytes: Uint8Array,
  deadlineMs = 5_000,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      path,
      identity,
      identity,
      Buffer.from(bytes),
      { deadline: Date.now() + deadlineMs },
      (error: ServiceError | null, response?: Buffer) => {
        if (error !== null || response === undefined) reject(error ?? new Error("no response"));
        else resolve(response);
      },
    );
  });
}

/** A CheckRequest as Envoy's HTTP filter sends it. */
export function envoyCheckRequest(overrides: {
  method?: string;
  path?: string;
  host?: string;
  headers?: Record<string, string>;
  contextExtensions?: Record<string, string>;
  id?: string;
  principal?: string;
}): object {
  const method = overrides.method ?? "GET";
  const path = overrides.path ?? "/v1/items?limit=5";
  const host = overrides.host ?? "api.example.test";
  return {
    attributes: {
      source: {
        address: { socket_address: { address: "10.0.0.7", port_value: 51234 } },
        principal: overrides.principal ?? "spiffe://cluster.local/ns/agents/sa/agent-1",
      },
      destination: { address: { socket_address: { address: "10.0.0.9", port_value: 8080 } } },
      request: {
        time: { seconds: "1767225600", nanos: 0 },
        http: {
          id: overrides.id ?? "req-123",
          method,
          path,
          host,
          scheme: "https",
          protocol: "HTTP/1.1",
          size: "-1",
          headers: {
            ":method": method,
            ":path": path,
            ":authority": host,
            "x-request-id": overrides.id ?? "req-123",
            ...overrides.headers,
          },
        },
      },
      context_extensions: overrides.contextExtensions ?? { capability_id: "cap-orders" },
    },
  };
}
