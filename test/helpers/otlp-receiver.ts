import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local OTLP/HTTP (JSON) receiver: keeps every request body by path (`/v1/logs`,
 * `/v1/traces`, or any other for the plain JSON export). `down()` closes it (connections
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
            bodies.push({ path: req.url ?? "", body: JSON.parse(Buffer.concat(chunks).toString("utf8")) });
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
