/**
 * The tracing setting, the same for `authority serve` and `authority sidecar` (each with its
 * own environment prefix): docs/observability.md, "Tracing". Unset: no tracing, and the
 * OpenTelemetry SDK is never loaded.
 */
import type { TracingConfig } from "../observability/tracing.ts";
import type { SettingReader } from "./schema.ts";
import { boolean, httpUrl, setting } from "./settings.ts";

export type { TracingConfig };

export function tracingSettings(envPrefix: string) {
  return {
    tracingUrl: setting({
      key: "tracing-url",
      env: `${envPrefix}_TRACING_URL`,
      description:
        "send OpenTelemetry spans to this OTLP/HTTP traces endpoint (ending in `/v1/traces`); W3C trace context and B3 are read from requests and passed to upstreams; unset: no tracing",
      parse: httpUrl,
    }),
    tracingHonourCallerSampling: setting({
      key: "tracing-honour-caller-sampling",
      env: `${envPrefix}_TRACING_HONOUR_CALLER_SAMPLING`,
      description:
        "keep a caller's unsampled trace flag (W3C `-00`, B3 `0`): its allowed requests go untraced, denies are traced still; false: every request is traced while tracing is on, whatever the caller says",
      default: false,
      parse: boolean,
    }),
  };
}

type TracingSettings = ReturnType<typeof tracingSettings>;

/** `{ tracing }` when a tracing URL is configured: for a configuration's spread. */
export function optionalTracing(read: SettingReader<TracingSettings>): { tracing?: TracingConfig } {
  const url = read.optional("tracingUrl");
  return url === undefined
    ? {}
    : { tracing: { url, honourCallerSampling: read.value("tracingHonourCallerSampling") } };
}
