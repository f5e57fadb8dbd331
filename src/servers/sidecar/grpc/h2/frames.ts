/** HTTP/2 framing constants and frame building (RFC 9113 §4, §6). */

export const CONNECTION_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
export const FRAME_HEADER_BYTES = 9;
/** The frame size every endpoint must accept, and the largest this server accepts (§4.2). */
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
export const MAX_FRAME_SIZE_LIMIT = 16_777_215;
export const DEFAULT_WINDOW = 65_535;
export const MAX_WINDOW = 2 ** 31 - 1;

export const FrameType = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

export const Setting = {
  HEADER_TABLE_SIZE: 1,
  ENABLE_PUSH: 2,
  MAX_CONCURRENT_STREAMS: 3,
  INITIAL_WINDOW_SIZE: 4,
  MAX_FRAME_SIZE: 5,
  MAX_HEADER_LIST_SIZE: 6,
} as const;

export const H2Error = {
  NO_ERROR: 0,
  PROTOCOL_ERROR: 1,
  INTERNAL_ERROR: 2,
  FLOW_CONTROL_ERROR: 3,
  STREAM_CLOSED: 5,
  FRAME_SIZE_ERROR: 6,
  REFUSED_STREAM: 7,
  CANCEL: 8,
  COMPRESSION_ERROR: 9,
  ENHANCE_YOUR_CALM: 11,
} as const;

/** Writes a frame header at `offset` of `out`. */
export function writeFrameHeader(
  out: Buffer,
  offset: number,
  length: number,
  type: number,
  flags: number,
  streamId: number,
): void {
  out[offset] = (length >>> 16) & 0xff;
  out[offset + 1] = (length >>> 8) & 0xff;
  out[offset + 2] = length & 0xff;
  out[offset + 3] = type;
  out[offset + 4] = flags;
  out.writeUInt32BE(streamId, offset + 5);
}

/** One frame with its payload. */
export function frame(type: number, flags: number, streamId: number, payload?: Uint8Array): Buffer {
  const length = payload?.length ?? 0;
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + length);
  writeFrameHeader(out, 0, length, type, flags, streamId);
  if (payload !== undefined) out.set(payload, FRAME_HEADER_BYTES);
  return out;
}

/** A 4-byte big-endian payload (WINDOW_UPDATE, RST_STREAM). */
export function uint32Frame(type: number, streamId: number, value: number): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + 4);
  writeFrameHeader(out, 0, 4, type, 0, streamId);
  out.writeUInt32BE(value, FRAME_HEADER_BYTES);
  return out;
}

export function settingsFrame(settings: ReadonlyArray<readonly [number, number]>): Buffer {
  const payload = Buffer.allocUnsafe(settings.length * 6);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, i * 6);
    payload.writeUInt32BE(value, i * 6 + 2);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

export function goAwayFrame(lastStreamId: number, code: number): Buffer {
  const payload = Buffer.allocUnsafe(8);
  payload.writeUInt32BE(lastStreamId, 0);
  payload.writeUInt32BE(code, 4);
  return frame(FrameType.GOAWAY, 0, 0, payload);
}

/**
 * A header block as HEADERS (+ CONTINUATION frames when it exceeds the peer's frame size),
 * written into `out` at `offset`; returns the new offset. `out` must have room: see headerFramesSize.
 */
export function writeHeaderFrames(
  out: Buffer,
  offset: number,
  streamId: number,
  block: Uint8Array,
  endStream: boolean,
  maxFrameSize: number,
): number {
  let at = offset;
  let sent = 0;
  let type: number = FrameType.HEADERS;
  do {
    const length = Math.min(maxFrameSize, block.length - sent);
    const last = sent + length === block.length;
    const flags =
      (last ? Flag.END_HEADERS : 0) | (type === FrameType.HEADERS && endStream ? Flag.END_STREAM : 0);
    writeFrameHeader(out, at, length, type, flags, streamId);
    out.set(block.subarray(sent, sent + length), at + FRAME_HEADER_BYTES);
    at += FRAME_HEADER_BYTES + length;
    sent += length;
    type = FrameType.CONTINUATION;
  } while (sent < block.length);
  return at;
}

export function headerFramesSize(blockLength: number, maxFrameSize: number): number {
  return blockLength + FRAME_HEADER_BYTES * Math.max(1, Math.ceil(blockLength / maxFrameSize));
}
