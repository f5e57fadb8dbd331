import {
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
} from "@grpc/grpc-js";
import { GrpcCode } from "../../../errors.ts";

/**
 * Bounds calls whose request has not fully arrived (headers seen, end of stream not yet):
 * grpc-js holds their bytes until then, without a time limit of its own when the caller sent
 * no `grpc-timeout`. At most `maxReceiving` such calls exist over all connections: a new one
 * past that makes room by ending the call that has been receiving the longest
 * (RESOURCE_EXHAUSTED) — Envoy sends a Check's headers, message and end of stream together,
 * so its calls finish receiving at once and the oldest one is a stalled peer's, while refusing
 * the new call instead would let a staller shut Envoy out. A call still receiving after
 * `timeoutMs` is answered DEADLINE_EXCEEDED and its connection is cut.
 */

export type ReceiveRejection = "overloaded" | "receive_timeout";

export interface ReceiveGuardOptions {
  readonly maxReceiving: number;
  readonly timeoutMs: number;
  /** Cuts the connection the call came on (its socket, found by the peer's address and port). */
  readonly cutConnection: (call: ServerInterceptingCallInterface) => void;
  readonly onRejected: (reason: ReceiveRejection) => void;
}

export interface ReceiveGuard {
  readonly interceptor: ServerInterceptor;
  /** Calls currently receiving their request. */
  readonly receiving: number;
  /** Starts sweeping for stalled calls: an unref'd timer, running while a call is receiving. */
  start(): void;
  stop(): void;
}

export function createReceiveGuard(options: ReceiveGuardOptions): ReceiveGuard {
  const { maxReceiving, timeoutMs, cutConnection, onRejected } = options;
  /** Call → when its headers arrived; insertion order is arrival order, so the oldest come first. */
  const receiving = new Map<ServerInterceptingCallInterface, number>();
  /** Started: the sweep runs while calls are receiving (an idle sidecar has no timer here). */
  let started = false;
  let sweeper: NodeJS.Timeout | undefined;
  const stopSweeping = (): void => {
    clearInterval(sweeper);
    sweeper = undefined;
  };

  const sweepWhileReceiving = (): void => {
    if (!started || sweeper !== undefined || receiving.size === 0) return;
    sweeper = setInterval(sweep, Math.max(10, Math.floor(timeoutMs / 4)));
    sweeper.unref();
  };

  const sweep = (): void => {
    if (receiving.size === 0) {
      stopSweeping();
      return;
    }
    const cutoff = performance.now() - timeoutMs;
    for (const [call, arrived] of receiving) {
      if (arrived > cutoff) break;
      receiving.delete(call);
      onRejected("receive_timeout");
      call.sendStatus({ code: GrpcCode.DEADLINE_EXCEEDED, details: "request not received in time" });
      cutConnection(call);
    }
  };

  const interceptor: ServerInterceptor = (_method, call) =>
    new ServerInterceptingCall(call, {
      start(next) {
        if (receiving.size >= maxReceiving) {
          const oldest = receiving.keys().next().value as ServerInterceptingCallInterface;
          receiving.delete(oldest);
          onRejected("overloaded");
          oldest.sendStatus({ code: GrpcCode.RESOURCE_EXHAUSTED, details: "too many calls in progress" });
        }
        receiving.set(call, performance.now());
        sweepWhileReceiving();
        next({
          onReceiveHalfClose(proceed) {
            receiving.delete(call);
            proceed();
          },
          onCancel() {
            receiving.delete(call);
          },
        });
      },
    });

  return {
    interceptor,
    get receiving() {
      return receiving.size;
    },
    start() {
      started = true;
      sweepWhileReceiving();
    },
    stop() {
      started = false;
      stopSweeping();
    },
  };
}
