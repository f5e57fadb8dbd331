/**
 * A minimal gRPC unary client speaking HTTP/2 frames directly on a TCP socket, for load
 * generation only (the role ghz or h2load play for Go and C servers). It sends one
 * pre-encoded request over and over on one connection and reports each call's outcome.
 *
 * Why not node:http2 or grpc-js: each of their calls creates a stream object, event emitters
 * and header objects — about 200 µs of generator CPU per call on the bench VM and scavenges of
 * 1–6 ms in the generator, which then show up in the measured server's tail latency. Here a
 * call is one buffer copy and one socket write.
 *
 * What it does not do (it need not, for the servers it is pointed at): HPACK decoding (it never
 * reads response headers or trailers: a call with a response message ending its stream is a
 * success, a stream ending without one — gRPC's trailers-only error — or reset is an error; the
 * bench checks statuses with a real client before each run), CONTINUATION frames, TLS, or
 * more than 2^30 calls per connection. It does keep to the server's
 * SETTINGS_MAX_CONCURRENT_STREAMS, as Envoy does: calls past it wait for a stream to end.
 */

import { connect, type Socket } from "node:net";

/** A call's result: the response message (valid only during the callback) or an error. */
export type CallDone = (response: Uint8Array | undefined) => void;

export interface GrpcH2Client {
  /** Sends the connection's request once; `done` runs when its stream ends. */
  call(done: CallDone): void;
  close(): void;
}

export interface GrpcH2ClientOptions {
  readonly host: string;
  readonly port: number;
  /** e.g. "/envoy.service.auth.v3.Authorization/Check" */
  readonly path: string;
  /** The serialized request message (without gRPC's 5-byte prefix). */
  readonly message: Uint8Array;
}

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const FRAME_HEADER = 9;
const FrameType = {
  Data: 0,
  Headers: 1,
  RstStream: 3,
  Settings: 4,
  Ping: 6,
  Goaway: 7,
  WindowUpdate: 8,
} as const;
const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;
const MAX_WINDOW = 0x7fffffff;
const SETTINGS_ENABLE_PUSH = 2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 3;
const SETTINGS_INITIAL_WINDOW_SIZE = 4;
/** Return connection-level flow-control credit once this much data has arrived. */
const WINDOW_REFILL = 1 << 20;

function frame(type: number, flags: number, streamId: number, payload: Uint8Array): Buffer {
  const bytes = Buffer.alloc(FRAME_HEADER + payload.length);
  bytes.writeUIntBE(payload.length, 0, 3);
  bytes[3] = type;
  bytes[4] = flags;
  bytes.writeUInt32BE(streamId, 5);
  bytes.set(payload, FRAME_HEADER);
  return bytes;
}

/** HPACK integer with an N-bit prefix (RFC 7541 §5.1). */
function hpackInteger(value: number, prefixBits: number): number[] {
  const limit = (1 << prefixBits) - 1;
  if (value < limit) return [value];
  const bytes = [limit];
  let rest = value - limit;
  while (rest >= 128) {
    bytes.push((rest & 0x7f) | 0x80);
    rest >>>= 7;
  }
  bytes.push(rest);
  return bytes;
}

/** "Literal header field without indexing — new name", no Huffman (RFC 7541 §6.2.2). */
function hpackLiteral(name: string, value: string): Buffer {
  const nameBytes = Buffer.from(name, "latin1");
  const valueBytes = Buffer.from(value, "latin1");
  return Buffer.concat([
    Buffer.from([0, ...hpackInteger(nameBytes.length, 7)]),
    nameBytes,
    Buffer.from(hpackInteger(valueBytes.length, 7)),
    valueBytes,
  ]);
}

function uint32(value: number): Buffer {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value, 0);
  return bytes;
}

/** HEADERS + DATA(END_STREAM) for one call; the stream id is patched in per call. */
function requestTemplate(options: GrpcH2ClientOptions): { bytes: Buffer; dataFrameOffset: number } {
  const block = Buffer.concat([
    hpackLiteral(":method", "POST"),
    hpackLiteral(":scheme", "http"),
    hpackLiteral(":path", options.path),
    hpackLiteral(":authority", `${options.host}:${options.port}`),
    hpackLiteral("content-type", "application/grpc"),
    hpackLiteral("te", "trailers"),
  ]);
  const grpcMessage = Buffer.alloc(5 + options.message.length);
  grpcMessage.writeUInt32BE(options.message.length, 1);
  grpcMessage.set(options.message, 5);
  const headers = frame(FrameType.Headers, FLAG_END_HEADERS, 1, block);
  return {
    bytes: Buffer.concat([headers, frame(FrameType.Data, FLAG_END_STREAM, 1, grpcMessage)]),
    dataFrameOffset: headers.length,
  };
}

function connectionStart(): Buffer {
  const settings = Buffer.concat([
    Buffer.from([0, SETTINGS_ENABLE_PUSH]),
    uint32(0),
    Buffer.from([0, SETTINGS_INITIAL_WINDOW_SIZE]),
    uint32(MAX_WINDOW),
  ]);
  return Buffer.concat([
    PREFACE,
    frame(FrameType.Settings, 0, 0, settings),
    frame(FrameType.WindowUpdate, 0, 0, uint32(MAX_WINDOW - 65_535)),
  ]);
}

