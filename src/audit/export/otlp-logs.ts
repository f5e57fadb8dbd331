/**
 * Decision records as an OTLP/HTTP JSON `ExportLogsServiceRequest`
 * (opentelemetry-proto `collector/logs/v1`, JSON mapping of the OTLP specification): one log
 * record per decision, its fields as attributes, the record itself as the JSON string body.
 * 64-bit integers are decimal strings, as the JSON mapping requires.
 */

/** What the exporter ships: a decision record's fields (already masked). */
export type ExportedRecord = Readonly<Record<string, unknown>>;

type AnyValue =
  | { readonly stringValue: string }
  | { readonly boolValue: boolean }
  | { readonly intValue: string }
  | { readonly doubleValue: number };

interface KeyValue {
  readonly key: string;
  readonly value: AnyValue;
}

/** SeverityNumber INFO (9) for an allow, WARN (13) for a deny. */
const SEVERITY = { allowed: [9, "INFO"], denied: [13, "WARN"] } as const;

function anyValue(value: unknown): AnyValue | undefined {
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  if (typeof value === "number")
    return Number.isSafeInteger(value) ? { intValue: String(value) } : { doubleValue: value };
  return undefined;
}

function attributes(record: ExportedRecord): KeyValue[] {
  const out: KeyValue[] = [];
  for (const [key, raw] of Object.entries(record)) {
    const value = anyValue(raw);
    if (value !== undefined) out.push({ key: `authority.${key}`, value });
  }
  return out;
}

function unixNano(time: unknown): string {
  const ms = typeof time === "string" ? Date.parse(time) : Number.NaN;
  return Number.isNaN(ms) ? "0" : `${BigInt(ms) * 1_000_000n}`;
}

/** The request body for one batch, from one service (`service.name`). */
export function otlpLogsRequest(serviceName: string, records: readonly ExportedRecord[]): unknown {
  const now = `${BigInt(Date.now()) * 1_000_000n}`;
  return {
    resourceLogs: [
      {
        resource: { attributes: [{ key: "service.name", value: { stringValue: serviceName } }] },
        scopeLogs: [
          {
            scope: { name: "authority.decision-log" },
            logRecords: records.map((record) => {
              const [severityNumber, severityText] =
                record.decision === "denied" ? SEVERITY.denied : SEVERITY.allowed;
              return {
                timeUnixNano: unixNano(record.time),
                observedTimeUnixNano: now,
                severityNumber,
                severityText,
                eventName: "authority.decision",
                body: { stringValue: JSON.stringify(record) },
                attributes: attributes(record),
              };
            }),
          },
        ],
      },
    ],
  };
}
