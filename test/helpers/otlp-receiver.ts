import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local OTLP/HTTP receiver: keeps every request body by path (`/v1/logs`, `/v1/traces`,
 * or any other for the plain JSON export); a protobuf traces request (Envoy's tracer sends
 * one) is kept in the JSON encoding's shape, with the span fields the tests read. `down()` closes it (connections
 * refused) and `up()` listens again on the same port; `status` answers every request with
 * another status instead of 200.
 */
export interface OtlpReceiver {
  readonly url: string;
  readonly bodies: Array<{ readonly path: string; readonly body: unknown }>;
  status: number;
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const bodies: OtlpReceiver["bodies"] = [];
  let server: Server | undefined;
  let port = 0;
  const receiver = {
    url: "",
    bodies,
    status: 200,
    async up() {
      const next = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on("data", (chunk: Buffer) => chunks.push(chunk));
        req.on("end", () => {
          if (receiver.status === 200) {
            const bytes = Buffer.concat(chunks);
            const body =
              req.headers["content-type"] === "application/x-protobuf"
                ? protobufTraces(bytes)
                : JSON.parse(bytes.toString("utf8"));
            bodies.push({ path: req.url ?? "", body });
          }
          res.writeHead(receiver.status, { "content-type": "application/json" }).end("{}");
        });
      });
      await new Promise<void>((resolve) => next.listen(port, "127.0.0.1", resolve));
      port = (next.address() as AddressInfo).port;
      server = next;
    },
    async down() {
      const current = server;
      server = undefined;
      if (current === undefined) return;
      await new Promise<void>((resolve) => {
        current.close(() => resolve());
        current.closeAllConnections();
      });
    },
    close: () => receiver.down(),
  };
  await receiver.up();
  receiver.url = `http://127.0.0.1:${port}`;
  return receiver;
}

interface OtlpLogsBody {
  readonly resourceLogs: ReadonlyArray<{
    readonly scopeLogs: ReadonlyArray<{ readonly logRecords: unknown[] }>;
  }>;
}

/** The OTLP log records of every logs request received, in order. */
// biome-ignore lint/suspicious/noExplicitAny: OTLP JSON is read field by field
export function logRecords(receiver: OtlpReceiver): any[] {
  return receiver.bodies
    .filter((entry) => entry.path === "/v1/logs")
    .flatMap((entry) =>
      (entry.body as OtlpLogsBody).resourceLogs.flatMap((r) => r.scopeLogs.flatMap((s) => s.logRecords)),
    );
}

/** The fields of one protobuf message: field number → raw values (varints as numbers, the rest as bytes). */
function protobufFields(bytes: Uint8Array): Map<number, Array<number | Uint8Array>> {
  const fields = new Map<number, Array<number | Uint8Array>>();
  let at = 0;
  const varint = (): number => {
    let value = 0;
    let shift = 0;
    for (;;) {
      const byte = bytes[at++] as number;
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return value;
      shift += 7;
    }
  };
  while (at < bytes.length) {
    const key = varint();
    const wire = key & 7;
    let value: number | Uint8Array;
    if (wire === 0) value = varint();
    else if (wire === 2) {
      const length = varint();
      value = bytes.subarray(at, at + length);
      at += length;
    } else if (wire === 1 || wire === 5) {
      const length = wire === 1 ? 8 : 4;
      value = bytes.subarray(at, at + length);
      at += length;
    } else throw new Error(`protobuf wire type ${wire} not expected in OTLP traces`);
    const number = Math.floor(key / 8);
    fields.set(number, [...(fields.get(number) ?? []), value]);
  }
  return fields;
}

const messages = (fields: Map<number, Array<number | Uint8Array>>, field: number) =>
  (fields.get(field) ?? []).map((value) => protobufFields(value as Uint8Array));
const text = (fields: Map<number, Array<number | Uint8Array>>, field: number) =>
  Buffer.from((fields.get(field)?.[0] as Uint8Array | undefined) ?? []).toString("utf8");
const hex = (fields: Map<number, Array<number | Uint8Array>>, field: number) =>
  Buffer.from((fields.get(field)?.[0] as Uint8Array | undefined) ?? []).toString("hex");

/** An ExportTraceServiceRequest (opentelemetry/proto/collector/trace/v1) in the JSON encoding's shape. */
function protobufTraces(bytes: Uint8Array): unknown {
  return {
    resourceSpans: messages(protobufFields(bytes), 1).map((resourceSpans) => ({
      resource: {
        attributes: messages(resourceSpans, 1).flatMap((resource) =>
          messages(resource, 1).map((attribute) => ({
            key: text(attribute, 1),
            value: { stringValue: messages(attribute, 2).map((value) => text(value, 1))[0] },
          })),
        ),
      },
      scopeSpans: messages(resourceSpans, 2).map((scopeSpans) => ({
        spans: messages(scopeSpans, 2).map((span) => ({
          traceId: hex(span, 1),
          spanId: hex(span, 2),
          parentSpanId: hex(span, 4),
          name: text(span, 5),
          kind: (span.get(6)?.[0] as number | undefined) ?? 0,
        })),
      })),
    })),
  };
}
