/**
 * HTTP(S) requests for tests, over node:http(s): a bounded wait (a hung server fails the
 * call instead of the test run), the elapsed time, any header value node allows, and a
 * trusted CA for the managed API's self-signed certificate. `rawRequest` writes bytes on a
 * socket as they are (header injection, malformed framing).
 *
 *   const reply = await httpRequest(`${url}/v1/encrypt`, { method: "POST", json: { data }, ca });
 *   reply.status; reply.text; reply.json; reply.elapsedMs
 */
import { request as httpRequestRaw, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequestRaw } from "node:https";
import { connect as netConnect } from "node:net";
import { connect as tlsConnect } from "node:tls";

export interface HttpReply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field
  readonly json: any;
  readonly elapsedMs: number;
}

export interface HttpRequestOptions {
  readonly method?: string;
  readonly headers?: Readonly<Record<string, string | readonly string[]>>;
  /** Sent as JSON with content-type application/json. */
  readonly json?: unknown;
  /** Sent as is (set the content type yourself). */
  readonly body?: string | Buffer;
  /** Give up after this long (default 15 s): the call rejects with a "no answer" error. */
  readonly timeoutMs?: number;
  /** Trusted CA (PEM) for https URLs. */
  readonly ca?: string | Buffer;
  /** A new connection, not a kept-alive one (for requests the server answers by closing). */
  readonly fresh?: boolean;
}

export class NoAnswerError extends Error {
  constructor(url: string, timeoutMs: number) {
    super(`no answer from ${url} within ${timeoutMs} ms`);
    this.name = "NoAnswerError";
  }
}

function parseJson(text: string): unknown {
  if (text.length === 0) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function httpRequest(url: string, options: HttpRequestOptions = {}): Promise<HttpReply> {
  const target = new URL(url);
  const timeoutMs = options.timeoutMs ?? 15_000;
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    headers[name] = typeof value === "string" ? value : [...value];
  }
  let payload: string | Buffer | undefined = options.body;
  if (options.json !== undefined) {
    payload = JSON.stringify(options.json);
    headers["content-type"] ??= "application/json";
  }
  const started = performance.now();
  return new Promise<HttpReply>((resolve, reject) => {
    const send = target.protocol === "https:" ? httpsRequestRaw : httpRequestRaw;
    const req = send(
      target,
      {
        method: options.method ?? (payload === undefined ? "GET" : "POST"),
        headers,
        ...(options.ca === undefined ? {} : { ca: options.ca }),
        ...(options.fresh === true ? { agent: false } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => {
          clearTimeout(timer);
          const text = Buffer.concat(chunks).toString("utf8");
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text,
            json: parseJson(text),
            elapsedMs: performance.now() - started,
          });
        });
      },
    );
    const timer = setTimeout(() => {
      req.destroy();
      reject(new NoAnswerError(url, timeoutMs));
    }, timeoutMs);
    req.on("error", (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      // A kept-alive socket the server closed just as this request went out: the request
      // never reached a handler. Node's documented remedy is to send it again on a new
      // connection; a server that really resets connections fails that attempt too.
      if (req.reusedSocket && error.code === "ECONNRESET" && options.fresh !== true) {
        httpRequest(url, {
          ...options,
          fresh: true,
          timeoutMs: Math.max(1, timeoutMs - (performance.now() - started)),
        }).then(resolve, reject);
        return;
      }
      reject(error);
    });
    req.end(payload);
  });
}

export interface RawReply {
  /** Status of the first response line, 0 when the server closed without answering. */
  readonly status: number;
  /** Everything received, decoded as latin1 (headers are bytes). */
  readonly text: string;
  readonly elapsedMs: number;
}

/**
 * Writes `bytes` on a fresh connection (TLS when `tls` is given) and collects what comes
 * back until the server closes or `timeoutMs` passes (then what arrived so far).
 */
export function rawRequest(
  host: string,
  port: number,
  bytes: string | Buffer,
  options: { timeoutMs?: number; tls?: { ca: string | Buffer } } = {},
): Promise<RawReply> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const started = performance.now();
  return new Promise<RawReply>((resolve) => {
    const chunks: Buffer[] = [];
    const socket =
      options.tls === undefined
        ? netConnect({ host, port })
        : tlsConnect({ host, port, ca: options.tls.ca, servername: "localhost" });
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      const text = Buffer.concat(chunks).toString("latin1");
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      resolve({
        status: match === null ? 0 : Number(match[1]),
        text,
        elapsedMs: performance.now() - started,
      });
    };
    const timer = setTimeout(finish, timeoutMs);
    socket.on(options.tls === undefined ? "connect" : "secureConnect", () => socket.write(bytes));
    // The answer to HEAD has no body, whatever its Content-Length says.
    const isHead = bytes.slice(0, 5).toString() === "HEAD ";
    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      // One complete answer is enough: a Content-Length body that has fully arrived.
      const text = Buffer.concat(chunks).toString("latin1");
      const end = text.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)/i.exec(text);
      const bodyLength = isHead ? 0 : Number(length?.[1] ?? Number.NaN);
      if (end >= 0 && Buffer.byteLength(text, "latin1") - end - 4 >= bodyLength) finish();
    });
    socket.on("error", finish);
    socket.on("close", finish);
  });
}

/** Header names and values of a raw answer's head, lower-cased names. */
export function rawHeaders(text: string): Array<[string, string]> {
  const head = text.split("\r\n\r\n")[0] ?? "";
  return head
    .split("\r\n")
    .slice(1)
    .map((line) => {
      const colon = line.indexOf(":");
      return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()] as [string, string];
    });
}
