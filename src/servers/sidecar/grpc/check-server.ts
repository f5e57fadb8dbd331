import { randomUUID } from "node:crypto";
import {
  type Deadline,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type sendUnaryData,
} from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { AuthorityError } from "../../../errors.ts";
import { createLogger } from "../../../observability/logger.ts";
import { parseCheckRequest } from "./check-input.ts";
import { allowResponse, denyResponse, validateDecision } from "./check-response.ts";
import { CheckServerError } from "./errors.ts";
import { createHealthService, type SettableServingStatus } from "./health.ts";
import { AUTHORIZATION_SERVICE, type CheckResponse, loadProtos } from "./proto.ts";
import type { CheckFunction, CheckOutcome, DecisionEvent, DenyDecision, DenyHttpStatus } from "./types.ts";

/**
 * The Envoy ext_authz v3 gRPC server. It fails closed: every Check call that reaches the
 * handler is answered with a CheckResponse, and anything but a well-formed allow from the
 * decision function — a throw, a rejection, a timeout, a malformed request or decision — is a
 * deny. It never answers with a gRPC error, which Envoy would resolve by `failure_mode_allow`.
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
  /** Default: insecure (Envoy and the sidecar share the pod's loopback). */
  readonly credentials?: ServerCredentials;
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

/** Stands for a request whose bytes did not decode: the handler denies it instead of grpc-js failing the call. */
const MALFORMED: unique symbol = Symbol("malformed CheckRequest");
interface MalformedRequest {
  readonly [MALFORMED]: true;
}
const malformedRequest: MalformedRequest = Object.freeze({ [MALFORMED]: true as const });

function validateOptions(options: CheckServerOptions): Required<Omit<CheckServerOptions, "onDecision">> & {
  onDecision: ((event: DecisionEvent) => void) | undefined;
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
  const credentials = options.credentials ?? ServerCredentials.createInsecure();
  if (!(credentials instanceof ServerCredentials)) fail("credentials must be grpc ServerCredentials");
  return {
    check: options.check,
    deadlineMs,
    logger,
    onDecision: options.onDecision,
    initialServingStatus,
    credentials,
  };
}

function remainingMs(deadline: Deadline): number {
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  return at - Date.now();
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

function errorSummary(error: unknown): Record<string, unknown> {
  // Name and code only: an error message may quote a token or upstream text.
  if (error instanceof AuthorityError) return { name: error.name, code: error.code };
  if (error instanceof Error) return { name: error.name };
  return { type: typeof error };
}

export function createCheckServer(options: CheckServerOptions): CheckServer {
  const config = validateOptions(options);
  const { logger } = config;
  const protos = loadProtos();
  const health = createHealthService(["", AUTHORIZATION_SERVICE], config.initialServingStatus);
  const pending = new Set<AbortController>();
  const server = new Server();
  let state: "idle" | "binding" | "listening" | "closed" = "idle";
  let closing: Promise<void> | undefined;

  const checkMethod = protos.authorization.Check as MethodDefinition<object, object> | undefined;
  if (checkMethod === undefined) throw new CheckServerError("invalid_options", "Authorization.Check missing");
  const decode = checkMethod.requestDeserialize;
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

  const handleCheck = (
    call: ServerUnaryCall<unknown, CheckResponse>,
    callback: sendUnaryData<CheckResponse>,
  ) => {
    const started = performance.now();
    const request: unknown = call.request;
    const parsed = request === malformedRequest ? undefined : parseCheckRequest(request);
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
      if (!settle()) return;
      callback(null, response);
      emit(event(outcome, response));
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

    const remaining = remainingMs(call.getDeadline());
    const budget = Math.min(config.deadlineMs, remaining - callerDeadlineMarginMs(remaining));
    if (budget <= 0) {
      deny("timeout", failClosed.timeout);
      return;
    }

    pending.add(controller);
    call.on("cancelled", () => {
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

    new Promise<unknown>((resolve) => resolve(config.check(parsed.input, controller.signal))).then(
      (value) => {
        if (settled) return;
        const decision = validateDecision(value);
        if (decision === null) {
          logger.error({ requestId }, "decision function returned a malformed decision; denied");
          deny("invalid_decision", failClosed.invalid_decision);
        } else if (decision.allow) {
          respond("allow", allowResponse(decision));
        } else {
          deny("deny", decision);
        }
      },
      (error: unknown) => {
        if (settled) return;
        logger.warn({ requestId, err: errorSummary(error) }, "decision function failed; denied");
        deny("error", denyForError(error));
      },
    );
  };

  server.addService(authorization, { Check: handleCheck });
  server.addService(protos.health, health.implementation);

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
      state = "binding";
      return new Promise((resolve, reject) => {
        server.bindAsync(address, config.credentials, (error, port) => {
          if (error !== null) {
            state = "idle";
            reject(new CheckServerError("bind_failed", `cannot bind ${address}`, { cause: error }));
            return;
          }
          state = "listening";
          resolve({ port });
        });
      });
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
        const force = setTimeout(() => {
          for (const controller of pending) controller.abort(new Error("ext_authz server shutting down"));
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      return closing;
    },
  };
}
