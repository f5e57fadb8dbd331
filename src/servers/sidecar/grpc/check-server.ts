import { randomUUID } from "node:crypto";
import type { TlsOptions } from "node:tls";
import { AuthorityError } from "../../../errors.ts";
import { createLogger } from "../../../observability/logger.ts";
import { errorSummary } from "../errors.ts";
import type { ParsedCheckRequest } from "./check-input.ts";
import { allowResponse, denyResponse, validateDecision } from "./check-response.ts";
import { decodeCheckRequest, encodeAllowDecision, encodeCheckResponse } from "./codec.ts";
import { CheckServerError } from "./errors.ts";
import { createHealthService, type SettableServingStatus } from "./health.ts";
import { AUTHORIZATION_SERVICE, CHECK_PATH } from "./names.ts";
import type { CheckResponse } from "./proto.ts";
import { createGrpcServer, type GrpcServer, type UnaryCall } from "./transport.ts";
import type { CheckFunction, CheckOutcome, DecisionEvent, DenyDecision, DenyHttpStatus } from "./types.ts";

/**
 * The Envoy ext_authz v3 gRPC server. It fails closed: every Check call that reaches the
 * handler is answered with a CheckResponse, and anything but a well-formed allow from the
 * decision function — a throw, a rejection, a timeout, a malformed request or decision — is a
 * deny. It never answers with a gRPC error, which Envoy would resolve by `failure_mode_allow`.
 *
 * The gRPC layer is transport.ts (HTTP/2 and gRPC framing only) and the messages are read and
 * written by codec.ts: when the decision is synchronous (everything cached), a Check is
 * decoded, decided, encoded and answered in the one callback that received it.
 */

export interface CheckServerLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

export interface CheckServerOptions {
  /** The decision function; the engine lives elsewhere. */
  readonly check: CheckFunction;
  /** Time allowed to `check` per call, in ms (default 200). Shortened to the caller's own gRPC deadline. */
  readonly deadlineMs?: number;
  readonly logger?: CheckServerLogger;
  /** Called once per finished Check call (metrics). Errors thrown by it are logged and ignored. */
  readonly onDecision?: (event: DecisionEvent) => void;
  /** Health status before anyone sets it (default SERVING). */
  readonly initialServingStatus?: SettableServingStatus;
  /** TLS for the gRPC port (HTTP/2 over TLS); default plaintext (Envoy and the sidecar share the pod's loopback). */
  readonly tls?: TlsOptions;
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
}

export const DEFAULT_DEADLINE_MS = 200;
export const DEFAULT_GRACE_MS = 5_000;
/**
 * Answer this far ahead of the caller's own gRPC deadline (10% of what is left, 5–50 ms), so
 * our deny arrives instead of Envoy's timeout, which Envoy would resolve by failure_mode_allow.
 */
export function callerDeadlineMarginMs(remaining: number): number {
  return Math.min(50, Math.max(5, Math.floor(remaining / 10)));
}
const MAX_DEADLINE_MS = 60_000;

/** Bytes that are not a CheckRequest: the handler denies them instead of grpc-js failing the call. */
function decodeOrUndefined(bytes: unknown): ParsedCheckRequest | undefined {
  if (!(bytes instanceof Uint8Array)) return undefined;
  try {
    return decodeCheckRequest(bytes);
  } catch {
    return undefined;
  }
}

function validateOptions(options: CheckServerOptions): Required<
  Omit<CheckServerOptions, "onDecision" | "tls">