interface PendingCall {
  readonly done: CallDone;
  /** The response's gRPC message, once its DATA frame has arrived. */
  response: Uint8Array | undefined;
}

/** Skips padding and priority fields to reach a DATA or HEADERS frame's content. */
function framePayload(bytes: Buffer, start: number, length: number, type: number, flags: number): Buffer {
  let from = start;
  let to = start + length;
  if ((flags & FLAG_PADDED) !== 0) {
    to -= bytes[from] ?? 0;
    from += 1;
  }
  if (type === FrameType.Headers && (flags & FLAG_PRIORITY) !== 0) from += 5;
  return bytes.subarray(from, to);
}

export async function connectGrpcH2Client(options: GrpcH2ClientOptions): Promise<GrpcH2Client> {
  const socket: Socket = connect(options.port, options.host);
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const template = requestTemplate(options);
  const pending = new Map<number, PendingCall>();
  let nextStreamId = 1;
  let unread: Buffer | undefined;
  let unacknowledgedData = 0;
  /** The server's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited until it says otherwise). */
  let maxStreams = Number.POSITIVE_INFINITY;
  /** Calls waiting for a stream slot, oldest first. */
  const waiting: CallDone[] = [];
  let closed = false;

  const send = (done: CallDone): void => {
    const streamId = nextStreamId;
    nextStreamId += 2;
    const request = Buffer.from(template.bytes);
    request.writeUInt32BE(streamId, 5);
    request.writeUInt32BE(streamId, template.dataFrameOffset + 5);
    pending.set(streamId, { done, response: undefined });
    socket.write(request);
  };
  const finish = (streamId: number, call: PendingCall, response: Uint8Array | undefined): void => {
    pending.delete(streamId);
    const next = waiting.shift();
    if (next !== undefined) send(next);
    call.done(response);
  };
  const failAll = (): void => {
    closed = true;
    for (const call of pending.values()) call.done(undefined);
    pending.clear();
    for (const done of waiting.splice(0)) done(undefined);
  };
  const readSettings = (bytes: Buffer, start: number, length: number): void => {
    for (let at = start; at + 6 <= start + length; at += 6) {
      if (bytes.readUInt16BE(at) === SETTINGS_MAX_CONCURRENT_STREAMS) maxStreams = bytes.readUInt32BE(at + 2);
    }
    while (waiting.length > 0 && pending.size < maxStreams) send(waiting.shift() as CallDone);
  };
  const onFrame = (bytes: Buffer, start: number, length: number): void => {
    const type = bytes[start + 3] ?? 0;
    const flags = bytes[start + 4] ?? 0;
    const streamId = bytes.readUInt32BE(start + 5) & 0x7fffffff;
    const payloadStart = start + FRAME_HEADER;
    if (streamId === 0) {
      if (type === FrameType.Settings && (flags & FLAG_ACK) === 0) {
        socket.write(frame(FrameType.Settings, FLAG_ACK, 0, new Uint8Array(0)));
        readSettings(bytes, payloadStart, length);
      } else if (type === FrameType.Ping && (flags & FLAG_ACK) === 0)
        socket.write(frame(FrameType.Ping, FLAG_ACK, 0, bytes.subarray(payloadStart, payloadStart + length)));
      else if (type === FrameType.Goaway) failAll();
      return;
    }
    const call = pending.get(streamId);
    if (type === FrameType.Data) unacknowledgedData += length;
    if (call === undefined) return;
    if (type === FrameType.RstStream) {
      finish(streamId, call, undefined);
      return;
    }
    if (type === FrameType.Data && call.response === undefined) {
      // One gRPC message in one DATA frame (the servers here send small responses that way).
      call.response = framePayload(bytes, payloadStart, length, type, flags).subarray(5);
    }
    if ((type === FrameType.Data || type === FrameType.Headers) && (flags & FLAG_END_STREAM) !== 0) {
      finish(streamId, call, call.response);
    }
  };
  socket.on("data", (chunk: Buffer) => {
    const bytes = unread === undefined ? chunk : Buffer.concat([unread, chunk]);
    let offset = 0;
    while (bytes.length - offset >= FRAME_HEADER) {
      const length = bytes.readUIntBE(offset, 3);
      if (bytes.length - offset < FRAME_HEADER + length) break;
      onFrame(bytes, offset, length);
      offset += FRAME_HEADER + length;
    }
    unread = offset === bytes.length ? undefined : bytes.subarray(offset);
    if (unacknowledgedData >= WINDOW_REFILL) {
      socket.write(frame(FrameType.WindowUpdate, 0, 0, uint32(unacknowledgedData)));
      unacknowledgedData = 0;
    }
  });
  socket.on("error", failAll);
  socket.on("close", failAll);
  socket.write(connectionStart());

  return {
    call(done) {
      if (closed) done(undefined);
      else if (pending.size < maxStreams) send(done);
      else waiting.push(done);
    },
    close() {
      socket.destroy();
    },
  };
}
