import { randomUUID } from "node:crypto";
import {
  type Deadline,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type sendUnaryData,
} from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { parseListenAddress } from "../../../config/listen-address.ts";
import { positiveIntegerOption } from "../../../core/positive-integer.ts";
import { AuthorityError } from "../../../errors.ts";
import { errorSummary } from "../errors.ts";
import { guardRequest } from "../request-guard.ts";
import { type ParsedCheckRequest, parseCheckRequest } from "./check-input.ts";
import { allowResponse, denyResponse, validateDecision } from "./check-response.ts";
import { encodeCheckResponse } from "./check-response-wire.ts";
import { CheckServerError } from "./errors.ts";
import { createHealthService, type SettableServingStatus } from "./health.ts";
import { type GrpcLimits, grpcServerOptions, resolveLimits } from "./limits.ts";
import { createGrpcListener } from "./listener.ts";
import { AUTHORIZATION_SERVICE, type CheckResponse, loadProtos } from "./proto.ts";
import { createReceiveGuard, type ReceiveRejection } from "./receive-guard.ts";
import type { CheckFunction, CheckOutcome, DecisionEvent, DenyDecision, DenyHttpStatus } from "./types.ts";
import { createWarningLimiter, DEFAULT_WARNING_INTERVAL_MS } from "./warning-limiter.ts";

/**
 * The Envoy ext_authz v3 gRPC server, on @grpc/grpc-js with the messages of proto/ loaded by
 * @grpc/proto-loader. It fails closed: every Check call that reaches the handler is answered
 * with a CheckResponse, and anything but a well-formed allow from the decision function — a
 * throw, a rejection, a timeout, a malformed request or decision — is a deny. It never
 * answers a Check it has read with a gRPC error, which Envoy would resolve by
 * `failure_mode_allow`: undecodable bytes reach the handler as a marker (and are denied 400),
 * and responses are encoded by the handler itself, so an encoding failure is a deny too.
 *
 * What a peer can hold is bounded by limits.ts (message sizes, streams, connections, session
 * memory, keepalive, idle and age) and receive-guard.ts (requests that never finish).
 */

export interface CheckServerLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

/**
 * Requests refused before a decision: `malformed` (undecodable bytes), `incomplete` (no HTTP
 * method or path: an empty or network-filter CheckRequest), `overloaded` (too many calls
 * receiving at once), `receive_timeout` (a request that did not finish in time).
 */
export type RejectionReason = "malformed" | "incomplete" | ReceiveRejection;

/** TLS for the gRPC port: a PEM key and certificate chain; with `clientCa`, client certificates are required. */
export interface CheckServerTls {
  readonly key: string | Buffer;
  readonly cert: string | Buffer;
  readonly clientCa?: string | Buffer;
}

export interface CheckServerOptions {
  /** The decision function; the engine lives elsewhere. */
  readonly check: CheckFunction;
  /** Time allowed to `check` per call, in ms (`--decision-timeout-ms`). Shortened to the caller's own gRPC deadline. */
  readonly deadlineMs: number;
  readonly logger: CheckServerLogger;
  /** Called once per finished Check call (metrics). Errors thrown by it are logged and ignored. */
  readonly onDecision?: (event: DecisionEvent) => void;
  /** Called once per request refused before a decision (metrics); its warning is rate-limited. */
  readonly onRejected?: (reason: RejectionReason) => void;
  /** At most one warning line of each kind per this many ms (default 10 s). */
  readonly warningIntervalMs?: number;
  /** Health status before anyone sets it (default SERVING). */
  readonly initialServingStatus?: SettableServingStatus;
  /** Default: plaintext (Envoy and the sidecar share the pod's loopback). */
  readonly tls?: CheckServerTls;
  /** Overrides of DEFAULT_GRPC_LIMITS. */
  readonly limits?: Partial<GrpcLimits>;
}

export interface CloseOptions {
  /** How long in-flight calls may finish before connections are cut (default 5000 ms). */
  readonly graceMs?: number;
}

export interface CheckServer {
  /** Binds `host:port` (port 0 picks a free one). */
  listen(address: string): Promise<{ port: number }>;
  /** Health NOT_SERVING, ends Watch streams, drains in-flight calls, then force-closes after graceMs. */
  close(options?: CloseOptions): Promise<void>;
  /** Sets the grpc.health.v1 status of one service, or of all (`""` and the Authorization service). */
  setServingStatus(status: SettableServingStatus, service?: string): void;
  /** Check calls currently waiting for a decision. */
  readonly inFlight: number;
  /** Open TCP connections. */
  readonly connections: number;
  /** Calls whose request has not fully arrived yet. */
  readonly receiving: number;
}

