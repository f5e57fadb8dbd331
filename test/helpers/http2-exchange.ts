/**
 * One request on a node:http2 client session, read to the end: what tests of the sidecar's
 * HTTP/2 and gRPC layers need from a reference client.
 *
 *   const reply = await exchange(session, { ":method": "POST", ":path": "/echo" }, body);
 *   reply.headers[":status"]; reply.trailers["grpc-status"]; reply.body
 *
 * Resolves once the stream closes, a reset included (with what arrived before it), so a test
 * asserts on the reply rather than on a client error.
 */
import type { ClientHttp2Session, IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http2";

export interface Http2Reply {
  readonly headers: IncomingHttpHeaders;
  readonly trailers: IncomingHttpHeaders;
  readonly body: Buffer;
}

export function exchange(
  session: ClientHttp2Session,
  headers: OutgoingHttpHeaders,
  body?: Buffer,
): Promise<Http2Reply> {
  return new Promise((resolve) => {
    const stream = session.request(headers);
    let responseHeaders: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (received) => {
      responseHeaders = received;
    });
    stream.on("trailers", (received) => {
      trailers = received;
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", () => undefined);
    stream.on("close", () => resolve({ headers: responseHeaders, trailers, body: Buffer.concat(chunks) }));
    stream.end(body);
  });
}
