/**
 * Tracing on the official OpenTelemetry JS SDK, loaded by `startTracing` (tracing.ts) only
 * when `--tracing-url` is set. Spans are batched by the SDK's BatchSpanProcessor (a bounded
 * queue: beyond it spans are dropped, never a request delayed), serialized by the SDK's OTLP
 * JSON serializer and sent with the egress gate's fetch (decision 2503): the official
 * OTLP/HTTP exporter opens its own node:http connections, which the gate forbids (decision 2741).
 *
 * The active context is the request's (tracing-context.ts), not the OpenTelemetry API's global
 * context manager: nothing else in the process sees or changes it, and nothing is registered.
 */

import type { EventEmitter } from "node:events";
import {
  type Attributes,
  type Context,
  type Counter,
  createNoopMeter,
  type Meter,
  type MeterProvider,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  TraceFlags,
  trace,
} from "@opentelemetry/api";
import { CompositePropagator, ExportResultCode, W3CTraceContextPropagator } from "@opentelemetry/core";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { B3InjectEncoding, B3Propagator } from "@opentelemetry/propagator-b3";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type ReadableSpan,
  type Sampler,
  SamplingDecision,
  type SpanExporter,
  type SpanProcessor,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import {
  activeTraceContext,
  type OpenSpan,
  TRACING_KEY,
  type TraceCarrier,
  type Tracing,
  type TracingConfig,
  type TracingDependencies,
  type TracingMetrics,
} from "./tracing-context.ts";

const SPAN_KINDS = { server: SpanKind.SERVER, internal: SpanKind.INTERNAL, client: SpanKind.CLIENT } as const;

/** Longest a finished span waits for its batch (the SDK's queue bounds what waits). */
const EXPORT_DELAY_MS = 1000;
/** Deadline of one export request. */
const EXPORT_TIMEOUT_MS = 10_000;

const carrierGetter: TextMapGetter<TraceCarrier> = {
  get: (carrier, key) => carrier(key.toLowerCase()),
  // The propagators read named fields only.
  keys: () => [],
};

class ExportFailedError extends Error {
  override name = "ExportFailedError";
}

/** The SDK's self-observability metric the batch processor counts finished spans in. */
const PROCESSED_SPANS = "otel.sdk.processor.span.processed";

/**
 * A meter provider for the batch processor's self-observability: its processed-spans counter
 * (error.type `queue_full` for a span dropped at the queue, another error.type for spans of a
 * failed export) feeds `metrics`; every other instrument is a no-op.
 */
function selfObservation(metrics: TracingMetrics): MeterProvider {
  const processed: Counter = {
    add(count: number, attributes?: Attributes) {
      const error = attributes?.["error.type"];
      metrics.spans(error === undefined ? "exported" : error === "queue_full" ? "dropped" : "failed", count);
    },
  };
  const meter: Meter = Object.assign(Object.create(createNoopMeter()) as Meter, {
    createCounter: (name: string) =>
      name === PROCESSED_SPANS ? processed : createNoopMeter().createCounter(name),
  });
  return { getMeter: () => meter };
}

/** OTLP/HTTP JSON through the egress gate's fetch. */
function fetchSpanExporter(config: TracingConfig, dependencies: TracingDependencies): SpanExporter {
  let stopped = false;
  return {
    export(spans: ReadableSpan[], done) {
      // With an error: the batch processor counts the spans as failed, not exported.
      const failed = (why: string) => {
        dependencies.metrics?.exportFailure();
        done({ code: ExportResultCode.FAILED, error: new ExportFailedError(why) });
      };
      const body = stopped ? undefined : JsonTraceSerializer.serializeRequest(spans);
      if (body === undefined) {
        failed("not serialized");
        return;
      }
      dependencies
        .fetch(config.url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          redirect: "manual",
          signal: AbortSignal.timeout(EXPORT_TIMEOUT_MS),
        })
        .then(
          async (response) => {
            await response.body?.cancel();
            if (response.ok) {
              done({ code: ExportResultCode.SUCCESS });
              return;
            }
            dependencies.onExportError({ status: response.status });
            failed(`HTTP ${response.status}`);
          },
          (error: unknown) => {
            dependencies.onExportError({ error: error instanceof Error ? error.name : "unknown" });
            failed(error instanceof Error ? error.name : "unknown");
          },
        );
    },
    async shutdown() {
      stopped = true;
    },
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === "function";
}