export const DEFAULT_GRACE_MS = 5_000;
/**
 * Answer this far ahead of the caller's own gRPC deadline (10% of what is left, 5–50 ms), so
 * our deny arrives instead of Envoy's timeout, which Envoy would resolve by failure_mode_allow.
 */
export function callerDeadlineMarginMs(remaining: number): number {
  return Math.min(50, Math.max(5, Math.floor(remaining / 10)));
}
const MAX_DEADLINE_MS = 60_000;

/** Stands for a request whose bytes did not decode: the handler denies it instead of grpc-js failing the call. */
const malformedRequest: object = Object.freeze({});

interface ValidOptions {
  readonly check: CheckFunction;
  readonly deadlineMs: number;
  readonly logger: CheckServerLogger;
  readonly onDecision: ((event: DecisionEvent) => void) | undefined;
  readonly onRejected: ((reason: RejectionReason) => void) | undefined;
  readonly warningIntervalMs: number;
  readonly initialServingStatus: SettableServingStatus;
  readonly credentials: ServerCredentials;
  readonly limits: GrpcLimits;
}

function credentialsFor(
  tls: CheckServerTls | undefined,
  fail: (message: string) => never,
): ServerCredentials {
  if (tls === undefined) return ServerCredentials.createInsecure();
  if (typeof tls !== "object" || tls === null) fail("tls must be { key, cert, clientCa? }");
  const pem = (value: unknown): value is string | Buffer =>
    typeof value === "string" || Buffer.isBuffer(value);
  if (!pem(tls.key) || !pem(tls.cert) || (tls.clientCa !== undefined && !pem(tls.clientCa))) {
    fail("tls key, cert and clientCa must be PEM strings or buffers");
  }
  const keyCert = [{ private_key: Buffer.from(tls.key), cert_chain: Buffer.from(tls.cert) }];
  return tls.clientCa === undefined
    ? ServerCredentials.createSsl(null, keyCert, false)
    : ServerCredentials.createSsl(Buffer.from(tls.clientCa), keyCert, true);
}

function validateOptions(options: CheckServerOptions): ValidOptions {
  const fail = (message: string): never => {
    throw new CheckServerError("invalid_options", message);
  };
  if (typeof options !== "object" || options === null) fail("options must be an object");
  if (typeof options.check !== "function") fail("check must be a function");
  const { deadlineMs, logger } = options;
  positiveIntegerOption(deadlineMs, undefined, "deadlineMs", fail, MAX_DEADLINE_MS);
  for (const hook of ["onDecision", "onRejected"] as const) {
    if (options[hook] !== undefined && typeof options[hook] !== "function")
      fail(`${hook} must be a function`);
  }
  const warningIntervalMs = options.warningIntervalMs ?? DEFAULT_WARNING_INTERVAL_MS;
  if (!Number.isInteger(warningIntervalMs) || warningIntervalMs < 0) {
    fail("warningIntervalMs must be an integer >= 0");
  }
  if (typeof logger?.warn !== "function" || typeof logger?.error !== "function") {
    fail("logger must have warn and error methods");
  }
  const initialServingStatus = options.initialServingStatus ?? "SERVING";
  if (initialServingStatus !== "SERVING" && initialServingStatus !== "NOT_SERVING") {
    fail("initialServingStatus must be SERVING or NOT_SERVING");
  }
  return {
    check: options.check,
    deadlineMs,
    logger,
    onDecision: options.onDecision,
    onRejected: options.onRejected,
    warningIntervalMs,
    initialServingStatus,
    credentials: credentialsFor(options.tls, fail),
    limits: resolveLimits(options.limits),
  };
}

function remainingMs(deadline: Deadline): number {
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  return at - Date.now();
}

/** What the server itself denies with when no valid decision exists. */
const failClosed = {
  invalid_request: { httpStatus: 400, reason: "invalid_request" },
  invalid_decision: { httpStatus: 500, reason: "internal" },
  error: { httpStatus: 500, reason: "internal" },
  timeout: { httpStatus: 503, reason: "upstream_unavailable" },
} as const satisfies Record<string, { httpStatus: DenyHttpStatus; reason: string }>;