> & {
  onDecision: ((event: DecisionEvent) => void) | undefined;
  tls: TlsOptions | undefined;
} {
  const fail = (message: string): never => {
    throw new CheckServerError("invalid_options", message);
  };
  if (typeof options !== "object" || options === null) fail("options must be an object");
  if (typeof options.check !== "function") fail("check must be a function");
  const deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  if (!Number.isInteger(deadlineMs) || deadlineMs < 1 || deadlineMs > MAX_DEADLINE_MS) {
    fail(`deadlineMs must be an integer from 1 to ${MAX_DEADLINE_MS}`);
  }
  if (options.onDecision !== undefined && typeof options.onDecision !== "function") {
    fail("onDecision must be a function");
  }
  const logger = options.logger ?? createLogger("ext-authz");
  if (typeof logger.warn !== "function" || typeof logger.error !== "function") {
    fail("logger must have warn and error methods");
  }
  const initialServingStatus = options.initialServingStatus ?? "SERVING";
  if (initialServingStatus !== "SERVING" && initialServingStatus !== "NOT_SERVING") {
    fail("initialServingStatus must be SERVING or NOT_SERVING");
  }
  if (options.tls !== undefined && (typeof options.tls !== "object" || options.tls === null)) {
    fail("tls must be TLS server options");
  }
  return {
    check: options.check,
    deadlineMs,
    logger,
    onDecision: options.onDecision,
    initialServingStatus,
    tls: options.tls,
  };
}

/** What the server itself denies with when no valid decision exists. */
const failClosed = {
  invalid_request: { httpStatus: 400, reason: "invalid_request" },
  invalid_decision: { httpStatus: 403, reason: "internal" },
  error: { httpStatus: 403, reason: "internal" },
  timeout: { httpStatus: 503, reason: "upstream_unavailable" },
} as const satisfies Record<string, { httpStatus: DenyHttpStatus; reason: string }>;

/** A thrown AuthorityError keeps its code and status; anything else, and `internal`, is 403 internal. */
function denyForError(error: unknown): { httpStatus: DenyHttpStatus; reason: string } {
  if (error instanceof AuthorityError && error.code !== "internal") {
    return { httpStatus: error.status as DenyHttpStatus, reason: error.code };
  }
  return failClosed.error;
}

