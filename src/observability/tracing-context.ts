/**
 * What tracing (tracing.ts) and its SDK implementation (tracing-sdk.ts) share: the shapes, and
 * the trace context of the running request.
 *
 * The context is per request, not per process: a transport that serves a request with tracing
 * on (a Check, a proxied or an HTTP request) runs it in a context that holds its span and the
 * tracing its composition root gave it, and the stages inside open their spans from there. A
 * request served without tracing has none, and two servers in one process keep their own.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { EventEmitter } from "node:events";

/** An OpenTelemetry `Context`, as far as this side reads it. */
/** What a process's tracing settings resolve to (src/config/tracing.ts reads them). */
export interface TracingConfig {
  /** The OTLP/HTTP traces endpoint (`…/v1/traces`). */
  readonly url: string;
  /**
   * Keep a caller's unsampled flag (W3C `-00`, B3 `0`): its allows go untraced, its denies are
   * traced still. Absent or false: every request is traced, whatever the caller says (decision 2862).
   */
  readonly honourCallerSampling?: boolean;
}

export interface TraceContext {
  getValue(key: symbol): unknown;
}

/** The running request's trace context (the SDK's active context), absent when not traced. */
export const activeTraceContext = new AsyncLocalStorage<TraceContext>();

/** Where a trace context keeps the tracing that serves its request (an OpenTelemetry context key). */
export const TRACING_KEY: symbol = Symbol.for("authority.tracing");

/** The spans the pipeline opens: low-cardinality names, the same on every process. */
export type SpanName =
  | "authority.verify_token"
  | "authority.load_policy"
  | "authority.decide"
  | "authority.execute"
  | "authority.upstream";

/**
 * What a span may say about its outcome: decision facts and statuses only. Never a token,
 * a credential, a header value, a URL or a request body (they could carry secrets).
 */
export interface SpanOutcome {
  readonly "authority.decision"?: "allow" | "deny";
  readonly "authority.reason"?: string;
  readonly "http.response.status_code"?: number;
}

/** Reads one header (lower-case name) of an incoming request or call; undefined when absent. */
export type TraceCarrier = (name: string) => string | undefined;

/** A span opened by `Tracing.open`, ended by its owner (a request served or sent by events). */
export interface OpenSpan {
  /** `run` with this span active (spans opened inside are its children). */
  run<T>(run: () => T): T;
  /** This span's context as W3C (`traceparent`, `tracestate`) and B3 headers, for an outbound request. */
  headers(): Record<string, string>;
  /** Ends the span (later calls do nothing); `failure` marks it an error: a class or code, never a message. */
  end(outcome?: SpanOutcome, failure?: string): void;
}

export interface Tracing {
  /**
   * Opens a span: `server` takes its parent from the first carrier that holds a trace context
   * (W3C `traceparent`/`tracestate`, else B3 single or multi header), else starts a trace;
   * `internal` and `client` are children of the active span.
   */
  open(name: string, kind: "server" | "internal" | "client", carriers?: readonly TraceCarrier[]): OpenSpan;
  /**
   * Runs `run` in a child span of the active one; the span ends when `run` returns, or when
   * the promise it returns settles (a throw or rejection marks it an error, by class only).
   */
  span<T>(name: SpanName, run: () => T, outcome?: (result: Awaited<T>) => SpanOutcome): T;
  /** `emitter`'s listeners run in the active context (a request body read by events). */
  bind<E extends EventEmitter>(emitter: E): E;
  /** The active span's context as trace headers (see OpenSpan.headers). */
  headers(): Record<string, string>;
  /** Sends the spans still buffered, within `timeoutMs`. */
  shutdown(timeoutMs: number): Promise<void>;
}

/** fetch's shape: the egress gate's (EgressPolicy.fetch); the tracing URL is one of its operator URLs. */
export type TracingFetch = (url: string, init: RequestInit) => Promise<Response>;

export interface TracingDependencies {
  readonly fetch: TracingFetch;
  /** `service.name` of the spans' resource: `authority` or `authority-sidecar`. */
  readonly serviceName: string;
  /** Told about failed exports (status, or the error's class); never given span contents. */
  readonly onExportError: (info: { readonly status?: number; readonly error?: string }) => void;
  /** Counts spans and failed exports (tracing.ts, `tracingMetrics`); absent: not counted. */
  readonly metrics?: TracingMetrics;
}

/** What became of finished spans: sent, dropped with the queue full, or lost with a failed export. */
export type SpanExportOutcome = "exported" | "dropped" | "failed";

export interface TracingMetrics {
  spans(outcome: SpanExportOutcome, count: number): void;
  /** One export request that failed (no answer, or not 2xx). */
  exportFailure(): void;
}