/** A thrown AuthorityError keeps its code and status; anything else is `internal` as the error table says (500). */
function denyForError(error: unknown): { httpStatus: DenyHttpStatus; reason: string } {
  if (error instanceof AuthorityError && error.code !== "internal") {
    return { httpStatus: error.status as DenyHttpStatus, reason: error.code };
  }
  return failClosed.error;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === "function";
}

export function createCheckServer(options: CheckServerOptions): CheckServer {
  const config = validateOptions(options);
  const { logger, limits } = config;
  const warnings = createWarningLimiter(logger, config.warningIntervalMs);
  const protos = loadProtos();
  const health = createHealthService(["", AUTHORIZATION_SERVICE], config.initialServingStatus);
  let state: "idle" | "binding" | "listening" | "closed" = "idle";
  let closing: Promise<void> | undefined;
  /** Set when a shutdown's grace period ran out: nothing is answered any more. */
  let cut = false;

  const rejected = (reason: RejectionReason): void => {
    if (config.onRejected === undefined) return;
    try {
      config.onRejected(reason);
    } catch (error) {
      logger.error({ err: errorSummary(error) }, "onRejected hook threw");
    }
  };

  const checkMethod = protos.authorization.Check as MethodDefinition<object, object> | undefined;
  if (checkMethod === undefined) throw new CheckServerError("invalid_options", "Authorization.Check missing");
  const decode = checkMethod.requestDeserialize;
  // Responses are encoded by hand (check-response-wire.ts): the same bytes as the loader's
  // serializer, without its per-Check copies.
  const encode = encodeCheckResponse;
  const authorization = {
    Check: {
      ...checkMethod,
      requestDeserialize: (bytes: Buffer): object => {
        try {
          return decode(bytes);
        } catch {
          return malformedRequest;
        }
      },
      // The handler hands over bytes it encoded itself (see `respond`).
      responseSerialize: (bytes: Buffer): Buffer => bytes,
    },
  };

  const emit = (event: DecisionEvent): void => {
    if (config.onDecision === undefined) return;
    try {
      config.onDecision(event);
    } catch (error) {
      logger.error({ err: errorSummary(error) }, "onDecision hook threw");
    }
  };

  /** Calls waiting for an asynchronous decision: a list through the calls themselves (no set to grow and shrink per call). */
  const pending = { first: undefined as CheckCall | undefined, size: 0 };

  /**
   * One Check call. Its state and the ways it ends are fields and methods of one object, not
   * closures made per call: every Check allocates it, and a call that waits across two
   * scavenges promotes what it holds (docs/decisions/2961).
   */
  class CheckCall {
    readonly call: ServerUnaryCall<unknown, Buffer>;
    readonly callback: sendUnaryData<Buffer>;
    readonly started = performance.now();
    requestId = "";
    settled = false;
    /** The answer went to grpc-js. */
    answered = false;
    /** Set once the decision function runs: an exception nothing caught then is its deny. */
    deciding = false;
    timer: NodeJS.Timeout | undefined = undefined;
    controller: AbortController | undefined = undefined;
    budget = 0;
    previous: CheckCall | undefined = undefined;
    next: CheckCall | undefined = undefined;

    constructor(call: ServerUnaryCall<unknown, Buffer>, callback: sendUnaryData<Buffer>) {
      this.call = call;
      this.callback = callback;
    }

    /** Settles the call once: false when it already was. */
    settle(): boolean {
      if (this.settled) return false;
      this.settled = true;
      if (this.timer !== undefined) clearTimeout(this.timer);
      if (this.controller !== undefined) unlink(this);
      return true;
    }

    event(outcome: CheckOutcome, response: CheckResponse | undefined): DecisionEvent {
      const denied = response !== undefined && "denied_response" in response ? response : undefined;
      return {
        outcome,
        allowed: response !== undefined && "ok_response" in response,
        httpStatus:
          response === undefined
            ? 0
            : denied === undefined
              ? 200
              : Number(denied.denied_response.status.code),
        rpcCode: response?.status.code ?? 0,
        reason: denied?.status.message ?? null,
        requestId: this.requestId,
        durationMs: performance.now() - this.started,
      };
    }

    respond(outcome: CheckOutcome, response: CheckResponse): void {
      if (cut || !this.settle()) return;
      let sent = response;
      let sentOutcome = outcome;
      let bytes: Buffer;
      try {
        bytes = encode(response);
      } catch (error) {
        // Never a gRPC error (Envoy's failure_mode_allow decides those): an internal deny.
        logger.error(
          { requestId: this.requestId, err: errorSummary(error) },
          "CheckResponse could not be encoded; denied",
        );
        sentOutcome = "invalid_decision";
        sent = denyResponse({ allow: false, ...failClosed.invalid_decision, requestId: this.requestId });
        bytes = encode(sent);
      }
      this.answered = true;
      this.callback(null, bytes);
      emit(this.event(sentOutcome, sent));
    }

    deny(
      outcome: Exclude<CheckOutcome, "allow" | "cancelled">,
      decision: Omit<DenyDecision, "allow" | "requestId"> & { requestId?: string },
    ): void {
      this.respond(
        outcome,
        denyResponse({
          allow: false,
          httpStatus: decision.httpStatus,
          reason: decision.reason,
          requestId: decision.requestId || this.requestId,
          ...(decision.headers === undefined ? {} : { headers: decision.headers }),
          ...(decision.explanation === undefined ? {} : { explanation: decision.explanation }),
        }),
      );
    }

    decided(value: unknown): void {
      if (this.settled) return;
      const decision = validateDecision(value);
      if (decision === null) {
        logger.error(
          { requestId: this.requestId },
          "decision function returned a malformed decision; denied",
        );
        this.deny("invalid_decision", failClosed.invalid_decision);
      } else if (decision.allow) {
        this.respond("allow", allowResponse(decision));
      } else {
        this.deny("deny", decision);
      }
    }

    failed(error: unknown): void {
      if (this.settled) return;
      warnings.warn(
        "decision_failed",
        { requestId: this.requestId, err: errorSummary(error) },
        "decision function failed; denied",
      );
      this.deny("error", denyForError(error));
    }

    /** What an exception nothing caught does to this call (request-guard.ts). */
    failUnexpectedly(): void {
      if (this.deciding) {
        this.failed(new Error("unexpected exception"));
        return;
      }
      // Before the decision (the request was being read): an internal deny of its own.
      if (cut || this.answered) return;
      this.settle();
      this.answered = true;
      this.callback(
        null,
        encode(denyResponse({ allow: false, ...failClosed.error, requestId: randomUUID() })),
      );
    }

    cancelled(): void {
      if (!this.settle()) return;
      this.controller?.abort(new Error("ext_authz call cancelled"));
      emit(this.event("cancelled", undefined));
    }

    timedOut(): void {
      if (this.settled) return;
      // Deny first: whatever the aborted function does next finds the call settled.
      this.deny("timeout", failClosed.timeout);
      this.controller?.abort(new Error("ext_authz deadline exceeded"));
      warnings.warn(
        "decision_timeout",
        { requestId: this.requestId, deadlineMs: this.budget },
        "ext_authz decision timed out; denied",
      );
    }

    run(): void {
      const request: unknown = this.call.request;
      const parsed: ParsedCheckRequest | undefined =
        request === malformedRequest ? undefined : parseCheckRequest(request);
      this.requestId = parsed?.input.requestId ?? randomUUID();

      if (parsed === undefined || !parsed.complete) {
        const reason = parsed === undefined ? "malformed" : "incomplete";
        rejected(reason);
        warnings.warn(
          reason,
          { requestId: this.requestId, reason },
          "ext_authz request without HTTP method/path denied",
        );
        this.deny("invalid_request", failClosed.invalid_request);
        return;
      }

      const remaining = remainingMs(this.call.getDeadline());
      this.budget = Math.min(config.deadlineMs, remaining - callerDeadlineMarginMs(remaining));
      if (this.budget <= 0) {
        this.deny("timeout", failClosed.timeout);
        return;
      }

      this.deciding = true;
      const controller = new AbortController();
      let result: unknown;
      try {
        result = config.check(parsed.input, controller.signal, this.call.metadata);
      } catch (error) {
        this.failed(error);
        return;
      }
      if (!isThenable(result)) {
        // Decided synchronously (everything was cached): nothing to wait for, time or cancel.
        this.decided(result);
        return;
      }
      this.controller = controller;
      link(this);
      this.call.on("cancelled", () => this.cancelled());
      this.timer = setTimeout(timeOut, this.budget, this);
      Promise.resolve(result).then(
        (value) => this.decided(value),
        (error: unknown) => this.failed(error),
      );
    }
  }

  const timeOut = (checkCall: CheckCall): void => checkCall.timedOut();

  const link = (checkCall: CheckCall): void => {
    checkCall.next = pending.first;
    if (pending.first !== undefined) pending.first.previous = checkCall;
    pending.first = checkCall;
    pending.size++;
  };

  const unlink = (checkCall: CheckCall): void => {
    const { previous, next } = checkCall;
    if (previous === undefined) pending.first = next;
    else previous.next = next;
    if (next !== undefined) next.previous = previous;
    checkCall.previous = undefined;
    checkCall.next = undefined;
    pending.size--;
  };

  /** Every Check, inside the request guard (request-guard.ts): an exception nothing caught is a deny. */
  const handleCheck = (call: ServerUnaryCall<unknown, Buffer>, callback: sendUnaryData<Buffer>): void => {
    const checkCall = new CheckCall(call, callback);
    guardRequest(
      () => checkCall.failUnexpectedly(),
      () => checkCall.run(),
    );
  };

  const receiveGuard = createReceiveGuard({
    maxReceiving: limits.maxReceivingCalls,
    timeoutMs: limits.receiveTimeoutMs,
    cutConnection: (call) => {
      const peer = call.getConnectionInfo();
      listener.cut(peer.remoteAddress, peer.remotePort);
    },
    onRejected: (reason) => {
      rejected(reason);
      warnings.warn(reason, { reason }, "gRPC call refused before its request was read");
    },
  });
  const server = new Server({ ...grpcServerOptions(limits), interceptors: [receiveGuard.interceptor] });
  server.addService(authorization, { Check: handleCheck });
  server.addService(protos.health, health.implementation);
  const listener = createGrpcListener(server.createConnectionInjector(config.credentials), {
    maxConnections: limits.maxConnections,
    silentMs: limits.maxConnectionIdleMs,
  });

  return {
    get inFlight() {
      return pending.size;
    },
    get connections() {
      return listener.connections;
    },
    get receiving() {
      return receiveGuard.receiving;
    },

    setServingStatus(status, service) {
      health.setStatus(status, service);
    },

    listen(address) {
      if (typeof address !== "string" || address === "") {
        return Promise.reject(new CheckServerError("invalid_options", "listen address must be host:port"));
      }
      if (state === "closed") return Promise.reject(new CheckServerError("closed", "server is closed"));
      if (state !== "idle") {
        return Promise.reject(new CheckServerError("already_listening", "server is already listening"));
      }
      let host: string;
      let port: number;
      try {
        ({ host, port } = parseListenAddress(address));
      } catch {
        return Promise.reject(new CheckServerError("invalid_options", "listen address must be host:port"));
      }
      state = "binding";
      return listener.listen(host, port).then(
        (bound) => {
          state = "listening";
          receiveGuard.start();
          return { port: bound };
        },
        (error: unknown) => {
          state = "idle";
          throw new CheckServerError("bind_failed", `cannot bind ${address}`, { cause: error });
        },
      );
    },

    close({ graceMs = DEFAULT_GRACE_MS } = {}) {
      if (closing !== undefined) return closing;
      if (!Number.isFinite(graceMs) || graceMs < 0) {
        return Promise.reject(new CheckServerError("invalid_options", "graceMs must be >= 0"));
      }
      state = "closed";
      health.setStatus("NOT_SERVING");
      health.endWatches();
      closing = new Promise<void>((resolve) => {
        // At the end of the grace period nothing is answered any more — the connections are
        // being cut, and a decision that still arrives (an allow included) must not go out on
        // one that survived — and every decision still running is told to stop.
        const force = setTimeout(() => {
          cut = true;
          for (let checkCall = pending.first; checkCall !== undefined; checkCall = checkCall.next)
            checkCall.controller?.abort(new Error("ext_authz server shutting down"));
          server.forceShutdown();
          listener.cutAll();
        }, graceMs);
        // GOAWAY on every connection; each closes once its open calls are answered. (grpc-js's
        // own callback does not wait for that on this Node version: the listener's does.)
        server.tryShutdown(() => undefined);
        void listener.stopAccepting().then(() => {
          clearTimeout(force);
          receiveGuard.stop();
          resolve();
        });
      });
      return closing;
    },
  };
}
