/**
 * One request stream of an H2Connection, as the application sees it: the request headers,
 * callbacks for the body and the stream's end, and the calls that answer it. The connection
 * keeps the protocol state (windows, queued output) on it.
 */

/** Request headers: lower-case names, repeated fields joined as HTTP does. */
export type RequestHeaders = Record<string, string>;

/** What a stream needs of its connection. */
export interface StreamOwner {
  isOpen(stream: H2Stream): boolean;
  sendHeaders(stream: H2Stream, block: Buffer, endStream: boolean): void;
  sendData(stream: H2Stream, data: Buffer, endStream: boolean): void;
  sendTrailers(stream: H2Stream, block: Buffer): void;
  sendComplete(stream: H2Stream, headers: Buffer, data: Buffer, trailers: Buffer): void;
}

export type Outgoing = { readonly data: Buffer; readonly end: boolean } | { readonly trailers: Buffer };

export function outgoingBytes(outgoing: Outgoing): number {
  return "trailers" in outgoing ? outgoing.trailers.length : outgoing.data.length;
}

export class H2Stream {
  readonly id: number;
  readonly headers: RequestHeaders;
  onData: ((chunk: Buffer) => void) | undefined;
  onEnd: (() => void) | undefined;
  /** Runs once if the stream closes before this side ended it (reset, connection lost). */
  onClose: (() => void) | undefined;
  /** @internal */ sendWindow: number;
  /** @internal */ receiveWindow: number;
  /** @internal */ unacknowledged = 0;
  /** @internal */ remoteEnded = false;
  /** @internal */ buffered = 0;
  /** @internal */ localEnded = false;
  /** True once response headers went out. */
  headersSent = false;
  /** @internal */ readonly outbox: Outgoing[] = [];
  readonly #connection: StreamOwner;

  /** @internal */
  constructor(
    connection: StreamOwner,
    id: number,
    headers: RequestHeaders,
    sendWindow: number,
    receiveWindow: number,
  ) {
    this.#connection = connection;
    this.id = id;
    this.headers = headers;
    this.sendWindow = sendWindow;
    this.receiveWindow = receiveWindow;
  }

  /** True once the stream is done: ended both ways, reset, or its connection gone. */
  get closed(): boolean {
    return !this.#connection.isOpen(this);
  }

  /** Sends response headers (an encoded block); `endStream` for a headers-only response. */
  respond(block: Buffer, endStream = false): void {
    this.#connection.sendHeaders(this, block, endStream);
  }

  /** Sends response body bytes (flow controlled; queued until the peer's window allows). */
  sendData(data: Buffer, endStream = false): void {
    this.#connection.sendData(this, data, endStream);
  }

  /** Ends the stream with trailers (an encoded block), after any queued data. */
  sendTrailers(block: Buffer): void {
    this.#connection.sendTrailers(this, block);
  }

  /** Headers, one DATA payload and trailers in one write when the windows allow (a unary answer). */
  respondComplete(headers: Buffer, data: Buffer, trailers: Buffer): void {
    this.#connection.sendComplete(this, headers, data, trailers);
  }
}
