import type { Socket } from "node:net";
import {
  CONNECTION_PREFACE,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  Flag,
  FRAME_HEADER_BYTES,
  FrameType,
  frame,
  goAwayFrame,
  H2Error,
  headerFramesSize,
  MAX_FRAME_SIZE_LIMIT,
  MAX_WINDOW,
  Setting,
  settingsFrame,
  uint32Frame,
  writeFrameHeader,
  writeHeaderFrames,
} from "./frames.ts";
import { HpackDecoder, HpackError } from "./hpack.ts";
import { H2Stream, type Outgoing, outgoingBytes, type RequestHeaders, type StreamOwner } from "./stream.ts";

export type { H2Stream, RequestHeaders } from "./stream.ts";

/**
 * The server side of one HTTP/2 connection (RFC 9113) on a socket: framing, stream states,
 * flow control both ways, SETTINGS, PING, GOAWAY and HPACK decoding. It is as much of HTTP/2 as
 * a gRPC server needs, with the checks a server facing a proxy must make: frame sizes, stream
 * ids and states, CONTINUATION sequences, header list size, concurrent streams, windows, and a
 * bound on unread output. Server push and priorities are not used (PRIORITY is ignored).
 *
 * Requests surface as H2Stream objects once their headers are complete; the application sets
 * onData/onEnd/onClose on them and answers with respond / sendData / sendTrailers.
 * Everything written while one batch of input is handled goes out in one socket write.
 */

export interface H2ConnectionOptions {
  readonly maxConcurrentStreams: number;
  readonly maxHeaderListSize: number;
  /** Receive window announced per stream (SETTINGS_INITIAL_WINDOW_SIZE). */
  readonly streamWindow: number;
  /** Receive window of the connection as a whole. */
  readonly connectionWindow: number;
  /** Output the peer leaves unread beyond which the connection is cut (a slow-reading peer). */
  readonly maxBufferedOutput: number;
  /** Request bytes held by open streams beyond which the connection is closed. */
  readonly maxBufferedInput: number;
  /** Time a new connection has to send the preface and its SETTINGS, else it is cut. */
  readonly prefaceTimeoutMs: number;
  readonly onStream: (stream: H2Stream) => void;
}

class ConnectionError extends Error {
  readonly code: number;

  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

/** Headers that belong to a connection and are malformed in HTTP/2 (§8.2.2). */
const CONNECTION_SPECIFIC = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
]);
const REQUEST_PSEUDO = new Set([":method", ":scheme", ":path", ":authority"]);
const UPPER_CASE = /[A-Z]/;
/** Resets of open streams, sent by the peer or provoked by it: a burst, then a sustained rate. */
const RESET_BURST = 1000;
const RESETS_PER_SECOND = 100;
/** How long a peer has to close its side after this side ended the connection. */
const END_GRACE_MS = 1000;

export class H2Connection implements StreamOwner {
  readonly #socket: Socket;
  readonly #options: H2ConnectionOptions;
  readonly #decoder: HpackDecoder;
  readonly #streams = new Map<number, H2Stream>();
  readonly #blocked = new Set<H2Stream>();
  /** Input not yet parsed: an incomplete frame (or preface) and the bytes it needs. */
  #input: Buffer[] = [];
  #inputBytes = 0;
  #inputNeeded = 0;
  /** Resets of streams still being answered that the peer may still make (a token bucket). */
  #resetBudget: number;
  #resetBudgetAt = Date.now();
  #prefaceSeen = false;
  #settingsSeen = false;
  /** The highest stream id the peer has used (streams at or below it are no longer idle). */
  #highestStreamId = 0;
  /** The last stream taken or refused: what GOAWAY reports as processed. */
  #lastStreamId = 0;
  /** This side sent GOAWAY; the peer sent one. */
  #goingAway = false;
  #peerGoingAway = false;
  /** Request bytes held for streams not yet closed, and output queued behind flow control. */
  #bufferedInput = 0;
  #queuedOutput = 0;
  #closed = false;
  /** A header block spread over HEADERS + CONTINUATION frames. */
  #pendingBlock: { streamId: number; endStream: boolean; parts: Buffer[]; size: number } | undefined;
  // Peer's settings and our send window.
  #peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  #peerStreamWindow = DEFAULT_WINDOW;
  #sendWindow = DEFAULT_WINDOW;
  // Our receive window.
  #receiveWindow = DEFAULT_WINDOW;
  #unacknowledged = 0;
  // Output gathered during one batch.
  #output: Buffer[] = [];
  #flushScheduled = false;
  /** Runs when the connection is gone (for the server's bookkeeping). */
  onGone: (() => void) | undefined;