export function createCheckServer(options: CheckServerOptions): CheckServer {
  const config = validateOptions(options);
  const { logger } = config;
  const health = createHealthService(["", AUTHORIZATION_SERVICE], config.initialServingStatus);
  const pending = new Set<AbortController>();
  let state: "idle" | "binding" | "listening" | "closed" = "idle";
  let closing: Promise<void> | undefined;
  /** Set when a shutdown's grace period ran out. */
  let cut = false;

  const emit = (event: DecisionEvent): void => {
    if (config.onDecision === undefined) return;
    try {
      config.onDecision(event);
    } catch (error) {
      logger.error({ err: errorSummary(error) }, "onDecision hook threw");
    }
  };

  const handleCheck = (request: Buffer, call: UnaryCall): void => {
    const started = performance.now();
    const parsed = decodeOrUndefined(request);
    const requestId = parsed?.input.requestId ?? randomUUID();
    const controller = new AbortController();
    let settled = false;
    let timer: NodeJS.Timeout | undefined;

    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      if (timer !== undefined) clearTimeout(timer);
      pending.delete(controller);
      return true;
    };

    const event = (outcome: CheckOutcome, response: CheckResponse | undefined): DecisionEvent => {
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
        requestId,
        durationMs: performance.now() - started,
      };
    };

    const respond = (outcome: CheckOutcome, response: CheckResponse): void => {
      if (settled || cut) return;
      let bytes: Buffer;
      let sent = response;
      let sentOutcome = outcome;
      try {
        bytes = encodeCheckResponse(response);
      } catch (error) {
        // Never a gRPC error (Envoy's failure_mode_allow decides those): an internal deny.
        logger.error({ requestId, err: errorSummary(error) }, "CheckResponse could not be encoded; denied");
        sentOutcome = "invalid_decision";
        sent = denyResponse({ allow: false, ...failClosed.invalid_decision, requestId });
        bytes = encodeCheckResponse(sent);
      }
      settle();
      call.respond(bytes);
      emit(event(sentOutcome, sent));
    };

    /** The common case: a well-formed allow, checked and written in one pass. */
    const respondAllow = (bytes: Buffer): void => {
      if (settled || cut) return;
      settle();
      call.respond(bytes);
      emit({
        outcome: "allow",
        allowed: true,
        httpStatus: 200,
        rpcCode: 0,
        reason: null,
        requestId,
        durationMs: performance.now() - started,
      });
    };

    const deny = (
      outcome: Exclude<CheckOutcome, "allow" | "cancelled">,
      decision: Omit<DenyDecision, "allow" | "requestId"> & { requestId?: string },
    ): void => {
      respond(
        outcome,
        denyResponse({
          allow: false,
          httpStatus: decision.httpStatus,
          reason: decision.reason,
          requestId: decision.requestId || requestId,
          ...(decision.headers === undefined ? {} : { headers: decision.headers }),
        }),
      );
    };

    if (parsed === undefined || !parsed.complete) {
      logger.warn(
        { requestId, malformed: parsed === undefined },
        "ext_authz request without HTTP method/path denied",
      );
      deny("invalid_request", failClosed.invalid_request);
      return;
    }

    const remaining = call.deadline === undefined ? Number.POSITIVE_INFINITY : call.deadline - Date.now();
    const budget = Math.min(config.deadlineMs, remaining - callerDeadlineMarginMs(remaining));
    if (budget <= 0) {
      deny("timeout", failClosed.timeout);
      return;
    }

    const onValue = (value: unknown): void => {
      if (settled) return;
      const allow = encodeAllowDecision(value);
      if (allow !== undefined) {
        respondAllow(allow);
        return;
      }
      const decision = validateDecision(value);
      if (decision === null) {
        logger.error({ requestId }, "decision function returned a malformed decision; denied");
        deny("invalid_decision", failClosed.invalid_decision);
      } else if (decision.allow) {
        respond("allow", allowResponse(decision));
      } else {
        deny("deny", decision);
      }
    };
    const onError = (error: unknown): void => {
      if (settled) return;
      logger.warn({ requestId, err: errorSummary(error) }, "decision function failed; denied");
      deny("error", denyForError(error));
    };
    let result: unknown;
    try {
      result = config.check(parsed.input, controller.signal);
    } catch (error) {
      onError(error);
      return;
    }
    const pendingResult =
      result instanceof Promise
        ? result
        : typeof (result as { then?: unknown } | null)?.then === "function"
          ? Promise.resolve(result)
          : undefined;
    if (pendingResult === undefined) {
      // Decided synchronously (everything was cached): nothing to wait for, time or cancel.
      onValue(result);
      return;
    }
    pending.add(controller);
    call.onCancel(() => {
      if (!settle()) return;
      controller.abort(new Error("ext_authz call cancelled"));
      emit(event("cancelled", undefined));
    });
    timer = setTimeout(() => {
      if (settled) return;
      // Deny first: whatever the aborted function does next finds the call settled.
      deny("timeout", failClosed.timeout);
      controller.abort(new Error("ext_authz deadline exceeded"));
      logger.warn({ requestId, deadlineMs: budget }, "ext_authz decision timed out; denied");
    }, budget);
    pendingResult.then(onValue, onError);
  };

  const server: GrpcServer = createGrpcServer({
    methods: { [CHECK_PATH]: { kind: "unary", handle: handleCheck }, ...health.methods },
    ...(config.tls === undefined ? {} : { tls: config.tls }),
  });

  return {
    get inFlight() {
      return pending.size;
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
      const colon = address.lastIndexOf(":");
      const port = Number(address.slice(colon + 1));
      const host = address.slice(0, Math.max(0, colon)).replace(/^\[(.*)\]$/, "$1");
      if (colon < 1 || !Number.isInteger(port) || port < 0 || port > 65_535 || host === "") {
        return Promise.reject(new CheckServerError("invalid_options", "listen address must be host:port"));
      }
      state = "binding";
      return server.listen(host, port).then(
        (bound) => {
          state = "listening";
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
      // At the end of the grace period: nothing is answered any more — the connections are
      // being cut, and a decision that still arrives (an allow included) must not go out on
      // one that survived — and every decision still running is told to stop.
      const cutOff = setTimeout(() => {
        cut = true;
        for (const controller of pending) controller.abort(new Error("ext_authz server shutting down"));
      }, graceMs);
      closing = server.close(graceMs).finally(() => clearTimeout(cutOff));
      return closing;
    },
  };
}
