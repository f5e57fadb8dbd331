import type { ServerOptions } from "@grpc/grpc-js";
import { positiveIntegerOption } from "../../../core/positive-integer.ts";
import { CheckServerError } from "./errors.ts";

/**
 * What one gRPC peer may hold in the sidecar, and for how long. The peer is meant to be the
 * pod's Envoy, but anything in the pod can connect to the port: these bounds keep the
 * process's memory bounded whatever it sends.
 *
 * Worst case of request bytes held at once: `maxReceivingCalls` × `maxReceiveMessageBytes`
 * (64 MiB with the defaults), whatever the number of connections; each such call is cut after
 * `receiveTimeoutMs`. A decoded request waits for its decision at most the Check deadline.
 */
export interface GrpcLimits {
  /** Largest request message, after decompression (grpc.max_receive_message_length). */
  readonly maxReceiveMessageBytes: number;
  /** Largest response message (grpc.max_send_message_length). */
  readonly maxSendMessageBytes: number;
  /** HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per connection (grpc.max_concurrent_streams). */
  readonly maxConcurrentStreams: number;
  /** nghttp2 session memory per connection, MB (grpc-node.max_session_memory). */
  readonly maxSessionMemoryMb: number;
  /** Open TCP connections; more are closed on accept. */
  readonly maxConnections: number;
  /** Calls, over all connections, whose request has not fully arrived; more are RESOURCE_EXHAUSTED. */
  readonly maxReceivingCalls: number;
  /** Time from a call's headers to the end of its request; a call still receiving then is cut. */
  readonly receiveTimeoutMs: number;
  /** Ping a connection after this long without activity (grpc.keepalive_time_ms). */
  readonly keepaliveTimeMs: number;
  /** Close the connection when a ping is not answered in this time (grpc.keepalive_timeout_ms). */
  readonly keepaliveTimeoutMs: number;
  /** Close a connection without calls after this long (grpc.max_connection_idle_ms); destroy a socket silent this long. */
  readonly maxConnectionIdleMs: number;
  /** GOAWAY a connection after this long, ±10% (grpc.max_connection_age_ms). */
  readonly maxConnectionAgeMs: number;
  /** After that GOAWAY, cut what is still open after this long (grpc.max_connection_age_grace_ms). */
  readonly maxConnectionAgeGraceMs: number;
}

export const DEFAULT_GRPC_LIMITS: GrpcLimits = Object.freeze({
  // Envoy's CheckRequest: headers (60 KiB by default, 96 KiB at most) and, with
  // with_request_body, the body up to max_request_bytes.
  maxReceiveMessageBytes: 256 * 1024,
  maxSendMessageBytes: 256 * 1024,
  maxConcurrentStreams: 100,
  maxSessionMemoryMb: 16,
  // Envoy opens one connection per worker thread (more only past maxConcurrentStreams).
  maxConnections: 64,
  maxReceivingCalls: 256,
  receiveTimeoutMs: 5_000,
  // Must stay well below maxConnectionIdleMs: the pings keep a live socket from being silent.
  keepaliveTimeMs: 60_000,
  keepaliveTimeoutMs: 20_000,
  maxConnectionIdleMs: 5 * 60_000,
  maxConnectionAgeMs: 30 * 60_000,
  maxConnectionAgeGraceMs: 30_000,
});

const MAX_INT32 = 2 ** 31 - 1;

const invalidOption = (message: string): never => {
  throw new CheckServerError("invalid_options", message);
};

/** The defaults with `overrides` applied, each a positive integer (CheckServerError otherwise). */
export function resolveLimits(overrides: Partial<GrpcLimits> | undefined): GrpcLimits {
  if (overrides !== undefined && (typeof overrides !== "object" || overrides === null)) {
    throw new CheckServerError("invalid_options", "limits must be an object");
  }
  const limits: Record<string, number> = { ...DEFAULT_GRPC_LIMITS };
  for (const [name, value] of Object.entries(overrides ?? {})) {
    if (!Object.hasOwn(DEFAULT_GRPC_LIMITS, name)) {
      throw new CheckServerError("invalid_options", `unknown limit ${name}`);
    }
    if (value === undefined) continue;
    limits[name] = positiveIntegerOption(value, undefined, `limit ${name}`, invalidOption, MAX_INT32);
  }
  return limits as unknown as GrpcLimits;
}

/** The grpc-js server options for `limits` (connection count and receive bounds are enforced beside them). */
export function grpcServerOptions(limits: GrpcLimits): ServerOptions {
  return {
    "grpc.max_receive_message_length": limits.maxReceiveMessageBytes,
    "grpc.max_send_message_length": limits.maxSendMessageBytes,
    "grpc.max_concurrent_streams": limits.maxConcurrentStreams,
    "grpc-node.max_session_memory": limits.maxSessionMemoryMb,
    "grpc.keepalive_time_ms": limits.keepaliveTimeMs,
    "grpc.keepalive_timeout_ms": limits.keepaliveTimeoutMs,
    "grpc.max_connection_idle_ms": limits.maxConnectionIdleMs,
    "grpc.max_connection_age_ms": limits.maxConnectionAgeMs,
    "grpc.max_connection_age_grace_ms": limits.maxConnectionAgeGraceMs,
    // Channelz keeps per-call and per-socket bookkeeping nobody here reads.
    "grpc.enable_channelz": 0,
  };
}