  constructor(socket: Socket, options: H2ConnectionOptions) {
    this.#socket = socket;
    this.#options = options;
    this.#resetBudget = RESET_BURST;
    this.#decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: options.maxHeaderListSize });
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => this.#onInput(chunk));
    socket.on("error", () => undefined);
    socket.on("close", () => this.#gone());
    // A socket that never speaks HTTP/2 must not hold a connection slot for ever.
    const prefaceTimer = setTimeout(() => {
      if (!this.#settingsSeen) this.destroy();
    }, options.prefaceTimeoutMs);
    prefaceTimer.unref();
    socket.once("close", () => clearTimeout(prefaceTimer));
    this.#write(
      settingsFrame([
        [Setting.ENABLE_PUSH, 0],
        [Setting.MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams],
        [Setting.INITIAL_WINDOW_SIZE, options.streamWindow],
        [Setting.MAX_HEADER_LIST_SIZE, options.maxHeaderListSize],
      ]),
    );
    const raise = options.connectionWindow - DEFAULT_WINDOW;
    if (raise > 0) {
      this.#write(uint32Frame(FrameType.WINDOW_UPDATE, 0, raise));
      this.#receiveWindow += raise;
    }
  }

  isOpen(stream: H2Stream): boolean {
    return this.#streams.get(stream.id) === stream;
  }

  /** Graceful close: GOAWAY, no new streams; the socket ends when the open ones are done. */
  goAway(): void {
    if (this.#closed || this.#goingAway) return;
    this.#goingAway = true;
    this.#write(goAwayFrame(this.#lastStreamId, H2Error.NO_ERROR));
    this.#endIfIdle();
  }

  /** Cuts the connection; open streams see onClose. */
  destroy(): void {
    this.#flush();
    this.#socket.destroy();
    this.#gone();
  }

  // ---- input -------------------------------------------------------------------------------

  #onInput(chunk: Buffer): void {
    if (this.#closed) return;
    // A frame arriving in many small reads is joined once, when it is complete.
    this.#input.push(chunk);
    this.#inputBytes += chunk.length;
    if (this.#inputBytes < this.#inputNeeded) return;
    let bytes = this.#input.length === 1 ? chunk : Buffer.concat(this.#input, this.#inputBytes);
    this.#input = [];
    this.#inputBytes = 0;
    this.#inputNeeded = 0;
    try {
      if (!this.#prefaceSeen) {
        const have = Math.min(bytes.length, CONNECTION_PREFACE.length);
        if (!bytes.subarray(0, have).equals(CONNECTION_PREFACE.subarray(0, have))) {
          // Not HTTP/2 with prior knowledge (an HTTP/1 request, TLS to a plaintext port…).
          throw new ConnectionError(H2Error.PROTOCOL_ERROR, "bad connection preface");
        }
        if (have < CONNECTION_PREFACE.length) {
          this.#keep(bytes, CONNECTION_PREFACE.length);
          return;
        }
        this.#prefaceSeen = true;
        bytes = bytes.subarray(CONNECTION_PREFACE.length);
      }
      let offset = 0;
      while (bytes.length - offset >= FRAME_HEADER_BYTES) {
        const length =
          ((bytes[offset] ?? 0) << 16) | ((bytes[offset + 1] ?? 0) << 8) | (bytes[offset + 2] ?? 0);
        if (length > DEFAULT_MAX_FRAME_SIZE)
          throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "frame too large");
        if (bytes.length - offset < FRAME_HEADER_BYTES + length) break;
        this.#onFrame(bytes, offset, length);
        if (this.#closed) return;
        offset += FRAME_HEADER_BYTES + length;
      }
      if (offset < bytes.length) {
        const rest = bytes.subarray(offset);
        const length = rest.length >= 3 ? ((rest[0] ?? 0) << 16) | ((rest[1] ?? 0) << 8) | (rest[2] ?? 0) : 0;
        // An oversized length is refused as soon as the frame header is complete.
        this.#keep(rest, FRAME_HEADER_BYTES + (length <= DEFAULT_MAX_FRAME_SIZE ? length : 0));
      }
      this.#afterInput();
    } catch (error) {
      if (error instanceof ConnectionError) this.#connectionError(error.code);
      else if (error instanceof HpackError) this.#connectionError(H2Error.COMPRESSION_ERROR);
      else this.#connectionError(H2Error.INTERNAL_ERROR);
    }
  }

  /** Keeps an incomplete frame (copied: the read buffer is not ours) until `needed` bytes are in. */
  #keep(bytes: Buffer, needed: number): void {
    this.#input = [Buffer.from(bytes)];
    this.#inputBytes = bytes.length;
    this.#inputNeeded = needed;
  }

  #onFrame(bytes: Buffer, offset: number, length: number): void {
    const type = bytes[offset + 3] ?? 0;
    const flags = bytes[offset + 4] ?? 0;
    const streamId = bytes.readUInt32BE(offset + 5) & 0x7fffffff;
    const payload = bytes.subarray(offset + FRAME_HEADER_BYTES, offset + FRAME_HEADER_BYTES + length);
    if (!this.#settingsSeen && type !== FrameType.SETTINGS) {
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, "the first frame must be SETTINGS");
    }
    if (
      this.#pendingBlock !== undefined &&
      (type !== FrameType.CONTINUATION || streamId !== this.#pendingBlock.streamId)
    ) {
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, "expected CONTINUATION");
    }
    switch (type) {
      case FrameType.DATA:
        this.#onData(streamId, flags, payload);
        return;
      case FrameType.HEADERS:
        this.#onHeaders(streamId, flags, payload);
        return;
      case FrameType.CONTINUATION:
        this.#onContinuation(streamId, flags, payload);
        return;
      case FrameType.RST_STREAM:
        this.#onReset(streamId, payload);
        return;
      case FrameType.SETTINGS:
        this.#onSettings(streamId, flags, payload);
        return;
      case FrameType.PING:
        if (streamId !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "PING on a stream");
        if (payload.length !== 8) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "PING size");
        if ((flags & Flag.ACK) === 0) this.#write(frame(FrameType.PING, Flag.ACK, 0, payload));
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "GOAWAY on a stream");
        if (payload.length < 8) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "GOAWAY size");
        // The peer opens no more streams; the ones open finish, then the connection ends.
        this.#peerGoingAway = true;
        this.#endIfIdle();
        return;
      case FrameType.WINDOW_UPDATE:
        this.#onWindowUpdate(streamId, payload);
        return;
      case FrameType.PRIORITY:
        if (streamId === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "PRIORITY on stream 0");
        if (payload.length !== 5) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "PRIORITY size");
        return;
      case FrameType.PUSH_PROMISE:
        throw new ConnectionError(H2Error.PROTOCOL_ERROR, "a client cannot push");
      default:
        // Unknown frame types are ignored (§4.1).
        return;
    }
  }

  /** The frame's content without padding (and without the priority fields of HEADERS). */
  #content(type: number, flags: number, payload: Buffer): Buffer {
    let start = 0;
    let end = payload.length;
    if ((flags & Flag.PADDED) !== 0) {
      if (payload.length < 1) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "padded frame too short");
      end -= payload[0] ?? 0;
      start = 1;
    }
    if (type === FrameType.HEADERS && (flags & Flag.PRIORITY) !== 0) start += 5;
    if (end < start) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "padding exceeds the frame");
    return payload.subarray(start, end);
  }

  #onData(streamId: number, flags: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "DATA on stream 0");
    if (streamId > this.#highestStreamId)
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, "DATA on an idle stream");
    // Flow control counts the whole payload, padding included, whatever the stream's state.
    this.#receiveWindow -= payload.length;
    if (this.#receiveWindow < 0)
      throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, "connection window exceeded");
    this.#unacknowledged += payload.length;
    const content = this.#content(FrameType.DATA, flags, payload);
    const stream = this.#streams.get(streamId);
    // A stream this side closed or reset: what was in flight is dropped.
    if (stream === undefined) return;
    if (stream.remoteEnded) {
      this.#streamError(stream, H2Error.STREAM_CLOSED);
      return;
    }
    stream.receiveWindow -= payload.length;
    if (stream.receiveWindow < 0) {
      this.#streamError(stream, H2Error.FLOW_CONTROL_ERROR);
      return;
    }
    stream.unacknowledged += payload.length;
    // Window credit is returned as data arrives, so what streams hold is bounded here.
    stream.buffered += content.length;
    this.#bufferedInput += content.length;
    if (this.#bufferedInput > this.#options.maxBufferedInput) {
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, "too much request data held");
    }
    const ended = (flags & Flag.END_STREAM) !== 0;
    if (content.length > 0) this.#deliver(stream, stream.onData, content);
    if (ended) this.#remoteEnd(stream);
    else if (stream.unacknowledged >= this.#options.streamWindow / 2 && this.isOpen(stream)) {
      this.#write(uint32Frame(FrameType.WINDOW_UPDATE, stream.id, stream.unacknowledged));
      stream.receiveWindow += stream.unacknowledged;
      stream.unacknowledged = 0;
    }
  }

  #onHeaders(streamId: number, flags: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "HEADERS on stream 0");
    if (streamId % 2 === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "even stream id from a client");
    const content = this.#content(FrameType.HEADERS, flags, payload);
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if ((flags & Flag.END_HEADERS) !== 0) {
      this.#onHeaderBlock(streamId, endStream, content);
      return;
    }
    this.#pendingBlock = { streamId, endStream, parts: [Buffer.from(content)], size: content.length };
  }

  #onContinuation(streamId: number, flags: number, payload: Buffer): void {
    const pending = this.#pendingBlock;
    if (pending === undefined || pending.streamId !== streamId) {
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, "unexpected CONTINUATION");
    }
    // Frame headers count too: a flood of empty CONTINUATION frames must reach the limit.
    pending.size += FRAME_HEADER_BYTES + payload.length;
    // Compressed, a valid block is smaller than the decoded list may be: stop a CONTINUATION flood.
    if (pending.size > this.#options.maxHeaderListSize) {
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, "header block too large");
    }
    if (payload.length > 0) pending.parts.push(Buffer.from(payload));
    if ((flags & Flag.END_HEADERS) === 0) return;
    this.#pendingBlock = undefined;
    this.#onHeaderBlock(streamId, pending.endStream, Buffer.concat(pending.parts));
  }

  #onHeaderBlock(streamId: number, endStream: boolean, block: Buffer): void {
    // The block is decoded whatever becomes of the stream: the HPACK table must stay in step.
    const headers: RequestHeaders = Object.create(null) as RequestHeaders;
    let malformed = false;
    let regularSeen = false;
    this.#decoder.decode(block, (name, value) => {
      if (name.startsWith(":")) {
        if (regularSeen || !REQUEST_PSEUDO.has(name) || headers[name] !== undefined) malformed = true;
      } else {
        regularSeen = true;
        if (CONNECTION_SPECIFIC.has(name) || (name === "te" && value !== "trailers")) malformed = true;
      }
      if (UPPER_CASE.test(name)) malformed = true;
      const previous = headers[name];
      headers[name] =
        previous === undefined ? value : `${previous}${name === "cookie" ? "; " : ", "}${value}`;
    });

    const existing = this.#streams.get(streamId);
    if (existing !== undefined) {
      // Trailers: they end the stream and carry no pseudo-headers.
      if (existing.remoteEnded) this.#streamError(existing, H2Error.STREAM_CLOSED);
      else if (!endStream || Object.keys(headers).some((n) => n.startsWith(":"))) {
        this.#streamError(existing, H2Error.PROTOCOL_ERROR);
      } else this.#remoteEnd(existing);
      return;
    }
    if (streamId <= this.#highestStreamId) {
      // A stream that is closed (or was refused): nothing to do beyond decoding.
      return;
    }
    this.#highestStreamId = streamId;
    // After this side's GOAWAY new streams are ignored; the peer may retry them elsewhere.
    if (this.#goingAway) return;
    this.#lastStreamId = streamId;
    if (this.#streams.size >= this.#options.maxConcurrentStreams) {
      this.#write(uint32Frame(FrameType.RST_STREAM, streamId, H2Error.REFUSED_STREAM));
      return;
    }
    const missing =
      headers[":method"] === undefined || headers[":path"] === undefined || headers[":scheme"] === undefined;
    if (malformed || missing) {
      this.#write(uint32Frame(FrameType.RST_STREAM, streamId, H2Error.PROTOCOL_ERROR));
      return;
    }
    const stream = new H2Stream(this, streamId, headers, this.#peerStreamWindow, this.#options.streamWindow);
    // Known before the application answers: an answer to a complete request needs no reset.
    stream.remoteEnded = endStream;
    this.#streams.set(streamId, stream);
    this.#deliver(stream, this.#options.onStream, stream);
    if (endStream && this.isOpen(stream)) this.#deliver(stream, stream.onEnd, undefined);
  }

  #onReset(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "RST_STREAM on stream 0");
    if (payload.length !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "RST_STREAM size");
    if (streamId > this.#highestStreamId)
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
    const stream = this.#streams.get(streamId);
    if (stream === undefined) return;
    this.#close(stream, true);
    this.#chargeReset();
  }

  /**
   * Opening streams and having them reset at once makes this side start work it then drops —
   * by the peer's RST_STREAM (CVE-2023-44487, "rapid reset") or by a frame that makes this side
   * reset the stream (CVE-2025-8671, "MadeYouReset"): past a budget of such resets the
   * connection is closed.
   */
  #chargeReset(): void {
    const now = Date.now();
    this.#resetBudget = Math.min(
      RESET_BURST,
      this.#resetBudget + ((now - this.#resetBudgetAt) / 1000) * RESETS_PER_SECOND,
    );
    this.#resetBudgetAt = now;
    if (--this.#resetBudget < 0)
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, "too many stream resets");
  }

  #onSettings(streamId: number, flags: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "SETTINGS on a stream");
    if ((flags & Flag.ACK) !== 0) {
      if (payload.length !== 0)
        throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
      return;
    }
    if (payload.length % 6 !== 0) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "SETTINGS size");
    this.#settingsSeen = true;
    let initialWindow: number | undefined;
    for (let at = 0; at < payload.length; at += 6) {
      const id = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      if (id === Setting.ENABLE_PUSH && value > 1)
        throw new ConnectionError(H2Error.PROTOCOL_ERROR, "ENABLE_PUSH");
      if (id === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE");
        initialWindow = value;
      }
      if (id === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_FRAME_SIZE_LIMIT) {
          throw new ConnectionError(H2Error.PROTOCOL_ERROR, "MAX_FRAME_SIZE");
        }
        this.#peerMaxFrameSize = value;
      }
      // HEADER_TABLE_SIZE: this side's encoder never indexes (see encodeHeaderBlock).
    }
    if (initialWindow !== undefined) {
      // The change applies to every open stream's send window (§6.9.2), once per frame.
      const delta = initialWindow - this.#peerStreamWindow;
      this.#peerStreamWindow = initialWindow;
      for (const stream of this.#streams.values()) {
        stream.sendWindow += delta;
        if (stream.sendWindow > MAX_WINDOW)
          throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, "window overflow");
      }
    }
    this.#write(frame(FrameType.SETTINGS, Flag.ACK, 0));
    this.#drainBlocked();
  }

  #onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, "WINDOW_UPDATE size");
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, "zero window increment");
      this.#sendWindow += increment;
      if (this.#sendWindow > MAX_WINDOW)
        throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, "window overflow");
    } else {
      if (streamId > this.#highestStreamId)
        throw new ConnectionError(H2Error.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
      const stream = this.#streams.get(streamId);
      if (stream === undefined) return;
      stream.sendWindow += increment;
      if (increment === 0 || stream.sendWindow > MAX_WINDOW) {
        this.#streamError(stream, increment === 0 ? H2Error.PROTOCOL_ERROR : H2Error.FLOW_CONTROL_ERROR);
        return;
      }
    }
    this.#drainBlocked();
  }

  #remoteEnd(stream: H2Stream): void {
    stream.remoteEnded = true;
    if (stream.localEnded) this.#close(stream, false);
    else this.#deliver(stream, stream.onEnd, undefined);
  }

  /** Runs an application callback; if it throws, only its stream is reset. */
  #deliver<T>(stream: H2Stream, callback: ((value: T) => void) | undefined, value: T): void {
    try {
      callback?.(value);
    } catch {
      if (this.isOpen(stream)) this.#streamError(stream, H2Error.INTERNAL_ERROR);
    }
  }

  #afterInput(): void {
    if (this.#unacknowledged >= this.#options.connectionWindow / 2) {
      this.#write(uint32Frame(FrameType.WINDOW_UPDATE, 0, this.#unacknowledged));
      this.#receiveWindow += this.#unacknowledged;
      this.#unacknowledged = 0;
    }
  }

  // ---- output ------------------------------------------------------------------------------

  sendHeaders(stream: H2Stream, block: Buffer, endStream: boolean): void {
    if (!this.isOpen(stream) || stream.localEnded) return;
    const out = Buffer.allocUnsafe(headerFramesSize(block.length, this.#peerMaxFrameSize));
    writeHeaderFrames(out, 0, stream.id, block, endStream, this.#peerMaxFrameSize);
    stream.headersSent = true;
    this.#write(out);
    if (endStream) this.#localEnd(stream);
  }

  sendData(stream: H2Stream, data: Buffer, endStream: boolean): void {
    if (!this.isOpen(stream) || stream.localEnded) return;
    this.#enqueue(stream, { data, end: endStream });
  }

  sendTrailers(stream: H2Stream, block: Buffer): void {
    if (!this.isOpen(stream) || stream.localEnded) return;
    this.#enqueue(stream, { trailers: block });
  }

  #enqueue(stream: H2Stream, outgoing: Outgoing): void {
    stream.outbox.push(outgoing);
    this.#queuedOutput += outgoingBytes(outgoing);
    this.#drain(stream);
    // A peer that keeps its windows shut must not make this side queue without bound.
    if (this.#queuedOutput + this.#socket.writableLength > this.#options.maxBufferedOutput) this.destroy();
  }

  sendComplete(stream: H2Stream, headers: Buffer, data: Buffer, trailers: Buffer): void {
    if (!this.isOpen(stream) || stream.localEnded) return;
    const maxFrame = this.#peerMaxFrameSize;
    const fits =
      stream.outbox.length === 0 &&
      data.length <= maxFrame &&
      data.length <= stream.sendWindow &&
      data.length <= this.#sendWindow;
    if (!fits) {
      this.sendHeaders(stream, headers, false);
      this.sendData(stream, data, false);
      this.sendTrailers(stream, trailers);
      return;
    }
    // The common case: three frames, one buffer.
    const size =
      headerFramesSize(headers.length, maxFrame) +
      FRAME_HEADER_BYTES +
      data.length +
      headerFramesSize(trailers.length, maxFrame);
    const out = Buffer.allocUnsafe(size);
    let at = writeHeaderFrames(out, 0, stream.id, headers, false, maxFrame);
    writeFrameHeader(out, at, data.length, FrameType.DATA, 0, stream.id);
    out.set(data, at + FRAME_HEADER_BYTES);
    at += FRAME_HEADER_BYTES + data.length;
    writeHeaderFrames(out, at, stream.id, trailers, true, maxFrame);
    stream.sendWindow -= data.length;
    this.#sendWindow -= data.length;
    stream.headersSent = true;
    this.#write(out);
    this.#localEnd(stream);
  }

  /** Sends what the windows allow of the stream's queued output. */
  #drain(stream: H2Stream): void {
    const maxFrame = this.#peerMaxFrameSize;
    while (stream.outbox.length > 0 && this.isOpen(stream)) {
      const next = stream.outbox[0] as Outgoing;
      if ("trailers" in next) {
        stream.outbox.shift();
        this.#queuedOutput -= next.trailers.length;
        const out = Buffer.allocUnsafe(headerFramesSize(next.trailers.length, maxFrame));
        writeHeaderFrames(out, 0, stream.id, next.trailers, true, maxFrame);
        this.#write(out);
        this.#localEnd(stream);
        return;
      }
      const allowed = Math.min(next.data.length, maxFrame, stream.sendWindow, this.#sendWindow);
      // A window can be negative after the peer lowered INITIAL_WINDOW_SIZE (§6.9.2).
      if (allowed <= 0 && next.data.length > 0) {
        this.#blocked.add(stream);
        return;
      }
      const last = allowed === next.data.length;
      this.#write(
        frame(
          FrameType.DATA,
          last && next.end ? Flag.END_STREAM : 0,
          stream.id,
          next.data.subarray(0, allowed),
        ),
      );
      stream.sendWindow -= allowed;
      this.#sendWindow -= allowed;
      this.#queuedOutput -= allowed;
      if (last) {
        stream.outbox.shift();
        if (next.end) this.#localEnd(stream);
      } else {
        stream.outbox[0] = { data: next.data.subarray(allowed), end: next.end };
      }
    }
    this.#blocked.delete(stream);
  }

  #drainBlocked(): void {
    for (const stream of [...this.#blocked]) {
      if (this.#sendWindow <= 0) return;
      this.#drain(stream);
    }
  }

  #localEnd(stream: H2Stream): void {
    stream.localEnded = true;
    if (stream.remoteEnded) {
      this.#close(stream, false);
      return;
    }
    // Answered before the request was complete: tell the client to stop sending (§8.1).
    this.#write(uint32Frame(FrameType.RST_STREAM, stream.id, H2Error.NO_ERROR));
    this.#close(stream, false);
  }

  /** Forgets the stream; `aborted` runs its onClose (the peer reset it or the connection went). */
  #close(stream: H2Stream, aborted: boolean): void {
    if (!this.isOpen(stream)) return;
    this.#streams.delete(stream.id);
    this.#blocked.delete(stream);
    this.#bufferedInput -= stream.buffered;
    for (const pending of stream.outbox.splice(0)) this.#queuedOutput -= outgoingBytes(pending);
    if (aborted || !stream.localEnded) stream.onClose?.();
    this.#endIfIdle();
  }

  /** Resets a stream the peer got wrong (called while its input is handled: may throw ConnectionError). */
  #streamError(stream: H2Stream, code: number): void {
    this.#write(uint32Frame(FrameType.RST_STREAM, stream.id, code));
    this.#close(stream, true);
    this.#chargeReset();
  }

  #connectionError(code: number): void {
    if (this.#closed) return;
    this.#write(goAwayFrame(this.#lastStreamId, code));
    this.#flush();
    this.#endSocket();
    this.#gone();
  }

  #endIfIdle(): void {
    if (!(this.#goingAway || this.#peerGoingAway) || this.#streams.size > 0 || this.#closed) return;
    this.#flush();
    this.#endSocket();
  }

  /** Ends the socket, and cuts it if the peer does not close its side soon. */
  #endSocket(): void {
    this.#socket.end();
    setTimeout(() => this.#socket.destroy(), END_GRACE_MS).unref();
  }

  #write(bytes: Buffer): void {
    if (this.#closed) return;
    this.#output.push(bytes);
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    process.nextTick(() => this.#flush());
  }

  #flush(): void {
    this.#flushScheduled = false;
    const output = this.#output;
    if (output.length === 0 || this.#socket.destroyed) {
      this.#output = [];
      return;
    }
    this.#output = [];
    this.#socket.write(output.length === 1 ? (output[0] as Buffer) : Buffer.concat(output));
    if (this.#socket.writableLength + this.#queuedOutput > this.#options.maxBufferedOutput) this.destroy();
  }

  #gone(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#output = [];
    const open = [...this.#streams.values()];
    this.#streams.clear();
    this.#blocked.clear();
    for (const stream of open) stream.onClose?.();
    this.onGone?.();
  }
}
