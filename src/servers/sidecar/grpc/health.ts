import { decodeHealthCheckRequest, encodeHealthCheckResponse } from "./codec.ts";
import { HEALTH_CHECK_PATH, HEALTH_WATCH_PATH } from "./names.ts";
import type { ServingStatus } from "./proto.ts";
import { GrpcStatus, type Method, type ServerStreamCall } from "./transport.ts";

/**
 * grpc.health.v1.Health over a settable table of service → status. Known services are fixed
 * at construction; Check on an unknown one is NOT_FOUND and Watch reports SERVICE_UNKNOWN,
 * as the health protocol prescribes.
 */

export type SettableServingStatus = "SERVING" | "NOT_SERVING";

export interface HealthService {
  /** Check and Watch, by path, for the gRPC server. */
  readonly methods: Readonly<Record<string, Method>>;
  /** Sets one service's status, or every known service's when `service` is omitted. */
  setStatus(status: SettableServingStatus, service?: string): void;
  getStatus(service?: string): ServingStatus;
  /** Ends every Watch stream so a graceful shutdown is not held open by them. */
  endWatches(): void;
}

/** The requested service name; undefined when the request does not decode. */
function serviceName(request: Buffer): string | undefined {
  try {
    return decodeHealthCheckRequest(request);
  } catch {
    return undefined;
  }
}

export function createHealthService(
  services: readonly string[],
  initial: SettableServingStatus,
): HealthService {
  const statuses = new Map<string, SettableServingStatus>(services.map((name) => [name, initial]));
  const watchers = new Map<ServerStreamCall, string>();

  const current = (service: string): ServingStatus => statuses.get(service) ?? "SERVICE_UNKNOWN";

  const methods: Record<string, Method> = {
    [HEALTH_CHECK_PATH]: {
      kind: "unary",
      handle(request, call) {
        const service = serviceName(request);
        if (service === undefined) {
          call.fail(GrpcStatus.INTERNAL, "malformed HealthCheckRequest");
          return;
        }
        const status = statuses.get(service);
        if (status === undefined) call.fail(GrpcStatus.NOT_FOUND, "unknown service");
        else call.respond(encodeHealthCheckResponse(status));
      },
    },
    [HEALTH_WATCH_PATH]: {
      kind: "server-stream",
      handle(request, call) {
        const service = serviceName(request);
        if (service === undefined) {
          call.fail(GrpcStatus.INTERNAL, "malformed HealthCheckRequest");
          return;
        }
        watchers.set(call, service);
        call.onCancel(() => watchers.delete(call));
        call.write(encodeHealthCheckResponse(current(service)));
      },
    },
  };

  return {
    methods,
    setStatus(status, service) {
      const targets = service === undefined ? [...statuses.keys()] : [service];
      for (const name of targets) {
        if (statuses.get(name) === status) continue;
        statuses.set(name, status);
        for (const [call, watched] of watchers) {
          if (watched === name) call.write(encodeHealthCheckResponse(status));
        }
      }
    },
    getStatus(service = "") {
      return current(service);
    },
    endWatches() {
      for (const call of watchers.keys()) call.end();
      watchers.clear();
    },
  };
}
