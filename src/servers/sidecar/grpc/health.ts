import type {
  ServerUnaryCall,
  ServerWritableStream,
  sendUnaryData,
  UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { GrpcCode } from "../../../errors.ts";
import type { HealthCheckRequest, HealthCheckResponse, ServingStatus } from "./proto.ts";

/**
 * grpc.health.v1.Health over a settable table of service → status. Known services are fixed
 * at construction; Check on an unknown one is NOT_FOUND and Watch reports SERVICE_UNKNOWN,
 * as the health protocol prescribes.
 */

export type SettableServingStatus = "SERVING" | "NOT_SERVING";

export interface HealthService {
  readonly implementation: UntypedServiceImplementation;
  /** Sets one service's status, or every known service's when `service` is omitted. */
  setStatus(status: SettableServingStatus, service?: string): void;
  getStatus(service?: string): ServingStatus;
  /** Ends every Watch stream so a graceful shutdown is not held open by them. */
  endWatches(): void;
}

function serviceName(request: unknown): string {
  if (typeof request !== "object" || request === null) return "";
  const service = (request as HealthCheckRequest).service;
  return typeof service === "string" ? service : "";
}

export function createHealthService(
  services: readonly string[],
  initial: SettableServingStatus,
): HealthService {
  const statuses = new Map<string, SettableServingStatus>(services.map((name) => [name, initial]));
  const watchers = new Map<ServerWritableStream<unknown, HealthCheckResponse>, string>();

  const current = (service: string): ServingStatus => statuses.get(service) ?? "SERVICE_UNKNOWN";

  const check = (
    call: ServerUnaryCall<unknown, HealthCheckResponse>,
    callback: sendUnaryData<HealthCheckResponse>,
  ): void => {
    const status = statuses.get(serviceName(call.request));
    if (status === undefined) callback({ code: GrpcCode.NOT_FOUND, details: "unknown service" });
    else callback(null, { status });
  };

  const watch = (call: ServerWritableStream<unknown, HealthCheckResponse>): void => {
    const service = serviceName(call.request);
    watchers.set(call, service);
    const forget = (): void => {
      watchers.delete(call);
    };
    call.on("cancelled", forget);
    call.on("error", forget);
    call.on("finish", forget);
    call.write({ status: current(service) });
  };

  return {
    implementation: { Check: check, Watch: watch },
    setStatus(status, service) {
      const targets = service === undefined ? [...statuses.keys()] : [service];
      for (const name of targets) {
        if (statuses.get(name) === status) continue;
        statuses.set(name, status);
        for (const [call, watched] of watchers) {
          if (watched === name) call.write({ status });
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
