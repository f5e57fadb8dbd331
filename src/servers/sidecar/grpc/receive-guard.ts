import {
  type Metadata,
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
  type StatusObject,
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

type PartialStatusObject = Pick<StatusObject, "code" | "details"> & { metadata?: Metadata | null };
type Listener = Parameters<ServerInterceptingCallInterface["start"]>[0];

/**
 * A call between grpc-js's own and the handler, there only to see when its request has arrived.
 * It forwards everything as it comes, and is its own entry in the guard's list of receiving
 * calls: its start and send methods skip the responder chain and listener layer (and their
 * closures) that grpc-js's generic ServerInterceptingCall adds to every call, and no map entry
 * is made per call (docs/decisions/2961).
 */
class GuardedCall extends ServerInterceptingCall implements Listener {
  readonly next: ServerInterceptingCallInterface;
  readonly list: ReceivingList;
  listener: Listener | undefined = undefined;
  /** When its headers arrived (performance.now()), while it is receiving. */
  arrived = 0;
  receiving = false;
  older: GuardedCall | undefined = undefined;
  newer: GuardedCall | undefined = undefined;

  constructor(next: ServerInterceptingCallInterface, list: ReceivingList) {
    super(next);
    this.next = next;
    this.list = list;
  }

  override start(listener: Listener): void {
    this.listener = listener;
    this.list.admit(this);
    this.next.start(this);
  }
  onReceiveMetadata(metadata: Metadata): void {
    this.listener?.onReceiveMetadata(metadata);
  }
  onReceiveMessage(message: unknown): void {
    this.listener?.onReceiveMessage(message);
  }
  onReceiveHalfClose(): void {
    this.list.remove(this);
    this.listener?.onReceiveHalfClose();
  }
  onCancel(): void {
    this.list.remove(this);
    this.listener?.onCancel();
  }
  override sendMetadata(metadata: Metadata): void {
    this.next.sendMetadata(metadata);
  }
  override sendMessage(message: unknown, callback: () => void): void {
    this.next.sendMessage(message, callback);
  }
  override sendStatus(status: PartialStatusObject): void {
    this.next.sendStatus(status);
  }
  // startRead, getPeer, getDeadline, … are ServerInterceptingCall's own: they forward as they are.
}

/** The calls receiving their request, oldest first, linked through the calls themselves. */
interface ReceivingList {
  admit(call: GuardedCall): void;
  remove(call: GuardedCall): void;
}

export function createReceiveGuard(options: ReceiveGuardOptions): ReceiveGuard {
  const { maxReceiving, timeoutMs, cutConnection, onRejected } = options;
  let oldest: GuardedCall | undefined;
  let newest: GuardedCall | undefined;
  let size = 0;
  /** Started: the sweep runs while calls are receiving (an idle sidecar has no timer here). */
  let started = false;
  let sweeper: NodeJS.Timeout | undefined;
  const stopSweeping = (): void => {
    clearInterval(sweeper);
    sweeper = undefined;
  };

  const sweepWhileReceiving = (): void => {
    if (!started || sweeper !== undefined || size === 0) return;
    sweeper = setInterval(sweep, Math.max(10, Math.floor(timeoutMs / 4)));
    sweeper.unref();
  };

  const list: ReceivingList = {
    admit(call) {
      if (size >= maxReceiving && oldest !== undefined) {
        const evicted = oldest;
        list.remove(evicted);
        onRejected("overloaded");
        evicted.sendStatus({ code: GrpcCode.RESOURCE_EXHAUSTED, details: "too many calls in progress" });
      }
      call.arrived = performance.now();
      call.receiving = true;
      call.older = newest;
      if (newest === undefined) oldest = call;
      else newest.newer = call;
      newest = call;
      size++;
      sweepWhileReceiving();
    },
    remove(call) {
      if (!call.receiving) return;
      call.receiving = false;
      const { older, newer } = call;
      if (older === undefined) oldest = newer;
      else older.newer = newer;
      if (newer === undefined) newest = older;
      else newer.older = older;
      call.older = undefined;
      call.newer = undefined;
      size--;
    },
  };

  const sweep = (): void => {
    if (size === 0) {
      stopSweeping();
      return;
    }
    const cutoff = performance.now() - timeoutMs;
    while (oldest !== undefined && oldest.arrived <= cutoff) {
      const call = oldest;
      list.remove(call);
      onRejected("receive_timeout");
      call.sendStatus({ code: GrpcCode.DEADLINE_EXCEEDED, details: "request not received in time" });
      cutConnection(call);
    }
  };

  const interceptor: ServerInterceptor = (_method, call) => new GuardedCall(call, list);

  return {
    interceptor,
    get receiving() {
      return size;
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