/** The running request's OpenTelemetry context (ROOT_CONTEXT outside a traced request). */
function activeContext(): Context {
  return (activeTraceContext.getStore() as Context | undefined) ?? ROOT_CONTEXT;
}

type Listener = (...args: unknown[]) => unknown;
const ADDING = ["on", "addListener", "once", "prependListener", "prependOnceListener"] as const;
const REMOVING = ["off", "removeListener"] as const;

/**
 * `emitter`'s listeners, added from now on, run in `context`: a request's body events are
 * emitted from its connection, outside the request's context. Removal finds the wrapped ones.
 */
function bindEmitter<E extends EventEmitter>(emitter: E, context: Context): E {
  const wrapped = new WeakMap<Listener, Listener>();
  const target = emitter as unknown as Record<string, (event: string | symbol, listener: Listener) => E>;
  for (const method of ADDING) {
    const add = target[method]?.bind(emitter);
    if (add === undefined) continue;
    target[method] = (event, listener) => {
      let bound = wrapped.get(listener);
      if (bound === undefined) {
        bound = function (this: unknown, ...args: unknown[]) {
          return activeTraceContext.run(context, () => listener.apply(this, args));
        };
        wrapped.set(listener, bound);
      }
      return add(event, bound);
    };
  }
  for (const method of REMOVING) {
    const remove = target[method]?.bind(emitter);
    if (remove === undefined) continue;
    target[method] = (event, listener) => remove(event, wrapped.get(listener) ?? listener);
  }
  return emitter;
}

/** Records a span without sampling it: its attributes are known at its end (a deny is then exported). */
const recordOnly: Sampler = {
  shouldSample: () => ({ decision: SamplingDecision.RECORD }),
  toString: () => "RecordOnly",
};

/**
 * Who decides whether a request is traced (decision 2862). By default the operator: every
 * request, whatever sampled flag its caller sent (a caller could otherwise hide its own
 * requests from the operator's traces). When the operator honours the caller's flag, an
 * unsampled caller's server span is recorded (not sampled), its children are not, and
 * `DeniesAlwaysExported` exports it if it ends in a deny.
 */
function samplerFor(config: TracingConfig): Sampler {
  if (config.honourCallerSampling !== true) return new AlwaysOnSampler();
  return new ParentBasedSampler({
    root: new AlwaysOnSampler(),
    remoteParentNotSampled: recordOnly,
    localParentNotSampled: new AlwaysOffSampler(),
  });
}

/** The span as a sampled one: what the batch processor exports. */
function asSampled(span: ReadableSpan): ReadableSpan {
  const context = { ...span.spanContext(), traceFlags: span.spanContext().traceFlags | TraceFlags.SAMPLED };
  return new Proxy(span, {
    get: (target, property) =>
      property === "spanContext" ? () => context : Reflect.get(target, property, target),
  });
}

/** Exports sampled spans, and the recorded unsampled ones that end in a deny. */
class DeniesAlwaysExported implements SpanProcessor {
  readonly #next: SpanProcessor;

  constructor(next: SpanProcessor) {
    this.#next = next;
  }

  onStart(span: Parameters<SpanProcessor["onStart"]>[0], parent: Context): void {
    this.#next.onStart(span, parent);
  }

