/**
 * Tracing on the official OpenTelemetry JS SDK, loaded by `startTracing` (tracing.ts) only
 * when `--tracing-url` is set. Spans are batched by the SDK's BatchSpanProcessor (a bounded
 * queue: beyond it spans are dropped, never a request delayed), serialized by the SDK's OTLP
 * JSON serializer and sent with the egress gate's fetch (decision 2503): the official
 * OTLP/HTTP exporter opens its own node:http connections, which the gate forbids (decision 2741).
 *
 * Context lives in an AsyncLocalStorage context manager owned here, not registered as the
 * OpenTelemetry API's global one: nothing else in the process sees or changes it.
 */
import {
  type Context,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  trace,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { CompositePropagator, ExportResultCode, W3CTraceContextPropagator } from "@opentelemetry/core";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { B3InjectEncoding, B3Propagator } from "@opentelemetry/propagator-b3";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type ReadableSpan,
  type SpanExporter,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import type { TracingConfig } from "../config/tracing.ts";
import type { OpenSpan, TraceCarrier, Tracing, TracingDependencies } from "./tracing-types.ts";

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

/** OTLP/HTTP JSON through the egress gate's fetch. */
function fetchSpanExporter(config: TracingConfig, dependencies: TracingDependencies): SpanExporter {
  let stopped = false;
  return {
    export(spans: ReadableSpan[], done) {
      const body = stopped ? undefined : JsonTraceSerializer.serializeRequest(spans);
      if (body === undefined) {
        done({ code: ExportResultCode.FAILED });
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
            if (!response.ok) dependencies.onExportError({ status: response.status });
            done({ code: response.ok ? ExportResultCode.SUCCESS : ExportResultCode.FAILED });
          },
          (error: unknown) => {
            dependencies.onExportError({ error: error instanceof Error ? error.name : "unknown" });
            done({ code: ExportResultCode.FAILED });
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

/**
 * One active context per process, whichever tracing opened the span (a test process runs the
 * authority and a sidecar side by side); enabled with the first tracing, never disabled.
 */
let processContexts: AsyncLocalStorageContextManager | undefined;

export function createSdkTracing(config: TracingConfig, dependencies: TracingDependencies): Tracing {
  processContexts ??= new AsyncLocalStorageContextManager().enable();
  const contexts = processContexts;
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": dependencies.serviceName }),
    // The caller's sampling decision is kept; a request without one is sampled.
    sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: fetchSpanExporter(config, dependencies),
        scheduledDelayMillis: EXPORT_DELAY_MS,
      }),
    ],
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
    const parent = kind === "server" ? parentOf(carriers) : contexts.active();
    const span = tracer.startSpan(name, { kind: SPAN_KINDS[kind] }, parent);
    const active = trace.setSpan(parent, span);
    let ended = false;
    return {
      run: (run) => contexts.with(active, run),
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

  return {
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

    bind(emitter) {
      return contexts.bind(contexts.active(), emitter);
    },

    headers: () => headersOf(contexts.active()),

    async shutdown(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      });
      await Promise.race([provider.shutdown(), deadline]);
      clearTimeout(timer);
    },
  };
}
