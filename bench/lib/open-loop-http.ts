/**
 * An open-loop HTTP/1.1 load generator for latency at a fixed rate: requests are due at
 * evenly spaced instants (rate per second) and are sent whether or not earlier ones have
 * answered. Each latency runs from the moment the generator dispatched the request — when
 * all connections are busy it waits for one, and that wait counts — so a stalled server
 * shows up in the percentiles instead of hiding (coordinated omission). How late the
 * generator's own timer dispatched requests (Node timers have millisecond granularity) is
 * reported apart (`lateP99Ms`) rather than charged to the server.
 *
 * autocannon's `overallRate` is closed-loop per connection and sends each second's quota in
 * a burst at the start of the second: its "fixed rate" latencies are those of a short
 * saturation burst. This generator writes prebuilt requests on keep-alive sockets and reads
 * only the status line and Content-Length, so its own cost per request stays small.
 */
import { connect, type Socket } from "node:net";
import * as hdr from "hdr-histogram-js";

export interface OpenLoopOptions {
  readonly url: string;
  readonly method: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
  /** Requests per second. */
  readonly rate: number;
  readonly durationMs: number;
  /** Sent at the same rate before measuring (JIT, caches); not recorded. */
  readonly warmupMs?: number;
  /** Keep-alive connections (default 16); a request waits when all are busy. */
  readonly connections?: number;
}

export interface OpenLoopResult {
  readonly requests: number;
  readonly reqPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** p99 of how late the generator dispatched requests after they were due (its own timer). */
  readonly lateP99Ms: number;
  readonly errors: number;
  readonly non2xx: number;
  /** Recorded answers by HTTP status ("0": no answer), to name what failed. */
  readonly statuses: Readonly<Record<string, number>>;
}

interface Pending {
  readonly dispatchedAt: number;
  readonly record: boolean;
}

interface Connection {
  readonly socket: Socket;
  buffer: Buffer;
  current: Pending | undefined;
}

const HEADER_END = Buffer.from("\r\n\r\n");

function requestBytes(options: OpenLoopOptions, url: URL): Buffer {
  const body = options.body ?? "";
  const lines = [`${options.method} ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`];
  for (const [name, value] of Object.entries(options.headers ?? {})) lines.push(`${name}: ${value}`);
  lines.push(`content-length: ${Buffer.byteLength(body)}`, "connection: keep-alive", "", body);
  return Buffer.from(lines.join("\r\n"));
}

/** Status and total length of the first whole response in `buffer`, or undefined when incomplete. */
function parseResponse(buffer: Buffer): { status: number; length: number } | undefined {
  const end = buffer.indexOf(HEADER_END);
  if (end === -1) return undefined;
  const head = buffer.toString("latin1", 0, end);
  const status = Number(head.slice(9, 12));
  const match = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (match === null) throw new Error("response without content-length");
  const length = end + HEADER_END.length + Number(match[1]);
  return buffer.length >= length ? { status, length } : undefined;
}

export async function openLoopHttp(options: OpenLoopOptions): Promise<OpenLoopResult> {
  const url = new URL(options.url);
  const request = requestBytes(options, url);
  const newHistogram = () =>
    hdr.build({
      lowestDiscernibleValue: 1,
      highestTrackableValue: 60_000_000,
      numberOfSignificantValueDigits: 3,
    });
  const histogram = newHistogram();
  const lateness = newHistogram();
  let completed = 0;
  let errors = 0;
  let non2xx = 0;
  const statuses: Record<string, number> = {};
  const waiting: Pending[] = [];
  /** Free connections, used in turn (FIFO) so none idles past the server's keep-alive timeout. */
  const idle: Connection[] = [];
  let outstanding = 0;
  let closing = false;

  const finish = (pending: Pending, status: number): void => {
    outstanding--;
    if (!pending.record) return;
    statuses[status] = (statuses[status] ?? 0) + 1;
    if (status === 0) errors++;
    else if (status < 200 || status > 299) non2xx++;
    else {
      completed++;
      histogram.recordValue(Math.max(1, Math.round((performance.now() - pending.dispatchedAt) * 1000)));
    }
  };
  const send = (connection: Connection, pending: Pending): void => {
    outstanding++;
    connection.current = pending;
    connection.socket.write(request);
  };
  const release = (connection: Connection): void => {
    const next = waiting.shift();
    if (next === undefined) idle.push(connection);
    else send(connection, next);
  };
  const open = (): Promise<Connection> =>
    new Promise((resolve, reject) => {
      const socket = connect({ host: url.hostname, port: Number(url.port), noDelay: true });
      const connection: Connection = { socket, buffer: Buffer.alloc(0), current: undefined };
      socket.once("connect", () => resolve(connection));
      socket.once("error", reject);
      socket.on("data", (chunk: Buffer) => {
        connection.buffer =
          connection.buffer.length === 0 ? chunk : Buffer.concat([connection.buffer, chunk]);
        const response = parseResponse(connection.buffer);
        if (response === undefined) return;
        connection.buffer = connection.buffer.subarray(response.length);
        const pending = connection.current;
        connection.current = undefined;
        if (pending !== undefined) finish(pending, response.status);
        release(connection);
      });
      socket.on("close", () => {
        if (connection.current !== undefined) finish(connection.current, 0);
        connection.current = undefined;
        const at = idle.indexOf(connection);
        if (at !== -1) idle.splice(at, 1);
        // The server closed it (keep-alive timeout, error): a fresh one takes its place.
        if (!closing) open().then(release, () => undefined);
      });
    });

  idle.push(...(await Promise.all(Array.from({ length: options.connections ?? 16 }, open))));
  const dispatch = (pending: Pending): void => {
    const connection = idle.shift();
    if (connection === undefined) waiting.push(pending);
    else send(connection, pending);
  };

  const phase = (durationMs: number, record: boolean): Promise<void> =>
    new Promise((resolve) => {
      const start = performance.now();
      const interval = 1000 / options.rate;
      const total = Math.floor((durationMs * options.rate) / 1000);
      let sent = 0;
      const tick = (): void => {
        const now = performance.now();
        while (sent < total && start + sent * interval <= now) {
          if (record) lateness.recordValue(Math.max(1, Math.round((now - (start + sent * interval)) * 1000)));
          dispatch({ dispatchedAt: now, record });
          sent++;
        }
        if (sent >= total) resolve();
        else setTimeout(tick, Math.max(0, start + sent * interval - performance.now()));
      };
      tick();
    });

  if ((options.warmupMs ?? 0) > 0) await phase(options.warmupMs ?? 0, false);
  const started = performance.now();
  await phase(options.durationMs, true);
  // Wait for the answers still outstanding (bounded), then close.
  const drainUntil = performance.now() + 10_000;
  const seconds = (performance.now() - started) / 1000;
  while ((outstanding > 0 || waiting.length > 0) && performance.now() < drainUntil) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  closing = true;
  for (const connection of idle) connection.socket.destroy();
  const ms = (us: number) => Number((us / 1000).toFixed(3));
  return {
    requests: completed,
    reqPerSec: Math.round(completed / seconds),
    p50Ms: ms(histogram.getValueAtPercentile(50)),
    p99Ms: ms(histogram.getValueAtPercentile(99)),
    maxMs: ms(histogram.maxValue),
    lateP99Ms: ms(lateness.getValueAtPercentile(99)),
    errors: errors + waiting.length,
    non2xx,
    statuses,
  };
}