  onEnd(span: ReadableSpan): void {
    const sampled = (span.spanContext().traceFlags & TraceFlags.SAMPLED) !== 0;
    if (sampled) this.#next.onEnd(span);
    else if (span.attributes["authority.decision"] === "deny") this.#next.onEnd(asSampled(span));
  }

  forceFlush(): Promise<void> {
    return this.#next.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.#next.shutdown();
  }
}

export function createSdkTracing(config: TracingConfig, dependencies: TracingDependencies): Tracing {
  const batches = new BatchSpanProcessor({
    exporter: fetchSpanExporter(config, dependencies),
    scheduledDelayMillis: EXPORT_DELAY_MS,
    ...(dependencies.metrics === undefined
      ? {}
      : { selfObsMeterProvider: selfObservation(dependencies.metrics) }),
  });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": dependencies.serviceName }),
    sampler: samplerFor(config),
    spanProcessors: [new DeniesAlwaysExported(batches)],
  });
  const tracer = provider.getTracer("authority");
  // Extraction runs in order and the last context found wins: W3C over B3.
  const propagator = new CompositePropagator({
    // Injected in both B3 encodings: a caller's stale `b3` or `x-b3-*` header is replaced either way.
    propagators: [
      new B3Propagator({ injectEncoding: B3InjectEncoding.MULTI_HEADER }),
      new B3Propagator({ injectEncoding: B3InjectEncoding.SINGLE_HEADER }),
      new W3CTraceContextPropagator(),
    ],
  });

  const headersOf = (active: Context): Record<string, string> => {
    const carrier: Record<string, string> = {};
    propagator.inject(active, carrier, {
      set: (target, key, value) => {
        target[key] = value;
      },
    });
    return carrier;
  };

  const parentOf = (carriers: readonly TraceCarrier[]): Context => {
    for (const carrier of carriers) {
      const extracted = propagator.extract(ROOT_CONTEXT, carrier, carrierGetter);
      if (trace.getSpanContext(extracted) !== undefined) return extracted;
    }
    return ROOT_CONTEXT;
  };

  const open = (
    name: string,
    kind: "server" | "internal" | "client",
    carriers: readonly TraceCarrier[] = [],
  ): OpenSpan => {
    // A server span's context also holds the tracing that serves its request (`traced` reads it).
    const parent = kind === "server" ? parentOf(carriers).setValue(TRACING_KEY, tracing) : activeContext();
    const span = tracer.startSpan(name, { kind: SPAN_KINDS[kind] }, parent);
    const active = trace.setSpan(parent, span);
    let ended = false;
    return {
      run: (run) => activeTraceContext.run(active, run),
      headers: () => headersOf(active),
      end(outcome, failure) {
        if (ended) return;
        ended = true;
        if (outcome !== undefined) span.setAttributes({ ...outcome });
        if (failure !== undefined) {
          span.setStatus({ code: SpanStatusCode.ERROR });
          span.setAttribute("error.type", failure);
        }
        span.end();
      },
    };
  };

  const tracing: Tracing = {
    open,

    span(name, run, outcome) {
      const span = open(name, name === "authority.upstream" ? "client" : "internal");
      const finish = (result: unknown): void =>
        span.end(outcome === undefined ? undefined : outcome(result as never));
      // The class only: a message could quote input.
      const fail = (error: unknown): void =>
        span.end(undefined, error instanceof Error ? error.name : "unknown");
      let result: ReturnType<typeof run>;
      try {
        result = span.run(run);
      } catch (error) {
        fail(error);
        throw error;
      }
      if (isThenable(result)) result.then(finish, fail);
      else finish(result);
      return result;
    },

    bind: (emitter) => bindEmitter(emitter, activeContext()),

    headers: () => headersOf(activeContext()),

    async shutdown(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      });
      // A failed last export is counted and logged already: it must not fail the process's shutdown.
      await Promise.race([provider.shutdown().catch(() => undefined), deadline]);
      clearTimeout(timer);
    },
  };
  return tracing;
}
